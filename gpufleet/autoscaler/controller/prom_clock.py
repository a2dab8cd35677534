"""The loop's clock: this machine's, less how far it leads Prometheus' (`core.clock_lead`).

Read each tick beside the listing, so it adds no wait; a reading that fails or takes more
than a second keeps the lead last read (the gather reports an outage; a slow answer would
bound nothing).
"""

import asyncio
import logging
from collections.abc import Callable

from gpufleet.autoscaler.controller.stats import Stats
from gpufleet.autoscaler.core.clock_lead import clock_lead
from gpufleet.autoscaler.prom.client import PromClient, PromError

READ_SECONDS = 1.0
# A lead logged when it moves this far from the one last logged: never per tick, nor for
# a lead that comes and goes around a second.
LOG_CHANGE_SECONDS = 5.0


class PromClock:
    def __init__(
        self, prom: PromClient, clock: Callable[[], float], stats: Stats, log: logging.Logger
    ) -> None:
        self._prom = prom
        self._clock = clock
        self._stats = stats
        self._log = log
        self._logged = 0.0

    async def read(self) -> float:
        """Read Prometheus' time; returns the lead to take off this machine's clock."""
        sent = self._clock()
        try:
            async with asyncio.timeout(READ_SECONDS):
                server = await self._prom.server_time()
        except (PromError, TimeoutError):
            return self._stats.clock_lead_seconds
        lead = self._stats.clock_lead_seconds = clock_lead(sent, self._clock(), server)
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
