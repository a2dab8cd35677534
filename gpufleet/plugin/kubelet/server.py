"""The v1beta1 `DevicePlugin` service for one resource, over gRPC.

ListAndWatch streams the device list and re-sends it on every health change.
GetPreferredAllocation never fails: whatever goes wrong in choosing an aligned set (a lost
GPU, an NVML error, a bug), it answers with a valid unaligned choice, because a failed
call rejects the pod at admission (NVIDIA #2038 rejected ~1,000 pods every 5 minutes).
Allocate rejects unknown device IDs with a clear error. PreStartContainer is a no-op.
"""

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import grpc

from gpufleet.kubelet.api import deviceplugin_v1beta1_pb2 as pb
from gpufleet.kubelet.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from gpufleet.logs import OutageLog
from gpufleet.plugin.core.allocate import ContainerAllocation
from gpufleet.plugin.core.model import AdvertisedDevice, Health

# ListAndWatch streams served at once per resource: the kubelet holds one (a restarted
# kubelet's new one comes after the dead one's ended). Each holds a worker thread
# (`new_server` has more).
MAX_WATCHERS = 4

log = logging.getLogger(__name__)

# (request device IDs) -> the container's allocation, or raises ValueError-like errors.
Allocator = Callable[[Sequence[str]], pb.ContainerAllocateResponse]
# (available, must_include, size) -> preferred device IDs.
Preferrer = Callable[[Sequence[str], Sequence[str], int], Sequence[str]]


def to_response(allocation: ContainerAllocation) -> pb.ContainerAllocateResponse:
    """The protobuf form of a pure `ContainerAllocation`."""
    return pb.ContainerAllocateResponse(
        envs=allocation.envs,
        mounts=[
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in allocation.mounts
        ],
        devices=[
            pb.DeviceSpec(
                container_path=d.container_path, host_path=d.host_path, permissions=d.permissions
            )
            for d in allocation.device_specs
        ],
        annotations=allocation.annotations,
        cdi_devices=[pb.CDIDevice(name=n) for n in allocation.cdi_devices],
    )


