"""A fake kubelet for tests and the lab: a kubelet-shaped directory with real gRPC sockets.

Why: the exporter (and later the device plugin) must be exercised against what a node
really offers, not against mocks. FakeKubelet owns a tree laid out like /var/lib/kubelet:

    <root>/pod-resources/kubelet.sock                  pod-resources v1 (FakePodResources)
    <root>/device-plugins/kubelet_internal_checkpoint  the device manager's checkpoint
    <root>/device-plugins/                             where the Registration server and the
                                                       plugins' sockets will live

It holds one allocation table (pods and allocatable devices). Every change replaces the
table atomically and rewrites the checkpoint, so pod UIDs can be joined as on a real node
(the checkpoint files every device under NUMA key -1; `List` still reports `numa_node`).
It must never answer differently from a kubelet except through the explicit test knobs
(`fail_next`), and never serve from a half-updated table.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType

import grpc

from gpufleet.kubelet.checkpoint import CHECKPOINT_NAME, CheckpointEntry, write_checkpoint
from gpufleet.kubelet.fake_podresources import (
    KUBELET_RATE_LIMIT,
    ContainerAllocation,
    DeviceAllocation,
    FakePodResources,
    NodeAllocations,
    PodAllocation,
    RateLimit,
)

__all__ = [
    "ContainerAllocation",
    "DeviceAllocation",
    "FakeKubelet",
    "NodeAllocations",
    "PodAllocation",
    "RateLimit",
    "checkpoint_entries",
    "registered_devices",
]


class FakeKubelet:
    """A kubelet stand-in rooted at `root` (use a short path: unix sockets allow 107 bytes).

    Thread-safe. Table changes may be made before `start()` and while serving. Use as a
    context manager to start and stop it.
    """

    def __init__(
        self,
        root: Path,
        *,
        get_disabled: bool = False,
        rate_limit: RateLimit | None = KUBELET_RATE_LIMIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = Path(root)
        self.pod_resources_socket = self.root / "pod-resources" / "kubelet.sock"
        self.device_plugins_dir = self.root / "device-plugins"
        self.checkpoint_path = self.device_plugins_dir / CHECKPOINT_NAME
        self._lock = threading.Lock()
        self._node = NodeAllocations()
        self.pod_resources = FakePodResources(
            self.pod_resources_socket,
            view=lambda: self._node,
            get_disabled=get_disabled,
            rate_limit=rate_limit,
            clock=clock,
        )

    # -- the allocation table ------------------------------------------------------------

    @property
    def pods(self) -> tuple[PodAllocation, ...]:
        return self._node.pods

    @property
    def allocatable(self) -> tuple[DeviceAllocation, ...]:
        return self._node.allocatable

    def set_pods(self, pods: Iterable[PodAllocation]) -> None:
        """Replace all pods; `List` returns them in this order."""
        with self._lock:
            self._commit(pods=tuple(pods))

    def add_pod(self, pod: PodAllocation) -> None:
        """Add `pod`, replacing a pod with the same namespace and name in place."""
        with self._lock:
            pods = list(self._node.pods)
            index = _find(pods, pod.namespace, pod.name)
            if index is None:
                pods.append(pod)
            else:
                pods[index] = pod
            self._commit(pods=tuple(pods))

    def remove_pod(self, namespace: str, name: str) -> None:
        """Remove a pod; KeyError if there is none by that name."""
        with self._lock:
            pods = list(self._node.pods)
            index = _find(pods, namespace, name)
            if index is None:
                raise KeyError(f"pod {name} in namespace {namespace} not in the fake kubelet")
            del pods[index]
            self._commit(pods=tuple(pods))

    def set_allocatable(self, devices: Iterable[DeviceAllocation]) -> None:
        """Replace the healthy devices `GetAllocatableResources` reports."""
        with self._lock:
            self._commit(allocatable=tuple(devices))

    # -- knobs that mimic real kubelets --------------------------------------------------

    @property
    def get_disabled(self) -> bool:
        """True: `Get` fails as on kubelets with the KubeletPodResourcesGet gate off."""
        return self.pod_resources.get_disabled

    @get_disabled.setter
    def get_disabled(self, value: bool) -> None:
        self.pod_resources.get_disabled = value

    def set_rate_limit(self, limit: RateLimit | None) -> None:
        """Switch the pod-resources token bucket on (full) or off (None)."""
        self.pod_resources.set_rate_limit(limit)

    def fail_next(
        self, n: int, code: grpc.StatusCode, message: str = "injected by fake kubelet"
    ) -> None:
        """Make the next `n` pod-resources calls fail with `code`."""
        self.pod_resources.fail_next(n, code, message)

    @property
    def calls(self) -> dict[str, int]:
        """Pod-resources calls received per method, rejected ones included."""
        return self.pod_resources.calls

    def reset_calls(self) -> None:
        self.pod_resources.reset_calls()

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def serving(self) -> bool:
        return self.pod_resources.serving

    def start(self) -> None:
        """Create the tree, write the checkpoint and serve; returns once sockets accept."""
        with self._lock:
            self._commit()
        self.pod_resources.start()

    def stop(self) -> None:
        """Stop serving and remove the sockets; the checkpoint stays, as on a node."""
        self.pod_resources.stop()

    def restart(self) -> None:
        """Like a kubelet restart: the sockets disappear, then come back on the same paths."""
        self.stop()
        self.start()

    def __enter__(self) -> FakeKubelet:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _commit(
        self,
        *,
        pods: tuple[PodAllocation, ...] | None = None,
        allocatable: tuple[DeviceAllocation, ...] | None = None,
    ) -> None:
        """Validate and publish a new table, then rewrite the checkpoint. Caller holds _lock."""
        node = NodeAllocations(
            pods=self._node.pods if pods is None else pods,
            allocatable=self._node.allocatable if allocatable is None else allocatable,
        )
        _validate(node)
        self.device_plugins_dir.mkdir(parents=True, exist_ok=True)
        write_checkpoint(self.checkpoint_path, checkpoint_entries(node), registered_devices(node))
        self._node = node


def checkpoint_entries(node: NodeAllocations) -> tuple[CheckpointEntry, ...]:
    """The checkpoint's entries for `node`: one per (pod, container, resource), in order."""
    entries = []
    for pod in node.pods:
        for container in pod.containers:
            per_resource: dict[str, dict[str, None]] = {}
            for allocation in container.devices:
                ids = per_resource.setdefault(allocation.resource_name, {})
                ids.update(dict.fromkeys(allocation.device_ids))
            entries.extend(
                CheckpointEntry(
                    pod_uid=pod.uid,
                    container_name=container.name,
                    resource_name=resource,
                    device_ids=tuple(ids),
                )
                for resource, ids in per_resource.items()
            )
    return tuple(entries)


def registered_devices(node: NodeAllocations) -> dict[str, tuple[str, ...]]:
    """Devices per resource the kubelet knows: the allocatable ones plus any allocated."""
    registered: dict[str, dict[str, None]] = {}
    allocated = (
        allocation
        for pod in node.pods
        for container in pod.containers
        for allocation in container.devices
    )
    for allocation in (*node.allocatable, *allocated):
        registered.setdefault(allocation.resource_name, {}).update(
            dict.fromkeys(allocation.device_ids)
        )
    return {resource: tuple(ids) for resource, ids in registered.items()}


def _find(pods: list[PodAllocation], namespace: str, name: str) -> int | None:
    for index, pod in enumerate(pods):
        if (pod.namespace, pod.name) == (namespace, name):
            return index
    return None


def _validate(node: NodeAllocations) -> None:
    names: set[tuple[str, str]] = set()
    uids: set[str] = set()
    for pod in node.pods:
        if (pod.namespace, pod.name) in names:
            raise ValueError(f"pod {pod.namespace}/{pod.name} appears twice")
        if pod.uid in uids:
            raise ValueError(f"pod uid {pod.uid} ({pod.namespace}/{pod.name}) appears twice")
        names.add((pod.namespace, pod.name))
        uids.add(pod.uid)
