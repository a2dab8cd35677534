"""Serving each resource's DevicePlugin socket and registering it with the kubelet, again
and again: after a kubelet restart (which re-creates kubelet.sock and deletes every plugin
socket), when the kubelet starts after the plugin, or when it re-creates its socket after
the first registration (the Bottlerocket ordering).

Detection is a stat() of kubelet.sock and of each plugin socket every 100 ms: two system
calls per tick, no dependency, and a restart is noticed well within the 1 s target. A
failed registration is retried with exponential backoff (0.1 s doubling to 5 s); the loop
never spins.
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
from gpufleet.plugin.kubelet.server import DevicePluginService

log = logging.getLogger(__name__)

VERSION = "v1beta1"
POLL_SECONDS = 0.1
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


def new_server() -> grpc.Server:
    """The gRPC server a resource is served by (the benchmark's floor uses the same).

    A synchronous `grpc.server`: a `grpc.aio` one on an event loop thread measured no
    faster per Allocate (BENCHMARKS.md, device plugin), and running unary handlers inline
    on the completion-queue thread deadlocks gRPC Python's server."""
    return grpc.server(futures.ThreadPoolExecutor(max_workers=8))


class _Endpoint:
    """One resource's gRPC server on its unix socket."""

    def __init__(self, service: DevicePluginService, path: Path) -> None:
        check_socket_path(path)  # ValueError now: gRPC's own bind error does not say why
        self.service = service
        self.path = path
        self._server: grpc.Server | None = None
        self.identity: tuple[int, int] | None = None

    def start(self) -> None:
        """Serve on the socket; raises (with nothing left running) if it cannot."""
        self.stop()
        self.path.unlink(missing_ok=True)  # a stale socket from an earlier run
        server = new_server()
        pb_grpc.add_DevicePluginServicer_to_server(self.service, server)
        try:
            server.add_insecure_port(f"unix://{self.path}")
            server.start()
            # Serving check before registering: the kubelet dials back inside Register.
            wait_until_connectable(self.path)
        except (RuntimeError, OSError):
            server.stop(grace=None)
            raise
        self._server = server
        self.identity = _identity(self.path)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0.5).wait(1)
            self._server = None


class PluginRunner:
    """Serves every resource and keeps each registered with the kubelet."""

    def __init__(
        self,
        services: Sequence[DevicePluginService],
        *,
        plugin_dir: Path,
        kubelet_socket: Path | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._endpoints = [_Endpoint(s, plugin_dir / socket_name(s.resource)) for s in services]
        self._kubelet_socket = kubelet_socket
        self._clock = clock
        self.state = RegistrationState()
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
        for endpoint in self._endpoints:
            endpoint.service.stop()
            endpoint.stop()
            endpoint.path.unlink(missing_ok=True)

    def _register(self, endpoint: _Endpoint) -> None:
        assert self._kubelet_socket is not None
        with grpc.insecure_channel(f"unix://{self._kubelet_socket}") as channel:
            pb_grpc.RegistrationStub(channel).Register(
                pb.RegisterRequest(
                    version=VERSION,
                    endpoint=endpoint.path.name,
                    resource_name=endpoint.service.resource,
                    options=pb.DevicePluginOptions(get_preferred_allocation_available=True),
                ),
                timeout=15,
            )

    def _run(self) -> None:
        if self._kubelet_socket is None:  # NVIDIA's --kubelet-socket="": serve only
            return
        # Each endpoint is registered with one kubelet incarnation (its socket's identity);
        # a new incarnation, or an endpoint re-served after its socket was deleted, needs
        # registering again. Only what failed is retried, after a backoff that a new
        # kubelet cuts short.
        registered: dict[int, tuple[int, int]] = {}
        backoff = MIN_BACKOFF_SECONDS
        while not self._stop.is_set():
            kubelet = _identity(self._kubelet_socket)
            failed = self._serve_missing(registered)
            pending = [
                (i, e) for i, e in enumerate(self._endpoints) if registered.get(i) != kubelet
            ]
            if kubelet is not None:
                for index, endpoint in pending:
                    if self._stop.is_set():
                        return
                    if self._register_one(endpoint):
                        registered[index] = kubelet
                    else:
                        failed = True
            self.state.registered = (
                kubelet is not None and not failed and (len(registered) == len(self._endpoints))
            )
            if failed:
                self._wait_for_change(backoff, kubelet)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
            else:
                backoff = MIN_BACKOFF_SECONDS
                self._stop.wait(POLL_SECONDS)

    def _serve_missing(self, registered: dict[int, tuple[int, int]]) -> bool:
        """Re-serve endpoints whose socket was deleted; True if one could not be served."""
        failed = False
        for index, endpoint in enumerate(self._endpoints):
            if _identity(endpoint.path) == endpoint.identity:
                continue
            registered.pop(index, None)
            log.info("plugin socket %s was removed; serving it again", endpoint.path)
            try:
                endpoint.start()
            except (RuntimeError, OSError) as exc:
                failed = True
                self.state.failures += 1
                log.warning("cannot serve %s yet: %s", endpoint.path, exc)
        return failed

    def _register_one(self, endpoint: _Endpoint) -> bool:
        try:
            self._register(endpoint)
        except (grpc.RpcError, OSError) as exc:
            self.state.failures += 1
            log.warning("registering %s failed: %s", endpoint.service.resource, exc)
            return False
        self.state.registrations += 1
        self.state.last_registration_seconds = self._clock()
        log.info("registered %s with the kubelet", endpoint.service.resource)
        return True

    def _wait_for_change(self, seconds: float, kubelet: tuple[int, int] | None) -> None:
        """Back off for `seconds`, but return as soon as the kubelet socket changes (a new
        kubelet is worth an immediate try) or the runner stops."""
        deadline = self._clock() + seconds
        while not self._stop.wait(min(POLL_SECONDS, max(0.0, deadline - self._clock()))):
            if self._clock() >= deadline or _identity(self._kubelet_socket) != kubelet:
                return
