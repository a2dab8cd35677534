"""A daemon run out of file descriptors, as a flood of connections does it."""

import contextlib
import os
import resource
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def out_of_descriptors(pid: int, port: int, *, connections: int = 20) -> Iterator[None]:
    """Process `pid` left 3 spare descriptors, then more connections to loopback `port`
    than that held open; both undone on the way out."""
    in_use = len(os.listdir(f"/proc/{pid}/fd"))
    limits = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (in_use + 3, limits[1]))
    held: list[socket.socket] = []
    try:
        for _ in range(connections):
            held.append(socket.create_connection(("127.0.0.1", port)))
        yield
    finally:
        for conn in held:
            conn.close()
        with contextlib.suppress(ProcessLookupError):  # it may have died meanwhile
            resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
