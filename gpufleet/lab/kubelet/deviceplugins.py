"""The device-plugin half of the fake kubelet: `Registration` server and plugin client.

Why: the device plugin must be tested against the kubelet's side of v1beta1 as the kubelet
really runs it, not against a stub that accepts anything. This is the device manager's
behaviour, from kubelet `devicemanager/plugin/v1beta1/{server,client}.go` and `manager.go`:

- `Register` checks the version against `["v1beta1"]` and the resource name with
  `IsExtendedResourceName`, dials `filepath.Join(<dir>, <endpoint>)` (blocking, 10 s) and
  calls `GetDevicePluginOptions` before it replies; errors are plain Go errors, so gRPC
  UNKNOWN, with the kubelet's texts. Each call has a goroutine of its own there: a plugin
  whose socket is missing or whose options hang delays its own registration only;
- `ListAndWatch` is consumed on a thread: each message replaces the resource's devices
  (capacity: all of them, allocatable: the healthy ones); when the stream ends the devices
  turn Unhealthy (`PluginDisconnected`). A second registration of a resource becomes the
  current one but, as since 1.26 (`handler.go` appends to the resource's clients), the
  first keeps its stream until the plugin ends it, and that end then disconnects the
  resource, whichever registration is current: its devices turn Unhealthy and the current
  stream is closed, until the plugin registers again. The disconnected endpoint stays
  (`PluginDisconnected` only stamps its stop time), so `pre_start` still reads its options;
  a restarted kubelet knows a resource from its checkpoint, with no options;
- `allocate` runs `GetPreferredAllocation` (when advertised, even when every available
  device is needed) then `Allocate`, with the kubelet's `UnexpectedAdmissionError` texts;
  `pre_start` runs `PreStartContainer`. The kubelet sends both calls' IDs as Go sets'
  `UnsortedList()`, in no order a plugin may rely on, and takes the plugin's preferred
  devices, then tops up, iterating Go sets (`devicesToAllocate` with no NUMA hint): the
  fake shuffles each of these (seeded, `order_seed`).

Not modelled: the 5-minute grace before a disconnected resource's capacity drops to zero
and its endpoint is dropped (the fake keeps it until the plugin registers again),
topology-manager NUMA alignment, and the plugin-watcher (`plugins_registry`) path.
It must never accept a registration, or pick a device, that a kubelet would refuse.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import grpc

from gpufleet.kubelet.api import deviceplugin_v1beta1_pb2 as pb
from gpufleet.kubelet.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from gpufleet.kubelet.sockets import UnixSocketServer

log = logging.getLogger(__name__)

KUBELET_SOCKET_NAME = "kubelet.sock"
SUPPORTED_VERSIONS = ("v1beta1",)
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"
# The kubelet dials a registering plugin with a 10 s blocking timeout.
DIAL_TIMEOUT_SECONDS = 10.0
# KubeletPreStartContainerRPCTimeoutInSecs. The kubelet sets no deadline on the other
# calls; we use the same bound so a hung plugin fails a test instead of hanging it.
RPC_TIMEOUT_SECONDS = 30.0
# The kubelet serves each Register on a goroutine of its own; this many at once is beyond
# any node's plugins, each of which may hold one for DIAL + RPC timeouts.
REGISTRATION_WORKERS = 64
# grpc-go's ErrClientConnClosing: a call on a connection the kubelet closed.
_CONNECTION_CLOSING = "rpc error: code = Canceled desc = grpc: the client connection is closing"

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


class DeviceState(NamedTuple):
    """One device as the plugin's last `ListAndWatch` message described it."""

    id: str
    health: str
    numa_nodes: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Grant:
    """Devices `allocate` chose (in the order sent to `Allocate`) and the plugin's answer."""

    devices: tuple[DeviceState, ...]
    response: pb.ContainerAllocateResponse

    @property
    def device_ids(self) -> tuple[str, ...]:
        return tuple(device.id for device in self.devices)


class AdmissionError(Exception):
    """The kubelet refused a pod: `reason` and `message` as on the pod's status."""

    def __init__(self, cause: str, *, reason: str = UNEXPECTED_ADMISSION_ERROR) -> None:
        self.reason = reason
        # admission.unexpectedAdmissionError.Error()
        self.message = f"Allocate failed due to {cause}, which is unexpected"
        super().__init__(self.message)


class ContainerStartError(Exception):
    """`PreStartContainer` failed: the container is not started, its devices stay allocated."""


