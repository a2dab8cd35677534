"""The loop's clock, read from a stand-in Prometheus over real loopback HTTP."""

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from gpufleet.autoscaler.controller.prom_clock import PromClock
from gpufleet.autoscaler.controller.stats import Stats
from gpufleet.autoscaler.prom.client import PromClient

LOG = logging.getLogger("test.prom_clock")


class Clock:
    """A Prometheus whose clock is `behind` this machine's; `status` other than 200 fails,
    and `delay` holds each answer."""

    behind = 0.0
    status = 200
    delay = 0.0

    async def handle(self, request: web.Request) -> web.Response:
        assert request.query["query"] == "time()"
        await asyncio.sleep(self.delay)
        if self.status != 200:
            return web.json_response({"status": "error", "error": "down"}, status=self.status)
        now = time.time() - self.behind
        return web.json_response(
            {"status": "success", "data": {"resultType": "scalar", "result": [now, f"{now}"]}}
        )


@pytest.fixture
async def prom() -> AsyncIterator[tuple[Clock, PromClient]]:
    clock = Clock()
    app = web.Application()
    app.router.add_get("/api/v1/query", clock.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    client = PromClient(f"http://127.0.0.1:{runner.addresses[0][1]}")
    yield clock, client
    await client.close()
    await runner.cleanup()


async def test_a_lead_is_taken_and_logged_when_it_moves(prom, caplog) -> None:
    server, client = prom
    stats = Stats()
    clock = PromClock(client, time.time, stats, LOG)
    caplog.set_level(logging.INFO, LOG.name)
    leads = []
    for behind in (0.0, 60.0, 60.0, 61.5, 0.0, 0.0):
        server.behind = behind
        leads.append(await clock.read())
    assert leads == pytest.approx([0.0, 60.0, 60.0, 61.5, 0.0, 0.0], abs=0.1)
    assert stats.clock_lead_seconds == 0.0
    assert [r.getMessage()[:45] for r in caplog.records] == [
        "this machine's clock leads Prometheus' by 60.",
        "this machine's clock agrees with Prometheus' ",
    ]


@pytest.mark.parametrize(
    ("status", "delay"), [pytest.param(503, 0.0, id="failed"), pytest.param(200, 1.5, id="slow")]
)
async def test_a_reading_that_fails_or_is_slow_keeps_the_last_lead(
    prom, status: int, delay: float
) -> None:
    """A slow answer bounds nothing; a failed one is the gather's outage to report."""
    server, client = prom
    stats = Stats()
    clock = PromClock(client, time.time, stats, LOG)
    server.behind = -30.0
    assert await clock.read() == pytest.approx(-30.0, abs=0.1)
    server.behind, server.status, server.delay = 0.0, status, delay
    assert await clock.read() == pytest.approx(-30.0, abs=0.1)
    assert stats.clock_lead_seconds == pytest.approx(-30.0, abs=0.1)


async def test_readings_that_fail_are_said_when_they_start_and_end(prom, caplog) -> None:
    """A proxy that passes only range queries fails every reading for good: one line, not
    one a tick, and the loop keeps this machine's clock."""
    server, client = prom
    clock = PromClock(client, time.time, Stats(), LOG)
    caplog.set_level(logging.INFO, LOG.name)
    server.status = 403
    for _ in range(5):
        assert await clock.read() == 0.0
    server.status = 200
    assert await clock.read() == 0.0
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("cannot read Prometheus' clock (time())")
    assert "works again, after 5 failures" in lines[1]


async def test_until_a_reading_has_come_it_is_waited_for_past_a_second(prom) -> None:
    """The first tick's fetches mark how far each query was fetched: on a clock a minute
    ahead, those marks held a minute of fresh samples back once the lead was known."""
    server, client = prom
    stats = Stats()
    clock = PromClock(client, time.time, stats, LOG)
    server.behind, server.delay = 60.0, 1.2
    assert await clock.read() == pytest.approx(60.0, abs=0.7)
    server.behind = 0.0
    assert await clock.read() == pytest.approx(60.0, abs=0.7)  # a second, then kept
