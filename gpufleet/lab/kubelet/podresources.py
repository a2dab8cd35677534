"""The pod-resources half of the fake kubelet: a real `v1.PodResourcesLister` gRPC server.

Exists so the exporter's pod-resources client is tested against the protocol it meets on a
node: a real unix socket, the generated stubs, and the kubelet's own failure modes with their
exact codes and texts (Get disabled by gate -> UNKNOWN "PodResources API Get method
disabled"; unknown pod -> UNKNOWN "pod X in namespace Y not found"; token bucket exhausted
-> RESOURCE_EXHAUSTED "rejected by rate limit"). It never invents behaviour a kubelet lacks,
other than the explicit `fail_next` test knob.

The server reads the node's allocations through a `view` callable returning an immutable
`NodeAllocations`, so the owner (FakeKubelet) replaces the table atomically and the server
never locks it. Pods in a terminal phase are listed as the chosen kubelet version lists
them (`TerminatedPods`). The kubelet's v1alpha1 service on the same socket is not served.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import grpc

from gpufleet.core import ratelimit
from gpufleet.kubelet.api import podresources_v1_pb2 as pb
from gpufleet.kubelet.api import podresources_v1_pb2_grpc as pb_grpc
from gpufleet.kubelet.sockets import UnixSocketServer

# pkg/kubelet/apis/podresources: DefaultQPS and DefaultBurstTokens.
DEFAULT_QPS = 100.0
DEFAULT_BURST = 10
GET_DISABLED_MESSAGE = "PodResources API Get method disabled"
RATE_LIMITED_MESSAGE = "rejected by rate limit"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceAllocation:
    """Devices of one resource, all on one NUMA node (None: the plugin gave no topology).

    In `List` each DeviceAllocation becomes one `ContainerDevices`, as the kubelet emits one
    per (resource, NUMA node); in `GetAllocatableResources` each device ID becomes its own.
    """

    resource_name: str
    device_ids: tuple[str, ...]
    numa_node: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimDevice:
    """One device a DRA driver allocated for a claim: a `ClaimResource` in `List`."""

    driver_name: str
    pool_name: str
    device_name: str
    cdi_devices: tuple[str, ...] = ()  # fully qualified CDI names
    share_id: str | None = None  # set when the device is shared (consumable capacity)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimAllocation:
    """A ResourceClaim a container uses, with its allocated devices: a `DynamicResource`."""

    claim_name: str
    claim_namespace: str
    devices: tuple[ClaimDevice, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerAllocation:
    name: str
    devices: tuple[DeviceAllocation, ...] = ()
    claims: tuple[ClaimAllocation, ...] = ()  # DRA (`dynamic_resources`)


@dataclass(frozen=True, slots=True, kw_only=True)
class PodAllocation:
    namespace: str
    name: str
    uid: str
    containers: tuple[ContainerAllocation, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeAllocations:
    """Everything the pod-resources API reports: pods in `List` order, allocatable devices,
    and which pods are in a terminal phase (Succeeded/Failed) but still known."""

    pods: tuple[PodAllocation, ...] = ()
    allocatable: tuple[DeviceAllocation, ...] = ()
    terminated: frozenset[str] = frozenset()  # pod UIDs


class TerminatedPods(StrEnum):
    """How `List` reports a pod in a terminal phase that the kubelet still knows."""

    # 1.34+ (gate KubeletPodResourcesListUseActivePods): active pods only.
    HIDDEN = "hidden"
    # 1.16-1.33: listed, but List first frees the devices of inactive pods in the device
    # manager (kubernetes #79409), so it shows their containers without devices.
    WITHOUT_DEVICES = "without-devices"
    # Before 1.16 (and while the kubelet's pod sources are not ready after a restart):
    # listed with its devices until the next allocation frees them (dcgm-exporter #140).
    WITH_DEVICES = "with-devices"


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimit:
    """The kubelet's token bucket: `burst` tokens, refilled at `qps` per second."""

    qps: float = DEFAULT_QPS
    burst: int = DEFAULT_BURST


KUBELET_RATE_LIMIT = RateLimit()


class TokenBucket:
    """The kubelet's limiter (`rate.NewLimiter(qps, burst)`): a full bucket at start.

    Thread-safe: gRPC calls arrive on a thread pool. `clock` returns seconds (monotonic).
    """

    def __init__(self, limit: RateLimit, clock: Callable[[], float]) -> None:
        self._lock = threading.Lock()
        self._bucket = ratelimit.TokenBucket(
            rate_per_second=limit.qps, burst=limit.burst, clock=clock
        )

    def allow(self) -> bool:
        """Take one token if there is one."""
        with self._lock:
            return self._bucket.take()


def pod_to_proto(pod: PodAllocation, *, with_devices: bool = True) -> pb.PodResources:
    """The `PodResources` message the kubelet sends for `pod` (devices only, no CPUs);
    without devices, as `List` shows a pod whose devices the device manager freed."""
    return pb.PodResources(
        name=pod.name,
        namespace=pod.namespace,
        containers=[
            pb.ContainerResources(
                name=container.name,
                devices=[
                    _container_devices(d, d.device_ids)
                    for d in (container.devices if with_devices else ())
                ],
                dynamic_resources=[
                    _dynamic_resource(claim) for claim in (container.claims if with_devices else ())
                ],
            )
            for container in pod.containers
        ],
    )


def listed_pods(node: NodeAllocations, mode: TerminatedPods) -> list[pb.PodResources]:
    """The pods `List` returns for `node`, terminated ones as `mode` says."""
    listed = []
    for pod in node.pods:
        active = pod.uid not in node.terminated
        if active or mode is not TerminatedPods.HIDDEN:
            with_devices = active or mode is TerminatedPods.WITH_DEVICES
            listed.append(pod_to_proto(pod, with_devices=with_devices))
    return listed


