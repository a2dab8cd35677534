"""A failing dependency is logged as its transitions: a handful of lines, not one a try."""

import asyncio
import logging
import socket
import subprocess
import sys

import pytest

from gpufleet.logs import LOG_BURST, OutageLog


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def outage(caplog):
    caplog.set_level(logging.INFO, logger="test.outage")
    clock = Clock()
    log = OutageLog(
        logging.getLogger("test.outage"), "cannot reach X", remind_seconds=300, clock=clock
    )
    return log, clock, caplog


def test_a_day_of_failures_every_second_is_a_few_lines(outage):
    log, clock, caplog = outage
    for second in range(86_400):
        clock.now = float(second)
        log.failed("connection refused")
    log.recovered()
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == "cannot reach X: connection refused"
    assert (
        messages[1]
        == "cannot reach X: connection refused (still, 300 failures since the last line)"
    )
    assert len(messages) == 86_400 // 300 + 1  # the first, a reminder per 5 minutes, recovery
    assert messages[-1] == "cannot reach X: works again, after 86400 failures"
    assert [r.levelname for r in caplog.records][-2:] == ["WARNING", "INFO"]


def test_a_new_reason_is_said_at_once_and_recovery_only_after_a_failure(outage):
    log, clock, caplog = outage
    log.recovered()
    assert log.failures == 0
    log.failed("timeout")
    clock.now = 1.0
    log.failed("timeout")
    clock.now = 2.0
    log.failed("HTTP 503")
    assert log.failures == 3
    log.recovered()
    log.recovered()
    assert [r.getMessage() for r in caplog.records] == [
        "cannot reach X: timeout",
        "cannot reach X: HTTP 503",
        "cannot reach X: works again, after 3 failures",
    ]


def test_a_kind_tells_reasons_apart_when_their_text_varies(outage):
    log, _clock, caplog = outage
    log.failed("refused by <conn at 0x1>", kind="unavailable")
    log.failed("refused by <conn at 0x2>", kind="unavailable")
    log.failed("took 10 s", kind="timeout")
    assert [r.getMessage() for r in caplog.records] == [
        "cannot reach X: refused by <conn at 0x1>",
        "cannot reach X: took 10 s",
    ]


def test_a_dependency_failing_every_other_try_is_a_few_lines(outage):
    """Each change was a line: a Prometheus timing out every other tick logged 99 lines
    in 100 ticks. Past a burst, one change per half reminder period; the next line says
    how many were not logged."""
    log, clock, caplog = outage
    for second in range(3600):
        clock.now = float(second)
        if second % 2:
            log.recovered()
        else:
            log.failed("timeout")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) <= 4 + 3600 // 150 + 1, messages
    assert "changes not logged before it" in messages[-1]


def test_a_failure_after_a_quiet_while_is_said_at_once(outage):
    log, clock, caplog = outage
    for second in range(4):  # the burst: four changes
        clock.now = float(second)
        if second % 2:
            log.recovered()
        else:
            log.failed("timeout")
    clock.now = 3600.0
    log.failed("refused")
    assert caplog.records[-1].getMessage() == "cannot reach X: refused"


def test_an_exception_is_its_traceback_once_an_outage_and_bounded(outage):
    """What nothing expected (a bug, or data nothing checked): the traceback goes with the
    outage's first line only, and its text is cut to a line."""
    log, clock, caplog = outage
    for second in range(3):
        clock.now = float(second)
        try:
            raise ValueError("x" * 10_000)
        except ValueError as err:
            log.raised(err)
    log.recovered()
    try:
        raise KeyError("again")
    except KeyError as err:
        log.raised(err)
    first, recovered, again = caplog.records
    assert first.levelname == "ERROR" and first.exc_info is not None
    assert first.getMessage().startswith("cannot reach X: ValueError: xxx")
    assert len(first.getMessage()) < 160
    assert recovered.getMessage() == "cannot reach X: works again, after 3 failures"
    assert again.exc_info is not None  # a new outage: its traceback too


def test_malformed_requests_to_an_aiohttp_server_are_a_few_one_line_warnings(
    caplog, monkeypatch
) -> None:
    """aiohttp logged each as an ERROR with its traceback, about 500 bytes: a scanner
    sending junk to the autoscaler's external metrics API filled its log."""
    from aiohttp import web

    from gpufleet import logs

    monkeypatch.setattr(logs, "MALFORMED_REQUESTS", logs._MalformedRequests())
    server_log = logging.getLogger("aiohttp.server")
    monkeypatch.setattr(server_log, "filters", [logs.MALFORMED_REQUESTS])
    caplog.set_level(logging.DEBUG, logger="aiohttp.server")
    junk = (
        b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
        b"\x00\x01garbage\r\n\r\n",
    )

    async def run() -> list[bytes]:
        app = web.Application()

        async def ok(request: web.Request) -> web.Response:
            return web.Response(text="ok")

        app.router.add_get("/", ok)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        answers = []
        try:
            for i in range(30):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(junk[i % len(junk)])
                answers.append(await reader.readline())
                writer.close()
        finally:
            await runner.cleanup()
        return answers

    answers = asyncio.run(run())
    assert {a.split(b" ")[1] for a in answers} == {b"400"}
    records = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert len(records) == LOG_BURST
    assert all(r.levelno == logging.WARNING and not r.exc_info for r in records)
    assert records[0].getMessage().startswith("a malformed request answered 400: ")


_OUT_OF_FILES = """
import asyncio, resource
from gpufleet.logs import setup_logging, throttle_accept_errors
setup_logging(debug=False, json_format=False)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

async def main():
    throttle_accept_errors(asyncio.get_running_loop())
    held = []
    servers = [
        await asyncio.start_server(lambda r, w: held.append(w), "127.0.0.1", 0)
        for _ in range(20)
    ]
    print(" ".join(str(s.sockets[0].getsockname()[1]) for s in servers), flush=True)
    await asyncio.sleep(4)

asyncio.run(main())
"""


def test_a_loop_out_of_file_descriptors_says_so_in_a_few_lines() -> None:
    """asyncio logged each failed accept with its traceback, once a second a listener
    while every descriptor was held: the lab, with a port a pod, logged 52,263 lines in
    8 s under clients that connected and never sent (16,994 lines in 4 s here)."""
    child = subprocess.Popen(
        [sys.executable, "-c", _OUT_OF_FILES],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ports = [int(p) for p in child.stdout.readline().split()]  # type: ignore[union-attr]
        clients = [socket.create_connection(("127.0.0.1", p)) for p in ports for _ in range(5)]
        _, stderr = child.communicate(timeout=30)
    finally:
        child.kill()
    for each in clients:
        each.close()
    lines = [line for line in stderr.splitlines() if "accept" in line]
    assert 1 <= len(lines) <= LOG_BURST, stderr[-2000:]
    assert "Traceback" not in stderr
    assert "cannot accept a connection: [Errno 24] Too many open files" in lines[0]
