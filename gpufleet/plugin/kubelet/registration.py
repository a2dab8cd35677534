"""Serving each resource's DevicePlugin socket and registering it with the kubelet, again
and again: after a kubelet restart (which re-creates kubelet.sock and deletes every plugin
socket), when the kubelet starts after the plugin, or when it re-creates its socket after
the first registration (the Bottlerocket ordering).

Detection is a stat() of kubelet.sock and of each plugin socket every 100 ms: two system
calls per tick, no dependency, and a restart is noticed well within the 1 s target. A
failed registration is retried with exponential backoff (0.1 s doubling to 5 s); the loop
never spins.

Register calls for every pending resource run at once, and a newer kubelet (its socket
re-created) cancels them: a call to a kubelet that died mid-Register may otherwise hang
until its 15 s deadline while the new kubelet waits (issue 16: 50 restarts 20 ms apart left
the plugin unregistered 15-25 s).
"""

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc

from gpufleet.kubelet.api import deviceplugin_v1beta1_pb2 as pb
from gpufleet.kubelet.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from gpufleet.kubelet.sockets import check_socket_path, wait_until_connectable
from gpufleet.logs import OutageLog
from gpufleet.plugin.kubelet.server import MAX_WATCHERS, DevicePluginService

log = logging.getLogger(__name__)

VERSION = "v1beta1"
POLL_SECONDS = 0.1
CANCEL_POLL_SECONDS = 0.02  # how often an in-flight Register looks for a newer kubelet
REGISTER_TIMEOUT_SECONDS = 15.0
MIN_BACKOFF_SECONDS = 0.1
MAX_BACKOFF_SECONDS = 5.0


def socket_name(resource: str) -> str:
    """NVIDIA's socket name: `nvidia-<resource without the nvidia.com/ prefix>.sock`."""
    return f"nvidia-{resource.split('/', 1)[-1]}.sock"


