"""The loop's per-workload steps, run so that no workload holds up another.

A step (reading a target, deciding and scaling, keeping headroom and status) runs for every
workload of a tick, STEP_CONCURRENCY at a time, and the tick waits for them at most its wait.
A step that raises (a bug, or data nothing checked) leaves its workload out of the rest of
the tick, counted and logged as an outage (the traceback once): an exception out of the tick
stopped the daemon. A step still running at the wait (a write a hung admission webhook holds
for its 30 s) goes on beside the loop, and its workload is busy: it sits out later ticks'
steps until that ends. A tick used to wait for each such write in turn, so every workload
acted as late as the sum of them.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable

from gpufleet.autoscaler.controller.stats import Stats
from gpufleet.autoscaler.controller.workload import Key, Tick

# A tick's workload steps at once: each may make API calls, on threads of their own.
STEP_CONCURRENCY = 4


class Steps:
    """Runs a tick's steps; remembers the busy workloads' steps still running."""

    def __init__(self, stats: Stats, log: logging.Logger, *, wait_seconds: float) -> None:
        self._stats = stats
        self._log = log
        self._wait = wait_seconds
        self._busy: dict[Key, asyncio.Task[bool]] = {}

    def busy(self) -> set[Key]:
        """The workloads whose step from an earlier tick still runs."""
        self._busy = {k: task for k, task in self._busy.items() if not task.done()}
        return set(self._busy)

    def close(self) -> None:
        """Cancel the steps still running (at shutdown)."""
        for task in self._busy.values():
            task.cancel()
        self._busy.clear()

    async def each(
        self, ticks: list[Tick], step: str, run: Callable[[Tick], Awaitable[None]]
    ) -> list[Tick]:
        """`run` on each tick; the ticks it ended on within the wait without raising, in
        order. A step that had not begun at the wait is dropped, taken again next tick."""
        lane = asyncio.Semaphore(STEP_CONCURRENCY)
        begun: set[Key] = set()

        async def one(t: Tick) -> bool:
            async with lane:
                begun.add(t.workload.key)
                outage = t.workload.outage(f"{step} fails; it sits this tick out", self._log)
                try:
                    await run(t)
                except Exception as err:
                    self._stats.errors["workload"] += 1
                    outage.raised(err)
                    return False
                outage.recovered()
                return True

        tasks = {asyncio.create_task(one(t)): t for t in ticks}
        if not tasks:
            return []
        _, pending = await asyncio.wait(tasks.keys(), timeout=self._wait)
        for task in pending:
            key = tasks[task].workload.key
            if key in begun:
                self._busy[key] = task
                self._stats.busy_steps += 1
            else:
                task.cancel()
        return [t for task, t in tasks.items() if task not in pending and task.result()]