def is_extended_resource_name(name: str) -> bool:
    """`v1helper.IsExtendedResourceName`: domain-prefixed, outside `kubernetes.io/`, and a
    qualified name once prefixed with `requests.` (as quota names it)."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    parts = f"requests.{name}".split("/")
    if len(parts) != 2:
        return False
    prefix, short = parts
    return (
        len(prefix) <= 253
        and _DNS1123_SUBDOMAIN.fullmatch(prefix) is not None
        and len(short) <= 63
        and _QUALIFIED_NAME.fullmatch(short) is not None
    )


def go_rpc_error(exc: grpc.RpcError | ValueError) -> str:
    """A gRPC error as grpc-go prints it, which is how it reaches kubelet messages. gRPC
    Python raises ValueError for a call on a closed channel, where grpc-go answers
    ErrClientConnClosing."""
    if isinstance(exc, ValueError):
        return _CONNECTION_CLOSING
    code = exc.code()  # type: ignore[attr-defined]
    name = "".join(word.capitalize() for word in code.name.split("_"))
    name = {"Cancelled": "Canceled"}.get(name, name)
    return f"rpc error: code = {name} desc = {exc.details()}"  # type: ignore[attr-defined]


def cleanup_plugin_directory(directory: Path, *, keep: str) -> None:
    """`CleanupPluginDirectory`: remove every socket but `keep` (the checkpoint), as a
    starting kubelet does, so every plugin socket disappears; other files (a plugin's state,
    the plugin watcher's DEPRECATION marker) and directories stay. Like Go's `os.Stat`, a
    link counts as what it points to."""
    directory.mkdir(parents=True, exist_ok=True)
    for entry in directory.iterdir():
        try:
            socket = stat.S_ISSOCK(entry.stat().st_mode)
        except OSError:  # gone meanwhile, or a dangling link: the kubelet skips it too
            continue
        if entry.name != keep and socket:
            entry.unlink(missing_ok=True)


def _go_quote(text: str) -> str:
    # Go's %q for printable text: double quotes with backslash escapes.
    return json.dumps(text, ensure_ascii=False)


def _states(response: pb.ListAndWatchResponse) -> tuple[DeviceState, ...]:
    return tuple(
        DeviceState(
            id=device.ID,
            health=device.health,
            numa_nodes=tuple(node.ID for node in device.topology.nodes),
        )
        for device in response.devices
    )


@dataclass(slots=True, kw_only=True, eq=False)
class _Endpoint:
    """One registered plugin connection; identity tells a replaced one from the current."""

    resource: str
    channel: grpc.Channel
    stub: pb_grpc.DevicePluginStub
    options: pb.DevicePluginOptions
    stream: grpc.Future | None = None
    generation: int = 0  # the kubelet's life it registered in (see stop)


DevicesListener = Callable[[str, tuple[DeviceState, ...]], None]


class FakeDevicePlugins:
    """The kubelet's device manager toward plugins, serving `Registration` on
    `<directory>/kubelet.sock`.

    Thread-safe. `on_devices(resource, devices)` is called with every change of a
    resource's devices, under this object's lock: a listener may take its own lock but must
    never call back into this object while holding it.
    """

    def __init__(
        self,
        directory: Path,
        *,
        on_devices: DevicesListener = lambda resource, devices: None,
        clock: Callable[[], float] = time.monotonic,
        order_seed: int = 0,
    ) -> None:
        self.directory = Path(directory)
        self._unsorted = random.Random(order_seed)  # Go's map order, reproducibly
        self.socket_path = self.directory / KUBELET_SOCKET_NAME
        self._on_devices = on_devices
        self._clock = clock
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._endpoints: dict[str, _Endpoint] = {}
        # Resources with no current plugin the kubelet still has an endpoint for: the one
        # disconnected (its channel closed), or None, known from the checkpoint only.
        self._stopped: dict[str, _Endpoint | None] = {}
        self._devices: dict[str, tuple[DeviceState, ...]] = {}
        self._registrations: Counter[str] = Counter()
        self._registration_times: dict[str, list[float]] = {}
        self._generation = 0  # bumped by stop(): registrations in flight then are dropped
        self._grpc = UnixSocketServer(
            self.socket_path,
            lambda server: pb_grpc.add_RegistrationServicer_to_server(_Registration(self), server),
            max_workers=REGISTRATION_WORKERS,
            thread_name_prefix="fake-reg",
        )
        self.serving_since: float | None = None

    # -- what the kubelet knows ----------------------------------------------------------

    def capacity(self) -> dict[str, int]:
        """Devices per resource, healthy or not (the node's `status.capacity`)."""
        with self._lock:
            return {resource: len(devices) for resource, devices in self._devices.items()}

    def allocatable(self) -> dict[str, int]:
        """Healthy devices per resource (the node's `status.allocatable`)."""
        with self._lock:
            return {
                resource: sum(device.health == HEALTHY for device in devices)
                for resource, devices in self._devices.items()
            }

    def devices(self, resource: str) -> tuple[DeviceState, ...]:
        """The resource's devices in the plugin's order; () if it never registered."""
        with self._lock:
            return self._devices.get(resource, ())

    def options(self, resource: str) -> pb.DevicePluginOptions | None:
        """What `GetDevicePluginOptions` answered at the current registration, if any."""
        with self._lock:
            endpoint = self._endpoints.get(resource)
            return None if endpoint is None else endpoint.options

    def registrations(self, resource: str) -> int:
        """Successful registrations of `resource` since this object was made."""
        with self._lock:
            return self._registrations[resource]

    def registration_times(self, resource: str) -> tuple[float, ...]:
        """When each successful registration completed (the clock's seconds)."""
        with self._lock:
            return tuple(self._registration_times.get(resource, ()))

    def wait_for_registrations(self, resource: str, n: int, *, timeout_seconds: float) -> bool:
        """Block until `resource` has registered `n` times in all; False on timeout."""
        with self._changed:
            return self._changed.wait_for(
                lambda: self._registrations[resource] >= n, timeout=timeout_seconds
            )

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def serving(self) -> bool:
        return self._grpc.serving

    def start(self) -> None:
        """Serve `Registration` on `kubelet.sock`; returns once it accepts connections."""
        self._grpc.start()
        self.serving_since = self._clock()

    def disconnect(self, resource: str) -> None:
        """Close the resource's current plugin connection, as `runClient` does when a
        stream ends: its devices turn Unhealthy until the plugin registers again."""
        with self._lock:
            endpoint = self._endpoints.get(resource)
        if endpoint is not None:
            _cancel(endpoint)

    def recreate_socket(self) -> None:
        """Serve `Registration` on a new `kubelet.sock` in the same life, every plugin
        connection kept, as the kubelet's `serveWithRetry` does: a plugin sees a new socket
        and its own left in place."""
        self._grpc.stop(wait=False)
        self._grpc.start()

    def stop(self) -> None:
        """Stop as a dying kubelet does: `kubelet.sock` goes, every plugin connection is
        closed and every resource's devices turn Unhealthy (a new kubelet knows them only
        from its checkpoint). Plugin sockets are left; a starting kubelet removes them.
        Watcher threads and registrations in flight finish on their own, ignored from now
        on: a dying kubelet waits for neither."""
        with self._lock:
            self._generation += 1
            endpoints = list(self._endpoints.values())
            self._endpoints.clear()
            self._stopped = dict.fromkeys(self._devices)
            for resource in list(self._devices):
                self._set_devices(resource, _unhealthy(self._devices[resource]))
            self.serving_since = None
        self._grpc.stop(wait=False)
        for endpoint in endpoints:
            _cancel(endpoint)

    # -- admission -----------------------------------------------------------------------

    def allocate(self, resource: str, n: int, *, in_use: Iterable[str] = ()) -> Grant:
        """Choose `n` healthy devices not `in_use` and have the plugin allocate them.

        As `devicesToAllocate` with no NUMA hint: `GetPreferredAllocation(available, [], n)`
        when advertised (its answer is kept where it names available devices, then topped
        up), else any `n` available; then `Allocate`, its IDs in no particular order.
        Raises AdmissionError with the kubelet's message on any failure.
        """
        if n < 1:
            raise ValueError(f"allocate: n must be >= 1, got {n}")
        with self._lock:
            devices = self._devices.get(resource)
            endpoint = self._endpoints.get(resource)
        if devices is None:
            raise AdmissionError(f"cannot allocate unregistered device {resource}")
        healthy = [device for device in devices if device.health == HEALTHY]
        if not healthy or endpoint is None:
            raise AdmissionError(
                f"no healthy devices present; cannot allocate unhealthy devices {resource}"
            )
        busy = set(in_use)
        available = [device for device in healthy if device.id not in busy]
        if len(available) < n:
            raise AdmissionError(
                f"requested number of devices unavailable for {resource}. "
                f"Requested: {n}, Available: {len(available)}"
            )
        chosen = self._choose(endpoint, available, n)
        request = pb.AllocateRequest(
            container_requests=[
                pb.ContainerAllocateRequest(devices_ids=self._unsorted_ids(d.id for d in chosen))
            ]
        )
        try:
            response = endpoint.stub.Allocate(request, timeout=RPC_TIMEOUT_SECONDS)
        except (grpc.RpcError, ValueError) as exc:  # ValueError: disconnected meanwhile
            raise AdmissionError(go_rpc_error(exc)) from exc
        if not response.container_responses:
            raise AdmissionError(f"no containers return in allocation response {response}")
        return Grant(devices=tuple(chosen), response=response.container_responses[0])

    def pre_start(self, resource: str, device_ids: Iterable[str]) -> None:
        """`PreStartContainer` when the plugin asked for it; ContainerStartError if it fails.
        A disconnected plugin's endpoint still answers for its options, and one known from
        the checkpoint only has none: no call."""
        with self._lock:
            known = resource in self._endpoints or resource in self._stopped
            endpoint = self._endpoints.get(resource) or self._stopped.get(resource)
        if not known:
            raise ContainerStartError(
                f"endpoint not found in cache for a registered resource: {resource}"
            )
        if endpoint is None or not endpoint.options.pre_start_required:
            return
        request = pb.PreStartContainerRequest(devices_ids=list(device_ids))
        try:
            endpoint.stub.PreStartContainer(request, timeout=RPC_TIMEOUT_SECONDS)
        except (grpc.RpcError, ValueError) as exc:
            raise ContainerStartError(
                f"device plugin PreStartContainer rpc failed with err: {go_rpc_error(exc)}"
            ) from exc

    def _unsorted_ids(self, ids: Iterable[str]) -> list[str]:
        out = list(ids)
        with self._lock:
            self._unsorted.shuffle(out)
        return out

    def _choose(
        self, endpoint: _Endpoint, available: list[DeviceState], n: int
    ) -> list[DeviceState]:
        by_id = {device.id: device for device in available}
        any_order = [by_id[i] for i in self._unsorted_ids(by_id)]
        if not endpoint.options.get_preferred_allocation_available:
            return any_order[:n]
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=self._unsorted_ids(by_id),
                    must_include_deviceIDs=[],
                    allocation_size=n,
                )
            ]
        )
        try:
            response = endpoint.stub.GetPreferredAllocation(request, timeout=RPC_TIMEOUT_SECONDS)
        except (grpc.RpcError, ValueError) as exc:
            raise AdmissionError(
                f"device plugin GetPreferredAllocation rpc failed with err: {go_rpc_error(exc)}"
            ) from exc
        preferred = (
            response.container_responses[0].deviceIDs if response.container_responses else []
        )
        chosen = dict.fromkeys(by_id[i] for i in self._unsorted_ids(set(preferred) & by_id.keys()))
        for device in any_order:
            if len(chosen) >= n:
                break
            chosen.setdefault(device)
        return list(chosen)[:n]

    # -- registration and the ListAndWatch stream ----------------------------------------

    def _register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> None:
        """The `Register` handler: validate, dial, get options, then install (may abort)."""
        if request.version not in SUPPORTED_VERSIONS:
            supported = "[" + " ".join(_go_quote(v) for v in SUPPORTED_VERSIONS) + "]"
            context.abort(
                grpc.StatusCode.UNKNOWN,
                f"requested API version {_go_quote(request.version)} is not supported by "
                f"kubelet. Supported version is {supported}",
            )
        if not is_extended_resource_name(request.resource_name):
            context.abort(
                grpc.StatusCode.UNKNOWN,
                f"the ResourceName {_go_quote(request.resource_name)} is invalid",
            )
        with self._lock:
            generation = self._generation
        # A fresh connection per dial, as the kubelet's grpc-go Dial makes: gRPC Python
        # otherwise shares a subchannel per address process-wide, and one that failed (the
        # plugin's socket wiped by a restart) sits in reconnect backoff for seconds.
        # filepath.Join: an absolute endpoint stays under the directory, and is cleaned.
        path = os.path.normpath(f"{self.directory}/{request.endpoint}")
        channel = grpc.insecure_channel(
            f"unix://{path}",
            options=[("grpc.use_local_subchannel_pool", 1)],
        )
        try:
            endpoint = _connect(request.resource_name, channel)
        except _ConnectError as exc:
            channel.close()
            context.abort(grpc.StatusCode.UNKNOWN, str(exc))
        endpoint.stream = endpoint.stub.ListAndWatch(pb.Empty())
        endpoint.generation = generation
        with self._lock:
            stale = generation != self._generation
            if not stale:
                self._endpoints[request.resource_name] = endpoint
                self._stopped.pop(request.resource_name, None)
                self._registrations[request.resource_name] += 1
                times = self._registration_times.setdefault(request.resource_name, [])
                times.append(self._clock())
                self._changed.notify_all()
        if stale:
            _cancel(endpoint)
            channel.close()
            context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet is shutting down")
        threading.Thread(
            target=self._watch,
            args=(endpoint,),
            name=f"fake-kubelet-law-{request.resource_name}",
            daemon=True,
        ).start()

    def _watch(self, endpoint: _Endpoint) -> None:
        """Consume `ListAndWatch` until it ends, then mark the devices disconnected.

        The only closer of the endpoint's channel once started: closing a gRPC channel
        takes ~0.2 s after a stream, which replacing a plugin or stopping must not wait for.
        """
        try:
            for response in endpoint.stream:  # type: ignore[union-attr]
                with self._lock:
                    if self._endpoints.get(endpoint.resource) is endpoint:
                        self._set_devices(endpoint.resource, _states(response))
        except grpc.RpcError as exc:
            # Cancelled: we closed it (replaced, or the kubelet stopped).
            if exc.code() is not grpc.StatusCode.CANCELLED:  # type: ignore[attr-defined]
                log.info(
                    "ListAndWatch ended unexpectedly for device plugin %s: %s",
                    endpoint.resource,
                    go_rpc_error(exc),
                )
        dropped: _Endpoint | None = None
        with self._lock:
            current = self._endpoints.get(endpoint.resource)
            # An earlier registration's stream ending disconnects the resource all the same
            # (`runClient`): the current client is closed too. Not after this kubelet
            # stopped, which disconnected everything already.
            disconnects = current is endpoint or endpoint.generation == self._generation
            if disconnects and current is not None:
                del self._endpoints[endpoint.resource]
                self._stopped[endpoint.resource] = current
                dropped = current if current is not endpoint else None
            # A stream can end before its first message: then there is nothing to mark.
            known = self._devices.get(endpoint.resource)
            if disconnects and known is not None:
                self._set_devices(endpoint.resource, _unhealthy(known))
        if dropped is not None:
            _cancel(dropped)
        endpoint.channel.close()

    def _set_devices(self, resource: str, devices: tuple[DeviceState, ...]) -> None:
        """Publish a resource's devices. Caller holds _lock."""
        self._devices[resource] = devices
        self._changed.notify_all()
        self._on_devices(resource, devices)