def _identity(path: Path) -> tuple[int, int] | None:
    """(inode, ctime ns) of a file, None when absent: changes when it is re-created."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_ctime_ns)


@dataclass(slots=True)
class RegistrationState:
    """Counters for self-metrics: registrations, failures, and whether all are current."""

    registrations: int = 0
    failures: int = 0
    registered: bool = False
    last_registration_seconds: float = 0.0  # monotonic


_UNARY_WORKERS = 4  # left for Allocate and the other calls while every stream is open


def new_server() -> grpc.Server:
    """The gRPC server a resource is served by (the benchmark's floor uses the same).

    A synchronous `grpc.server`: a `grpc.aio` one on an event loop thread measured no
    faster per Allocate (BENCHMARKS.md, device plugin), and running unary handlers inline
    on the completion-queue thread deadlocks gRPC Python's server."""
    return grpc.server(futures.ThreadPoolExecutor(max_workers=MAX_WATCHERS + _UNARY_WORKERS))


class _Endpoint:
    """One resource's gRPC server on its unix socket."""

    def __init__(self, service: DevicePluginService, path: Path) -> None:
        check_socket_path(path)  # ValueError now: gRPC's own bind error does not say why
        self.service = service
        self.path = path
        self._server: grpc.Server | None = None
        self.identity: tuple[int, int] | None = None
        # A Register was sent for this server, whatever came of it: a kubelet may have
        # taken a call the plugin then cancelled (it connects before it answers).
        self.asked = False
        self.streams_before = 0  # the service's streams_started when Register was sent

    def start(self, *, grace: float = 0.5) -> None:
        """Serve on the socket; raises (with nothing left running) if it cannot."""
        self.stop(grace=grace)
        self.path.unlink(missing_ok=True)  # a stale socket from an earlier run
        server = new_server()
        pb_grpc.add_DevicePluginServicer_to_server(self.service, server)
        try:
            server.add_insecure_port(f"unix://{self.path}")
            server.start()
            # Serving check before registering: the kubelet dials back inside Register.
            wait_until_connectable(self.path, missing_is_error=True)
        except (RuntimeError, OSError):
            server.stop(grace=None)
            raise
        self._server = server
        self.identity = _identity(self.path)
        self.asked = False  # no Register sent for this server yet

    @property
    def serving(self) -> bool:
        return self._server is not None

    def stop(self, *, grace: float = 0.5) -> None:
        if self._server is not None:
            self._server.stop(grace=grace).wait(grace + 0.5)
            self._server = None


# (service) -> None when it may be registered, else what it waits for, as a clause ("its
# MPS control daemon answers (...)"). Called on the registration thread before each
# registration.
Readiness = Callable[[DevicePluginService], str | None]


class PluginRunner:
    """Serves every resource and keeps each registered with the kubelet; one whose
    `ready` check fails is registered only once it passes (retried with the backoff)."""

    def __init__(
        self,
        services: Sequence[DevicePluginService],
        *,
        plugin_dir: Path,
        kubelet_socket: Path | None,
        ready: Readiness = lambda _service: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._plugin_dir = plugin_dir
        self._ready = ready
        self._clock = clock
        self._waiting: dict[_Endpoint, str] = {}  # endpoint -> why it is not ready (logged)
        # Retried every few seconds while the kubelet is away: logged as transitions.
        self._no_kubelet = OutageLog(
            log, f"waiting for the kubelet socket {kubelet_socket}", clock=clock
        )
        self._refused: dict[str, OutageLog] = {}  # resource -> its Register calls failing
        self._crashed = OutageLog(log, "keeping the plugin registered", clock=clock)
        self._endpoints = [_Endpoint(s, plugin_dir / socket_name(s.resource)) for s in services]
        self._kubelet_socket = kubelet_socket
        self.state = RegistrationState()
        self._lock = threading.Lock()  # serving an endpoint
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="plugin-registration", daemon=True)

    def start(self) -> None:
        """Serve every resource, then keep them registered from a thread. Raises
        RuntimeError or OSError, serving nothing, if a socket cannot be served."""
        try:
            for endpoint in self._endpoints:
                endpoint.start()
        except (RuntimeError, OSError):
            for endpoint in self._endpoints:
                endpoint.stop()
            raise
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        with self._lock:
            for endpoint in self._endpoints:
                endpoint.service.stop()
                endpoint.stop()
                endpoint.path.unlink(missing_ok=True)

    def replace(self, services: Sequence[DevicePluginService]) -> None:
        """Serve `services` from now on (a config reload). A service that is the same object
        as a running one keeps its socket, streams and registration; any other is served
        (after the old one of its resource is stopped: they share a socket) and registered
        by the loop. A resource no longer served has its socket removed. A socket that
        cannot be served is logged and retried by the loop."""
        with self._lock:
            running = {id(e.service): e for e in self._endpoints}
            endpoints = [
                running.get(id(s)) or _Endpoint(s, self._plugin_dir / socket_name(s.resource))
                for s in services
            ]
            for old in set(self._endpoints) - set(endpoints):
                old.service.stop()
                old.stop()
                old.path.unlink(missing_ok=True)
            for endpoint in endpoints:
                if not endpoint.serving:
                    self._serve(endpoint)
            self._endpoints = endpoints

    def _request(self, endpoint: _Endpoint) -> pb.RegisterRequest:
        return pb.RegisterRequest(
            version=VERSION,
            endpoint=endpoint.path.name,
            resource_name=endpoint.service.resource,
            options=pb.DevicePluginOptions(get_preferred_allocation_available=True),
        )

    def _run(self) -> None:
        if self._kubelet_socket is None:  # NVIDIA's --kubelet-socket="": serve only
            return
        # Each endpoint is registered with one kubelet incarnation (its socket's identity);
        # a new incarnation, or an endpoint re-served after its socket was deleted, needs
        # registering again. Only what failed is retried, after a backoff that a new
        # kubelet cuts short.
        registered: dict[_Endpoint, tuple[int, int]] = {}
        backoff = MIN_BACKOFF_SECONDS
        last: tuple[int, int] | None = None
        while not self._stop.is_set():
            try:
                kubelet = _identity(self._kubelet_socket)
                if kubelet != last:  # a new kubelet owes nothing to the last one's failures
                    backoff, last = MIN_BACKOFF_SECONDS, kubelet
                failed, superseded = self._keep_registered(registered, kubelet)
                self._crashed.recovered()
            except Exception as err:  # a bug, or a host answer no check foresaw: retried
                self._crashed.raised(err)
                self.state.registered = False
                failed, superseded = True, False
            if superseded:
                continue  # a newer kubelet: register with it now
            if failed:
                self._wait_for_change(backoff, last)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
            else:
                backoff = MIN_BACKOFF_SECONDS
                self._stop.wait(POLL_SECONDS)

    def _keep_registered(
        self, registered: dict[_Endpoint, tuple[int, int]], kubelet: tuple[int, int] | None
    ) -> tuple[bool, bool]:
        """One pass: serve what is missing, register what is not with `kubelet` (None: its
        socket is absent). (failed, superseded by a newer kubelet)."""
        if kubelet is None:
            self._no_kubelet.failed("no socket there yet", kind="missing")
        else:
            self._no_kubelet.recovered()
        failed = self._serve_missing(registered)
        with self._lock:
            endpoints = list(self._endpoints)
        for gone in set(registered) - set(endpoints):
            del registered[gone]
        for gone in set(self._waiting) - set(endpoints):
            del self._waiting[gone]
        pending = [e for e in endpoints if registered.get(e) != kubelet]
        if kubelet is not None:
            unready = self._unready(pending)
            pending = [e for e in pending if e not in unready]
            failed = failed or bool(unready)
            failed = self._restart_asked(pending) or failed
            pending = [e for e in pending if e.serving]
        superseded = False
        if kubelet is not None and pending:
            done, superseded = self._register_all(pending, kubelet)
            registered.update(dict.fromkeys(done, kubelet))
            failed = failed or (len(done) < len(pending) and not superseded)
        failed = self._forget_dropped(registered, kubelet) or failed
        self.state.registered = kubelet is not None and all(
            registered.get(e) == kubelet for e in endpoints
        )
        return failed, superseded

    def _unready(self, endpoints: Sequence[_Endpoint]) -> set[_Endpoint]:
        """Those of `endpoints` whose readiness check fails; logs when one starts waiting
        (or its reason changes) and when it is ready, not at every retry."""
        unready = set()
        for endpoint in endpoints:
            why = self._ready(endpoint.service)
            before = self._waiting.pop(endpoint, None)
            if why is None:
                if before is not None:
                    log.info("%s is ready: registering it", endpoint.service.resource)
                continue
            unready.add(endpoint)
            self._waiting[endpoint] = why
            if why != before:
                log.warning("not registering %s until %s; retrying", endpoint.service.resource, why)
        return unready

    def _restart_asked(self, pending: Sequence[_Endpoint]) -> bool:
        """Serve again, before registering it anew, each endpoint whose server was already
        asked to register, as NVIDIA's plugin restarts its servers when kubelet.sock is
        created: one registration per server. Since 1.26 a kubelet keeps the earlier client
        and its ListAndWatch stream when a resource registers again (the kubelet re-made
        its socket in place, as the Bottlerocket ordering does, or took a Register the
        plugin then cancelled): each such registration left one more stream open, until
        the plugin refused one (MAX_WATCHERS) and the kubelet, the stream failing, took the
        resource's devices for disconnected. All stop at once, with no grace: the kubelet
        sees the resource gone no longer than it must. True if one could not be served."""
        with self._lock:
            again = [e for e in pending if e.asked and e.serving]
            for endpoint in again:
                log.info("registering %s again: serving it anew first", endpoint.path)
                endpoint.stop(grace=0)
            served = [self._serve(endpoint, grace=0) for endpoint in again]
        return not all(served)

    def _forget_dropped(
        self, registered: dict[_Endpoint, tuple[int, int]], kubelet: tuple[int, int] | None
    ) -> bool:
        """Registered endpoints whose ListAndWatch stream the kubelet closed (a kubelet
        disconnects a resource when an earlier client's stream ends after the plugin
        registered again): registered again at once, not never. True if one was."""
        dropped = [
            e
            for e, at in registered.items()
            if at == kubelet
            and e.serving
            # the kubelet opens its stream after Register answers: none yet is no drop
            and e.service.streams_started > e.streams_before
            and e.service.streams_open() == 0
        ]
        for endpoint in dropped:
            log.warning(
                "the kubelet closed %s's ListAndWatch stream: registering it again",
                endpoint.service.resource,
            )
            del registered[endpoint]
        return bool(dropped)

    def _serve_missing(self, registered: dict[_Endpoint, tuple[int, int]]) -> bool:
        """Re-serve endpoints whose socket was deleted; True if one could not be served."""
        failed = False
        with self._lock:
            for endpoint in self._endpoints:
                # identity None: the socket was wiped as it started, so serve it again.
                current = _identity(endpoint.path)
                if endpoint.serving and current is not None and current == endpoint.identity:
                    continue
                registered.pop(endpoint, None)
                log.info("plugin socket %s was removed; serving it again", endpoint.path)
                failed = not self._serve(endpoint) or failed
        return failed

    def _serve(self, endpoint: _Endpoint, *, grace: float = 0.5) -> bool:
        """Serve `endpoint` (again); False, counted and logged, if it cannot be yet: the
        loop retries it."""
        try:
            endpoint.start(grace=grace)
        except (RuntimeError, OSError) as exc:
            self.state.failures += 1
            log.warning("cannot serve %s yet: %s", endpoint.path, exc)
            return False
        return True

    def _register_all(
        self, endpoints: Sequence[_Endpoint], kubelet: tuple[int, int]
    ) -> tuple[list[_Endpoint], bool]:
        """Register `endpoints` with the kubelet at once; return those registered, and
        whether a newer kubelet (or stopping) cancelled the calls still in flight."""
        assert self._kubelet_socket is not None
        finished = threading.Semaphore(0)
        # A connection of its own: gRPC Python shares one per address process-wide, and
        # one to a dead kubelet waits out a reconnect backoff of a second or more.
        with grpc.insecure_channel(
            f"unix://{self._kubelet_socket}", options=[("grpc.use_local_subchannel_pool", 1)]
        ) as channel:
            stub = pb_grpc.RegistrationStub(channel)
            calls = {}
            for endpoint in endpoints:
                endpoint.asked = True
                endpoint.streams_before = endpoint.service.streams_started
                call = stub.Register.future(
                    self._request(endpoint), timeout=REGISTER_TIMEOUT_SECONDS
                )
                call.add_done_callback(lambda _call: finished.release())
                calls[endpoint] = call
            superseded = False
            for _ in calls:
                while not finished.acquire(timeout=CANCEL_POLL_SECONDS):
                    if self._stop.is_set() or _identity(self._kubelet_socket) != kubelet:
                        superseded = True
                        break
                if superseded:
                    for call in calls.values():
                        call.cancel()
                    break
            return [e for e, call in calls.items() if self._done(e, call)], superseded

    def _done(self, endpoint: _Endpoint, call: grpc.Future) -> bool:
        """Whether a finished Register call succeeded; counts and logs it either way.
        A call cancelled for a newer kubelet is neither."""
        if call.cancelled():
            return False
        try:
            call.result()
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.CANCELLED:  # type: ignore[attr-defined]
                return False
            self.state.failures += 1
            code = exc.code()  # type: ignore[attr-defined]
            details = " ".join(str(exc.details() or "").split())  # type: ignore[attr-defined]
            self._refusals(endpoint).failed(f"{code.name}: {details}", kind=code.name)
            return False
        self.state.registrations += 1
        self.state.last_registration_seconds = self._clock()
        self._refusals(endpoint).recovered()
        log.info("registered %s with the kubelet", endpoint.service.resource)
        return True

    def _refusals(self, endpoint: _Endpoint) -> OutageLog:
        resource = endpoint.service.resource
        if resource not in self._refused:
            self._refused[resource] = OutageLog(
                log, f"registering {resource} fails", clock=self._clock
            )
        return self._refused[resource]

    def _wait_for_change(self, seconds: float, kubelet: tuple[int, int] | None) -> None:
        """Back off for `seconds`, but return as soon as the kubelet socket changes (a new
        kubelet is worth an immediate try) or the runner stops."""
        deadline = self._clock() + seconds
        while not self._stop.wait(min(POLL_SECONDS, max(0.0, deadline - self._clock()))):
            if self._clock() >= deadline or _identity(self._kubelet_socket) != kubelet:
                return