def allocatable_to_proto(devices: Iterable[DeviceAllocation]) -> pb.AllocatableResourcesResponse:
    """One `ContainerDevices` per device ID, as the kubelet reports allocatable devices."""
    return pb.AllocatableResourcesResponse(
        devices=[
            _container_devices(allocation, (device_id,))
            for allocation in devices
            for device_id in allocation.device_ids
        ]
    )


def _dynamic_resource(claim: ClaimAllocation) -> pb.DynamicResource:
    return pb.DynamicResource(
        claim_name=claim.claim_name,
        claim_namespace=claim.claim_namespace,
        claim_resources=[
            pb.ClaimResource(
                cdi_devices=[pb.CDIDevice(name=name) for name in device.cdi_devices],
                driver_name=device.driver_name,
                pool_name=device.pool_name,
                device_name=device.device_name,
                share_id=device.share_id,
            )
            for device in claim.devices
        ],
    )


def _container_devices(allocation: DeviceAllocation, ids: tuple[str, ...]) -> pb.ContainerDevices:
    message = pb.ContainerDevices(resource_name=allocation.resource_name, device_ids=ids)
    if allocation.numa_node is not None:
        message.topology.nodes.add(ID=allocation.numa_node)
    return message


class _Servicer(pb_grpc.PodResourcesListerServicer):
    def __init__(self, owner: FakePodResources) -> None:
        self._owner = owner

    def List(
        self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pb.ListPodResourcesResponse:
        self._owner._admit("List", context)
        pods = listed_pods(self._owner._view(), self._owner.terminated_pods)
        return pb.ListPodResourcesResponse(pod_resources=pods)

    def GetAllocatableResources(
        self, request: pb.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pb.AllocatableResourcesResponse:
        self._owner._admit("GetAllocatableResources", context)
        return allocatable_to_proto(self._owner._view().allocatable)

    def Get(
        self, request: pb.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> pb.GetPodResourcesResponse:
        self._owner._admit("Get", context)
        if self._owner.get_disabled:
            # The kubelet returns a plain Go error here, which gRPC sends as Unknown.
            context.abort(grpc.StatusCode.UNKNOWN, GET_DISABLED_MESSAGE)
        for pod in self._owner._view().pods:
            if (pod.namespace, pod.name) == (request.pod_namespace, request.pod_name):
                return pb.GetPodResourcesResponse(pod_resources=pod_to_proto(pod))
        context.abort(
            grpc.StatusCode.UNKNOWN,
            f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
        )


class FakePodResources:
    """A pod-resources v1 server on a unix socket, with the kubelet's failure modes.

    Thread-safe. Every received call is counted (`calls`), including rejected ones. Order of
    checks per call: count, `fail_next`, rate limit, then the method (Get gate, lookup).
    """

    def __init__(
        self,
        socket_path: Path,
        *,
        view: Callable[[], NodeAllocations],
        get_disabled: bool = False,
        terminated_pods: TerminatedPods = TerminatedPods.WITHOUT_DEVICES,
        rate_limit: RateLimit | None = KUBELET_RATE_LIMIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.socket_path = socket_path
        self.get_disabled = get_disabled
        self.terminated_pods = terminated_pods
        self._view = view
        self._clock = clock
        self._lock = threading.Lock()
        self._calls: Counter[str] = Counter()
        self._failures_left = 0
        self._failure = (grpc.StatusCode.UNKNOWN, "")
        self._bucket = TokenBucket(rate_limit, clock) if rate_limit else None
        self._grpc = UnixSocketServer(
            socket_path,
            lambda server: pb_grpc.add_PodResourcesListerServicer_to_server(
                _Servicer(self), server
            ),
            max_workers=8,
            thread_name_prefix="fake-podres",
        )

    @property
    def calls(self) -> dict[str, int]:
        """Calls received per method name (`List`, `Get`, `GetAllocatableResources`)."""
        with self._lock:
            return dict(self._calls)

    def reset_calls(self) -> None:
        with self._lock:
            self._calls.clear()

    def set_rate_limit(self, limit: RateLimit | None) -> None:
        """Switch rate limiting on (a fresh, full bucket) or off (None)."""
        bucket = TokenBucket(limit, self._clock) if limit else None
        with self._lock:
            self._bucket = bucket

    def fail_next(
        self, n: int, code: grpc.StatusCode, message: str = "injected by fake kubelet"
    ) -> None:
        """Make the next `n` calls, of any method, fail with `code` and `message`."""
        if n < 0:
            raise ValueError(f"fail_next: n must be >= 0, got {n}")
        with self._lock:
            self._failures_left = n
            self._failure = (code, message)

    @property
    def serving(self) -> bool:
        return self._grpc.serving

    def start(self) -> None:
        """Listen on `socket_path`; returns once the socket accepts connections."""
        self._grpc.start()

    def stop(self) -> None:
        """Stop serving (in-flight calls are cancelled) and remove the socket file."""
        self._grpc.stop()

    def _admit(self, method: str, context: grpc.ServicerContext) -> None:
        """Count the call and apply the injected failures and the rate limit (may abort)."""
        with self._lock:
            self._calls[method] += 1
            failure = self._failure if self._failures_left > 0 else None
            self._failures_left = max(0, self._failures_left - 1)
            bucket = self._bucket
        if failure is not None:
            context.abort(*failure)
        if bucket is not None and not bucket.allow():
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMITED_MESSAGE)
