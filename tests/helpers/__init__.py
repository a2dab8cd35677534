"""Helpers shared by the test suites: polling with a deadline, a free loopback port,
connections that stall before their request, the lab's listener flags on ephemeral ports,
and where the repository, its test data and the shared traces are.

A plain module (on the path through pyproject's `pythonpath = ["tests"]`), not a conftest:
pytest imports every conftest.py outside a package as the module `conftest`, so
`from conftest import ...` would depend on which one was loaded last.
"""

import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
TEST_DATA = REPO / "tests" / "data"
# The shared traces sit beside the checkout (../shared), as in every developer's and CI's tree.
TRACES = REPO.parent / "shared" / "traces"
# `gpufleet lab`'s listeners other than --address, each on a free port, so that a lab under
# test never clashes with one (or anything else on the defaults: 8080, 9090, ...) beside it.
LAB_PORTS = [
    f"--{name}-address=127.0.0.1:0"
    for name in ("plugin", "api", "autoscaler", "prometheus", "alertmanager", "web")
]


def wait_for(
    predicate: Callable[[], T], *, timeout: float = 15.0, what: str = "", poll_seconds: float = 0.02
) -> T:
    """Poll `predicate` every `poll_seconds` until it returns something truthy; return that.

    Fails the test naming `what` once `timeout` seconds have passed. A predicate that does
    real work (an HTTP scrape) may want a longer `poll_seconds`.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(poll_seconds)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for servers started by others)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stalled_connections_answer(port: int, *, timeout: float = 30.0) -> tuple[bytes, bytes]:
    """What a connection to 127.0.0.1:`port` that never sends, and one that sends half a
    request head, read until the server closes them: b"" each when it closes them
    unanswered. Fails the test if either is still open after `timeout` seconds."""
    silent = socket.create_connection(("127.0.0.1", port))
    partial = socket.create_connection(("127.0.0.1", port))
    try:
        partial.sendall(b"GET / HTTP/1.1\r\nHo")
        answers = []
        for sock in (silent, partial):
            sock.settimeout(timeout)
            try:
                answers.append(sock.recv(100))
            except TimeoutError:
                pytest.fail(f"a stalled connection to port {port} open after {timeout} s")
        return answers[0], answers[1]
    finally:
        silent.close()
        partial.close()
