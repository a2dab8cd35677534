"""What clients can make the HTTP server log: bounded, counted, never a client's traceback.

Issue 15: 5,000 malformed requests gave 2.9 MB of ERROR tracebacks, and running out of file
descriptors gave 16,255 accept() tracebacks in 10 s. Real sockets against the real server;
the fd test lowers RLIMIT_NOFILE of a real exporter process.
"""

import asyncio
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from helpers import free_port, wait_for
from helpers.clock import ManualClock
from helpers.descriptors import out_of_descriptors

from gpufleet.exporter.http.server import build_app, start_server
from gpufleet.exporter.http.store import ExpositionStore
from gpufleet.logs import LOG_BURST, LOG_EVERY_SECONDS, ThrottledLog

GPUFLEET = [sys.executable, "-m", "gpufleet.cli"]
MALFORMED = [
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nX: \x00\x01\r\n\r\n",
    b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03junk\r\n\r\n",  # TLS to the plain port
    b"GET /metrics HTTP/9.9\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
]


@pytest.mark.parametrize(
    ("steps", "logged"),
    [
        ([0.0] * 3, [None] * 3),
        ([0.0] * (LOG_BURST + 3), [None] * LOG_BURST),
        ([0.0] * (LOG_BURST + 3) + [LOG_EVERY_SECONDS], [None] * LOG_BURST + [3]),
        ([0.0] * (LOG_BURST + 1) + [LOG_EVERY_SECONDS, 0.0], [None] * LOG_BURST + [1]),
    ],
    ids=["under the burst", "burst then silence", "next line counts the held back", "again"],
)
def test_throttled_log_holds_back_and_says_how_many(steps, logged, caplog):
    clock = ManualClock(0.0)
    throttled = ThrottledLog(logging.getLogger("test.throttled"), clock=clock)
    with caplog.at_level(logging.INFO, logger="test.throttled"):
        for step in steps:
            clock.advance(step)
            throttled.log(logging.WARNING, "event %s", "x")
    held = [r.args[1] if len(r.args) > 1 else None for r in caplog.records]
    assert held == logged


def _send(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(payload)
        return conn.recv(64)


async def test_malformed_requests_are_counted_one_line_each_at_most_never_a_traceback(caplog):
    app = build_app(ExpositionStore(), web_config=None, stale_after_seconds=10.0)
    server = await start_server(app, host="127.0.0.1", port=0)
    rounds = 50
    started = time.monotonic()
    try:
        with caplog.at_level(logging.DEBUG):
            for payload in MALFORMED * rounds:
                reply = await asyncio.to_thread(_send, server.port, payload)
                assert re.match(rb"HTTP/1\.1 [45]\d\d ", reply), reply
    finally:
        await server.close()
    assert app.stats.bad_requests_total == len(MALFORMED) * rounds
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    # A burst, then one line per interval: a bound, not a timing (a slow machine may
    # take more than one interval for these requests).
    intervals = (time.monotonic() - started) // LOG_EVERY_SECONDS
    assert LOG_BURST <= len(warnings) <= LOG_BURST + intervals
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in caplog.records)
    assert all(len(r.getMessage()) < 400 for r in warnings)
    assert all(r.name == "gpufleet.http.abuse" for r in warnings)


async def test_a_bug_in_a_handler_still_logs_its_traceback(caplog):
    async def broken(request):
        raise RuntimeError("a bug of ours")

    app = build_app(
        ExpositionStore(),
        web_config=None,
        stale_after_seconds=10.0,
        extra_routes={"/broken": broken},
    )
    server = await start_server(app, host="127.0.0.1", port=0)
    try:
        reply = await asyncio.to_thread(
            _send, server.port, b"GET /broken HTTP/1.1\r\nHost: x\r\n\r\n"
        )
    finally:
        await server.close()
    assert b" 500 " in reply[:20]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info and "a bug of ours" in caplog.text
    assert app.stats.bad_requests_total == 0


def _metric(port: int, name: str) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def test_running_out_of_file_descriptors_is_counted_and_logged_a_few_lines(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [*GPUFLEET, "exporter", "--fake-gpus", "-a", f"127.0.0.1:{port}", "-c", "100"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        wait_for(lambda: _metric(port, "gpufleet_exporter_collections_total"), what="startup")
        with out_of_descriptors(proc.pid, port):
            # The burst of lines, then a retry cycle (asyncio retries a failed accept after
            # 1 s) whose failures the throttle keeps out of the log. Under load failures
            # come slower, so the test waits for them instead of counting on a rate.
            wait_for(
                lambda: sum("cannot accept connections" in line for line in lines) >= LOG_BURST,
                timeout=30,
                what="the burst of accept warnings",
            )
            time.sleep(2.5)
        failures = wait_for(
            lambda: _metric(port, "gpufleet_exporter_http_accept_errors_total"),
            timeout=30,
            what="the exporter serving again, with accept errors counted",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        reader.join(timeout=5)
    assert proc.returncode == 0
    log = "".join(lines)
    accept_lines = [line for line in lines if "cannot accept connections" in line]
    # Many failures, few lines: every failure counted, the log throttled.
    assert failures > len(accept_lines) >= LOG_BURST
    assert 1 <= len(accept_lines) <= LOG_BURST + 2, log[-2000:]
    assert "Traceback" not in log and "Exception in callback" not in log
