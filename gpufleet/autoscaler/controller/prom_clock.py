"""The loop's clock: this machine's, less how far it leads Prometheus' (`core.clock_lead`).

Read each tick beside the API listing, so it adds no wait unless Prometheus answers slower
than the API lists, and then at most a second: a slower answer would bound nothing, so
it keeps the lead last read, as a failed reading does. Until a reading has come, the first
is waited for as long as any query: the first tick's fetches would otherwise ask, on a
clock a minute ahead, for a minute of steps still to come, which the gather takes back and
fetches again once the lead is known (`prom_gather`). Readings that fail are logged as an
outage (a proxy that passes only range queries, a backend whose `time()` is neither a
scalar nor a vector of one), not counted as errors: the loop then runs on this machine's
clock, as it did before it read Prometheus'.
"""

import asyncio
import logging
from collections.abc import Callable

from gpufleet.autoscaler.controller.stats import Stats
from gpufleet.autoscaler.core.clock_lead import clock_lead
from gpufleet.autoscaler.prom.client import PromClient, PromError
from gpufleet.logs import OutageLog

READ_SECONDS = 1.0
# A lead logged when it moves this far from the one last logged: never per tick, nor for
# a lead that comes and goes around a second.
LOG_CHANGE_SECONDS = 5.0
# Failed readings are said when they start and end, and reminded of daily: a backend that
# cannot answer `time()` fails every tick for good.
REMIND_SECONDS = 86_400.0


class PromClock:
    def __init__(
        self, prom: PromClient, clock: Callable[[], float], stats: Stats, log: logging.Logger
    ) -> None:
        self._prom = prom
        self._clock = clock
        self._stats = stats
        self._log = log
        self._logged = 0.0
        self._read = False  # a reading has come
        self.read_now = False  # the last `read` came: the lead it returned is this tick's
        self._failing = OutageLog(
            log,
            "cannot read Prometheus' clock (time()); the loop keeps the lead last read",
            remind_seconds=REMIND_SECONDS,
        )

    async def read(self) -> float:
        """Read Prometheus' time; returns the lead to take off this machine's clock."""
        last = self._stats.clock_lead_seconds
        self.read_now = False
        sent = self._clock()
        try:
            async with asyncio.timeout(READ_SECONDS if self._read else None):
                server = await self._prom.server_time()
        except TimeoutError:
            self._failing.failed(f"no answer within {READ_SECONDS:g} s", kind="slow")
            return last
        except PromError as err:
            self._failing.failed(f"{err.kind}: {err}", kind=str(err.kind))
            return last
        self._failing.recovered()
        self._read = self.read_now = True
        lead = self._stats.clock_lead_seconds = clock_lead(sent, self._clock(), server, last=last)
        if abs(lead - self._logged) >= LOG_CHANGE_SECONDS:
            self._logged = lead
            if lead:
                self._log.warning(
                    "this machine's clock %s Prometheus' by %.1f s: the loop runs on "
                    "Prometheus' time",
                    "leads" if lead > 0 else "trails",
                    abs(lead),
                )
            else:
                self._log.info("this machine's clock agrees with Prometheus' again")
        return lead
