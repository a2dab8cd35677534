"""A fake kubelet for tests and the lab: a kubelet-shaped directory with real gRPC sockets.

Why: the exporter (and later the device plugin) must be exercised against what a node
really offers, not against mocks. FakeKubelet owns a tree laid out like /var/lib/kubelet:

    <root>/pod-resources/kubelet.sock                  pod-resources v1 (FakePodResources)
    <root>/device-plugins/kubelet.sock                 Registration (FakeDevicePlugins)
    <root>/device-plugins/kubelet_internal_checkpoint  the device manager's checkpoint
    <root>/device-plugins/<plugin>.sock                the plugins' own sockets

It holds one allocation table (pods and allocatable devices). Every change replaces the
table atomically and rewrites the checkpoint, so pod UIDs can be joined as on a real node
(the checkpoint files every device under NUMA key -1; `List` still reports `numa_node`).

Registered plugins feed the table as the kubelet's device manager does: their healthy
devices become the allocatable ones (replacing `set_allocatable` entries of the same
resource), and `admit` allocates through the plugin and records the pod, so pod-resources
reports exactly what the plugin was asked to allocate. Starting (and restarting) wipes the
device-plugins directory except the checkpoint, as a starting kubelet does.

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
from pathlib import Path
from types import TracebackType

import grpc

from gpufleet.kubelet.api import deviceplugin_v1beta1_pb2 as dp_pb
from gpufleet.kubelet.checkpoint import CHECKPOINT_NAME, write_checkpoint
from gpufleet.lab.kubelet.deviceplugins import (
    HEALTHY,
    AdmissionError,
    ContainerStartError,
    DeviceState,
    FakeDevicePlugins,
    cleanup_plugin_directory,
)
from gpufleet.lab.kubelet.podresources import (
    KUBELET_RATE_LIMIT,
    ClaimAllocation,
    ClaimDevice,
    ContainerAllocation,
    DeviceAllocation,
    FakePodResources,
    NodeAllocations,
    PodAllocation,
    RateLimit,
    TerminatedPods,
)
from gpufleet.lab.kubelet.table import (
    allocates,
    by_numa_node,
    check_admissible,
    checkpoint_entries,
    find_pod,
    freed,
    holdings,
    registered_devices,
    validate,
    with_devices,
)

__all__ = [
    "AdmissionError",
    "ClaimAllocation",
    "ClaimDevice",
    "ContainerAllocation",
    "ContainerStartError",
    "DeviceAllocation",
    "DeviceState",
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
        # Lock order: device_plugins' lock, then _lock (its listener takes _lock).
        self._lock = threading.Lock()
        # The kubelet admits one pod at a time, so two admissions never pick one device.
        self._admit_lock = threading.Lock()
        self._node = NodeAllocations()
        # Every device of each plugin-fed resource, unhealthy ones too (checkpoint only).
        self._plugin_devices: dict[str, tuple[str, ...]] = {}
        # (pod uid, container, resource) -> the plugin's ContainerAllocateResponse.
        self._responses: dict[tuple[str, str, str], dp_pb.ContainerAllocateResponse] = {}
        self.pod_resources = FakePodResources(
            self.pod_resources_socket,
            view=lambda: self._node,
            get_disabled=get_disabled,
            terminated_pods=terminated_pods,
            rate_limit=rate_limit,
            clock=clock,
        )
        # Real monotonic time, not `clock`: registration times feed latency benchmarks,
        # while `clock` is faked by rate-limit tests.
        self.device_plugins = FakeDevicePlugins(
            self.device_plugins_dir, on_devices=self._plugin_devices_changed
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
            index = find_pod(pods, pod.namespace, pod.name)
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

    # -- admission through the device plugins ------------------------------------------

    def admit(
        self, pod: tuple[str, str, str], container: str, resource: str, n: int
    ) -> tuple[str, ...]:
        """Admit `container` of `pod` (namespace, name, uid) asking for `n` of `resource`.

        The plugin picks and allocates (`FakeDevicePlugins.allocate`) among healthy devices
        no active pod holds; the pod (added if new) then holds them, so `List` and the
        checkpoint show them; then `PreStartContainer` runs when the plugin asked for it.
        Returns the device IDs. Raises AdmissionError (nothing recorded) as the kubelet
        rejects the pod, or ContainerStartError (allocation kept) when pre-start fails.
        """
        namespace, name, uid = pod
        with self._admit_lock:
            with self._lock:
                check_admissible(self._node.pods, pod, container, resource)
                active = (p for p in self._node.pods if p.uid not in self._node.terminated)
                in_use = {held[3] for held in holdings(active) if held[2] == resource}
            grant = self.device_plugins.allocate(resource, n, in_use=in_use)
            with self._lock:
                pods = list(self._node.pods)
                index = find_pod(pods, namespace, name)
                base = (
                    PodAllocation(namespace=namespace, name=name, uid=uid)
                    if index is None
                    else pods[index]
                )
                granted = with_devices(base, container, by_numa_node(resource, grant.devices))
                if index is None:
                    pods.append(granted)
                else:
                    pods[index] = granted
                self._commit(pods=tuple(pods))
                self._responses[(uid, container, resource)] = grant.response
        self.device_plugins.pre_start(resource, grant.device_ids)
        return grant.device_ids

    def allocation_response(
        self, namespace: str, name: str, container: str, resource: str | None = None
    ) -> dp_pb.ContainerAllocateResponse:
        """What the plugin's `Allocate` answered for an admitted container (envs, mounts,
        devices, annotations, CDI devices). `resource` is needed only when the container
        got several. KeyError when there is no such admitted container."""
        with self._lock:
            uid = self._node.pods[self._index(list(self._node.pods), namespace, name)].uid
            found = {r: v for (u, c, r), v in self._responses.items() if (u, c) == (uid, container)}
        if resource is None and len(found) > 1:
            raise ValueError(f"container {container} holds {sorted(found)}: name the resource")
        key = resource if resource is not None else next(iter(found), None)
        if key not in found:
            raise KeyError(
                f"no allocation of {resource or 'any resource'} for container {container} "
                f"of pod {name} in namespace {namespace}"
            )
        return found[key]

    def _plugin_devices_changed(self, resource: str, devices: tuple[DeviceState, ...]) -> None:
        """A plugin's device set changed: its healthy devices become allocatable, as
        `containerDevicesFromResourceDeviceInstances` lists them: an entry per device and
        NUMA node, so a device on two nodes is listed under each (as `List` files it)."""
        healthy = tuple(
            DeviceAllocation(resource_name=resource, device_ids=(device.id,), numa_node=node)
            for device in devices
            if device.health == HEALTHY
            for node in device.numa_nodes or (None,)
        )
        with self._lock:
            others = tuple(d for d in self._node.allocatable if d.resource_name != resource)
            self._plugin_devices[resource] = tuple(device.id for device in devices)
            self._commit(allocatable=others + healthy)

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
        return self.pod_resources.serving and self.device_plugins.serving

    def start(self) -> None:
        """Create the tree, write the checkpoint, wipe the device-plugins directory but the
        checkpoint (plugin sockets included) and serve; returns once sockets accept."""
        self._start(delay_socket_seconds=0.0)

    def stop(self) -> None:
        """Stop serving and remove the kubelet's sockets; plugin connections close and
        their devices turn Unhealthy. The checkpoint stays, as on a node."""
        self.pod_resources.stop()
        self.device_plugins.stop()

    def restart(self, *, delay_socket_seconds: float = 0.0) -> None:
        """Like a kubelet restart: the sockets disappear (plugins' too), every plugin's
        devices turn Unhealthy until it registers again, and the sockets come back.

        `delay_socket_seconds` blocks between wiping the directory and re-creating
        device-plugins/kubelet.sock, for plugins that must wait for it (Bottlerocket's
        ordering); pod-resources is back before the wait.
        """
        self.stop()
        self._start(delay_socket_seconds=delay_socket_seconds)

    def _start(self, *, delay_socket_seconds: float) -> None:
        with self._lock:
            self._commit()
            # Under _lock: the checkpoint's temp file must not be wiped mid-write.
            cleanup_plugin_directory(self.device_plugins_dir, keep=self.checkpoint_path.name)
        self.pod_resources.start()
        if delay_socket_seconds > 0:
            time.sleep(delay_socket_seconds)
        self.device_plugins.start()

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
        index = find_pod(pods, namespace, name)
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
        if terminated and allocates(self._node.pods, pods):
            pods = tuple(freed(pod) if pod.uid in terminated else pod for pod in pods)
        node = NodeAllocations(
            pods=pods,
            allocatable=self._node.allocatable if allocatable is None else allocatable,
            terminated=terminated,
        )
        validate(node)
        registered = registered_devices(node)
        for resource, ids in self._plugin_devices.items():
            registered[resource] = tuple(dict.fromkeys((*ids, *registered.get(resource, ()))))
        self.device_plugins_dir.mkdir(parents=True, exist_ok=True)
        write_checkpoint(self.checkpoint_path, checkpoint_entries(node), registered)
        self._node = node
        uids = {pod.uid for pod in pods}
        self._responses = {key: v for key, v in self._responses.items() if key[0] in uids}