class RpcStats:
    """Per-RPC call counts and latency sums, read by the self-metrics endpoint. gRPC
    serves from a thread pool, so updates take a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.seconds: dict[str, float] = {}
        self.allocations = 0
        self.preferred_fallbacks = 0

    def record(
        self, rpc: str, seconds: float, *, failed: bool = False, allocations: int = 0
    ) -> None:
        with self._lock:
            self.calls[rpc] = self.calls.get(rpc, 0) + 1
            self.seconds[rpc] = self.seconds.get(rpc, 0.0) + seconds
            if failed:
                self.errors[rpc] = self.errors.get(rpc, 0) + 1
            self.allocations += allocations

    def fallback(self) -> None:
        with self._lock:
            self.preferred_fallbacks += 1


class DevicePluginService(pb_grpc.DevicePluginServicer):
    """One resource's devices, their health, and the RPCs the kubelet calls."""

    def __init__(
        self,
        resource: str,
        devices: Sequence[AdvertisedDevice],
        *,
        allocator: Allocator,
        preferrer: Preferrer,
        stats: RpcStats | None = None,
        spec: object = None,
    ) -> None:
        self.resource = resource
        # What the service was built from: a config reload keeps a running service whose
        # spec equals the new one's (its socket, streams and registration untouched).
        self.spec = spec
        self._devices = {d.id: d for d in devices}
        self._health = dict.fromkeys(self._devices, Health.HEALTHY)
        self._allocator = allocator
        self._preferrer = preferrer
        self.stats = stats or RpcStats()
        self._changed = threading.Condition()
        self._version = 0
        self._stopped = False
        self._watchers: list[grpc.ServicerContext] = []  # open ListAndWatch streams
        self.streams_started = 0  # ListAndWatch streams taken since the service began
        self._refusals = OutageLog(log, f"{resource}: ListAndWatch streams refused")

    # --- state -------------------------------------------------------------------

    @property
    def devices(self) -> tuple[AdvertisedDevice, ...]:
        return tuple(self._devices.values())

    @property
    def health(self) -> Mapping[str, Health]:
        return dict(self._health)

    def set_health(self, health: Mapping[str, Health]) -> None:
        """Apply health for this resource's IDs (others are ignored); wake ListAndWatch."""
        with self._changed:
            changed = {
                i: h for i, h in health.items() if i in self._health and self._health[i] != h
            }
            if not changed:
                return
            self._health.update(changed)
            self._version += 1
            self._changed.notify_all()

    def streams_open(self) -> int:
        """The ListAndWatch streams whose client is still there."""
        with self._changed:
            return sum(1 for c in self._watchers if c.is_active())

    def stop(self) -> None:
        """End every ListAndWatch stream (the kubelet sees the plugin go away)."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    def _device_list(self) -> pb.ListAndWatchResponse:
        devices = []
        for device_id, device in self._devices.items():
            topology = None
            if device.numa_node is not None:
                topology = pb.TopologyInfo(nodes=[pb.NUMANode(ID=device.numa_node)])
            devices.append(
                pb.Device(ID=device_id, health=self._health[device_id].value, topology=topology)
            )
        return pb.ListAndWatchResponse(devices=devices)

    # --- RPCs --------------------------------------------------------------------

    def GetDevicePluginOptions(self, request, context):
        return pb.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    def ListAndWatch(self, request, context) -> Iterator[pb.ListAndWatchResponse]:
        # A stream holds a worker thread for its life: past MAX_WATCHERS live ones a new
        # stream is refused, so streams opened and kept never take every worker from
        # Allocate (pod admission). Never a live one ended for it: the kubelet takes an
        # ended stream for the plugin gone. A client gone wakes its stream to end
        # (`_wake`), and a stream whose client is gone does not count.
        with self._changed:
            self._watchers = [c for c in self._watchers if c.is_active()]
            full = len(self._watchers) >= MAX_WATCHERS
            if full:
                self._refusals.failed(f"{MAX_WATCHERS} are open", kind="streams")
            else:
                self._refusals.recovered()
                self._watchers.append(context)
                self.streams_started += 1
        if full:
            self.stats.record("ListAndWatch", 0.0, failed=True)
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{MAX_WATCHERS} ListAndWatch streams are open (the kubelet needs one)",
            )
        context.add_callback(self._wake)
        try:
            yield from self._watch(context)
        finally:
            with self._changed:
                if context in self._watchers:
                    self._watchers.remove(context)

    def _wake(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def _watch(self, context) -> Iterator[pb.ListAndWatchResponse]:
        with self._changed:
            version = self._version
            response = self._device_list()
        yield response
        while context.is_active():
            with self._changed:
                # Bounded wait: a backstop; a stream whose client left wakes it (`_wake`).
                if not self._stopped and self._version == version:
                    self._changed.wait(timeout=1.0)
                if self._stopped:
                    return
                if self._version == version:
                    continue
                version = self._version
                response = self._device_list()
            yield response

    def GetPreferredAllocation(self, request, context):
        start = time.perf_counter()
        responses = []
        for req in request.container_requests:
            available = list(req.available_deviceIDs)
            must = list(req.must_include_deviceIDs)
            try:
                chosen = list(self._preferrer(available, must, req.allocation_size))
            except Exception:  # never fail admission over a preference
                self.stats.fallback()
                log.exception("preferred allocation failed; answering an unaligned choice")
                rest = [i for i in available if i not in must]
                chosen = (must + rest)[: req.allocation_size]
            responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        self.stats.record("GetPreferredAllocation", time.perf_counter() - start)
        return pb.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request, context):
        """Unknown IDs and over-sized shared requests are refused by `allocate` itself, with
        NVIDIA v0.20's texts and its code, UNKNOWN (a plain Go error through grpc-go)."""
        start = time.perf_counter()
        responses = []
        for req in request.container_requests:
            try:
                responses.append(self._allocator(list(req.devices_ids)))
            except ValueError as exc:
                self.stats.record("Allocate", time.perf_counter() - start, failed=True)
                context.abort(grpc.StatusCode.UNKNOWN, str(exc))
        self.stats.record("Allocate", time.perf_counter() - start, allocations=len(responses))
        return pb.AllocateResponse(container_responses=responses)

    def PreStartContainer(self, request, context):
        return pb.PreStartContainerResponse()
