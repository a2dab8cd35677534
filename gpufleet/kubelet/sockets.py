"""Unix-socket gRPC serving, shared by the fake kubelet's servers and the device plugin.

A gRPC server's socket file exists before it accepts connections; a plain connect() is
the cheapest proof it does (~1 ms, where a gRPC `channel_ready_future` costs ~200 ms).
"""

import logging
import socket
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc

log = logging.getLogger(__name__)

READY_TIMEOUT_SECONDS = 5.0
MAX_SOCKET_PATH_BYTES = 107  # sockaddr_un.sun_path is 108 bytes, NUL included
_POLL_SECONDS = 0.005


def wait_until_connectable(
    path: Path, *, timeout_seconds: float = READY_TIMEOUT_SECONDS, missing_is_error: bool = False
) -> None:
    """Block until the unix socket at `path` accepts a connection.

    Raises RuntimeError naming the path after `timeout_seconds`, or at once when the file
    is absent and `missing_is_error` (a server that has bound it saw it deleted: a
    restarting kubelet wipes the plugin directory).
    """
    deadline = time.monotonic() + timeout_seconds
    while True:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(path))
                return
            except FileNotFoundError:
                if missing_is_error:
                    raise RuntimeError(f"{path} was removed as it started serving") from None
            except OSError:
                pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not accept connections within {timeout_seconds} s")
        time.sleep(_POLL_SECONDS)


def check_socket_path(path: Path) -> None:
    """Raise ValueError when `path` cannot be bound: bind() would fail later, less clearly."""
    if len(str(path).encode()) > MAX_SOCKET_PATH_BYTES:
        raise ValueError(
            f"socket path {path} is longer than {MAX_SOCKET_PATH_BYTES} bytes, "
            "the unix socket limit; use a shorter directory"
        )


class UnixSocketServer:
    """A gRPC server on one unix socket, owning its thread pool and its socket file.

    `add_servicers(server)` registers the services before the server starts. Not
    thread-safe: its owner serialises `start` and `stop`.
    """

    def __init__(
        self,
        path: Path,
        add_servicers: Callable[[grpc.Server], None],
        *,
        max_workers: int,
        thread_name_prefix: str,
    ) -> None:
        check_socket_path(path)
        self.path = path
        self._add_servicers = add_servicers
        self._max_workers = max_workers
        self._thread_name_prefix = thread_name_prefix
        self._server: grpc.Server | None = None
        self._executor: futures.ThreadPoolExecutor | None = None

    @property
    def serving(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        """Listen on `path`; returns once the socket accepts connections. Raises
        RuntimeError if already serving or the socket never accepts (nothing is left
        running then)."""
        if self._server is not None:
            raise RuntimeError(f"gRPC server on {self.path} already started")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)  # a stale socket file would make bind fail
        executor = futures.ThreadPoolExecutor(
            max_workers=self._max_workers, thread_name_prefix=self._thread_name_prefix
        )
        server = grpc.server(executor)
        self._add_servicers(server)
        try:
            server.add_insecure_port(f"unix://{self.path}")
            server.start()
            wait_until_connectable(self.path)
        except (RuntimeError, OSError):
            server.stop(grace=None).wait()
            executor.shutdown(wait=True)
            raise
        self._server, self._executor = server, executor
        log.debug("gRPC serving on %s", self.path)

    def stop(self, *, wait: bool = True) -> None:
        """Stop serving (calls in flight are cancelled) and remove the socket file. With
        `wait`, return once every handler has returned; without, a handler still blocked
        in work of its own finishes on its thread, its answer going nowhere."""
        server, executor = self._server, self._executor
        self._server = self._executor = None
        if server is not None:
            server.stop(grace=None).wait()
        if executor is not None:
            executor.shutdown(wait=wait)
        self.path.unlink(missing_ok=True)
