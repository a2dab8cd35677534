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

Terminated pods follow the kubelet's device manager: `terminate_pod` puts a pod in a
terminal phase but leaves its devices and checkpoint entry alone; the next allocation (a
pod gaining devices) first frees every terminated pod's devices, as `UpdateAllocatedDevices`
does, and the rewritten checkpoint drops them. How `List` shows a terminated pod depends
on the kubelet version chosen with `terminated_pods`.

It must never answer differently from a kubelet except through the explicit test knobs
(`fail_next`), and never serve from a half-updated table.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
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
    TerminatedPods,
)

__all__ = [
    "ContainerAllocation",
    "DeviceAllocation",
    "FakeKubelet",
    "NodeAllocations",
    "PodAllocation",
    "RateLimit",
    "TerminatedPods",
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
        terminated_pods: TerminatedPods = TerminatedPods.WITHOUT_DEVICES,
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
            terminated_pods=terminated_pods,
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
        """Replace all pods; `List` returns them in this order. A pod gaining devices is an
        allocation: terminated pods' devices are freed first."""
        with self._lock:
            self._commit(pods=tuple(pods))

    def add_pod(self, pod: PodAllocation) -> None:
        """Add `pod`, replacing a pod with the same namespace and name in place (an
        allocation when it gains devices, as in `set_pods`)."""
        with self._lock:
            pods = list(self._node.pods)
            index = _find(pods, pod.namespace, pod.name)
            if index is None:
                pods.append(pod)
            else:
                pods[index] = pod
            self._commit(pods=tuple(pods))

    def remove_pod(self, namespace: str, name: str) -> None:
        """Remove a pod (deleted from the API server); KeyError if there is none by that name."""
        with self._lock:
            pods = list(self._node.pods)
            del pods[self._index(pods, namespace, name)]
            self._commit(pods=tuple(pods))

    def terminate_pod(self, namespace: str, name: str) -> None:
        """Put a pod in a terminal phase (a finished Job): still known to the kubelet, its
        devices and checkpoint entry kept until the next allocation frees them; `List`
        shows it as `terminated_pods` says. KeyError if there is no such pod."""
        with self._lock:
            pod = self._node.pods[self._index(list(self._node.pods), namespace, name)]
            self._commit(terminated=self._node.terminated | {pod.uid})

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

    @property
    def terminated_pods(self) -> TerminatedPods:
        """How `List` shows terminated pods: as kubelet 1.34+, 1.16-1.33 or older does."""
        return self.pod_resources.terminated_pods

    @terminated_pods.setter
    def terminated_pods(self, value: TerminatedPods) -> None:
        self.pod_resources.terminated_pods = value

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

    def _index(self, pods: list[PodAllocation], namespace: str, name: str) -> int:
        index = _find(pods, namespace, name)
        if index is None:
            raise KeyError(f"pod {name} in namespace {namespace} not in the fake kubelet")
        return index

    def _commit(
        self,
        *,
        pods: tuple[PodAllocation, ...] | None = None,
        allocatable: tuple[DeviceAllocation, ...] | None = None,
        terminated: frozenset[str] | None = None,
    ) -> None:
        """Validate and publish a new table, then rewrite the checkpoint. Caller holds _lock.

        New pods (or pods gaining devices) are an allocation: as the device manager does
        before allocating, the devices of every terminated pod are freed first.
        """
        pods = self._node.pods if pods is None else pods
        terminated = self._node.terminated if terminated is None else terminated
        terminated &= {pod.uid for pod in pods}
        if terminated and _allocates(self._node.pods, pods):
            pods = tuple(_freed(pod) if pod.uid in terminated else pod for pod in pods)
        node = NodeAllocations(
            pods=pods,
            allocatable=self._node.allocatable if allocatable is None else allocatable,
            terminated=terminated,
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


def _holdings(pods: Iterable[PodAllocation]) -> set[tuple[str, str, str, str]]:
    return {
        (pod.uid, container.name, allocation.resource_name, device_id)
        for pod in pods
        for container in pod.containers
        for allocation in container.devices
        for device_id in allocation.device_ids
    }


def _allocates(before: Iterable[PodAllocation], after: Iterable[PodAllocation]) -> bool:
    """Whether going from `before` to `after` gives some container a device it lacked."""
    return bool(_holdings(after) - _holdings(before))


def _freed(pod: PodAllocation) -> PodAllocation:
    """`pod` after the device manager freed its devices: its containers hold none."""
    return replace(pod, containers=tuple(replace(c, devices=()) for c in pod.containers))


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