class _ConnectError(Exception):
    pass


def _connect(resource: str, channel: grpc.Channel) -> _Endpoint:
    """Dial (blocking) and ask for the plugin's options, as `client.Connect` and
    `PluginConnected` do; raises _ConnectError with the kubelet's text."""
    try:
        grpc.channel_ready_future(channel).result(timeout=DIAL_TIMEOUT_SECONDS)
    except grpc.FutureTimeoutError:
        raise _ConnectError("failed to dial device plugin: context deadline exceeded") from None
    stub = pb_grpc.DevicePluginStub(channel)
    try:
        options = stub.GetDevicePluginOptions(pb.Empty(), timeout=RPC_TIMEOUT_SECONDS)
    except grpc.RpcError as exc:
        raise _ConnectError(f"failed to get device plugin options: {go_rpc_error(exc)}") from exc
    return _Endpoint(resource=resource, channel=channel, stub=stub, options=options)


def _cancel(endpoint: _Endpoint) -> None:
    """End the endpoint's stream; its watcher thread then drops it and closes the channel."""
    if endpoint.stream is not None:
        endpoint.stream.cancel()


def _unhealthy(devices: tuple[DeviceState, ...]) -> tuple[DeviceState, ...]:
    return tuple(device._replace(health=UNHEALTHY) for device in devices)


class _Registration(pb_grpc.RegistrationServicer):
    def __init__(self, owner: FakeDevicePlugins) -> None:
        self._owner = owner

    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        self._owner._register(request, context)
        return pb.Empty()
