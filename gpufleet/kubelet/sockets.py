"""Unix-socket readiness, shared by the fake kubelet's servers and the device plugin.

A gRPC server's socket file exists before it accepts connections; a plain connect() is
the cheapest proof it does (~1 ms, where a gRPC `channel_ready_future` costs ~200 ms).
"""

import contextlib
import socket
import time
from pathlib import Path

READY_TIMEOUT_SECONDS = 5.0
_POLL_SECONDS = 0.005


def wait_until_connectable(path: Path, *, timeout_seconds: float = READY_TIMEOUT_SECONDS) -> None:
    """Block until the unix socket at `path` accepts a connection.

    Raises RuntimeError naming the path after `timeout_seconds`.
    """
    deadline = time.monotonic() + timeout_seconds
    while True:
        with (
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe,
            contextlib.suppress(OSError),
        ):
            probe.connect(str(path))
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not accept connections within {timeout_seconds} s")
        time.sleep(_POLL_SECONDS)
