"""The loop's per-workload steps, run so that no workload holds up another.

A step (reading a target, deciding and scaling, keeping headroom and status) runs for every
workload of a tick, STEP_CONCURRENCY at a time, and the tick waits for them at most its wait.
A step that raises (a bug, or data nothing checked) leaves its workload out of the rest of
the tick, counted and logged as an outage (the traceback once): an exception out of the tick
stopped the daemon. A step still running at the wait (a write a hung admission webhook holds
for its 30 s) goes on beside the loop, and its workload is busy: no step of it starts until
that one ends. A tick used to wait for each such write in turn, so every workload acted as
late as the sum of them. A workload once busy takes its next steps in a lane of its own
until one ends in time, so that slow workloads never take every slot from the others.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable

from gpufleet.autoscaler.controller.stats import Stats
from gpufleet.autoscaler.controller.workload import Key, Tick

# A tick's workload steps at once, in each lane: each may make API calls, on threads.
STEP_CONCURRENCY = 4


class Steps:
    """Runs a tick's steps; remembers the busy workloads' steps still running."""

    def __init__(self, stats: Stats, log: logging.Logger, *, wait_seconds: float) -> None:
        self._stats = stats
        self._log = log
        self._wait = wait_seconds
        self._busy: dict[Key, asyncio.Task[bool]] = {}
        self._slow: set[Key] = set()  # busy once, no step in time since: the slow lane

    def busy(self) -> set[Key]:
        """The workloads whose step from an earlier tick still runs."""
        self._busy = {k: task for k, task in self._busy.items() if not task.done()}
        return set(self._busy)

    def forget_all_but(self, keys: set[Key]) -> None:
        """Drop what is kept of workloads no longer run (their running steps go on)."""
        self._slow &= keys

    def close(self) -> None:
        """Cancel the steps still running (at shutdown)."""
        for task in self._busy.values():
            task.cancel()
        self._busy.clear()

    async def each(
        self,
        ticks: list[Tick],
        step: str,
        run: Callable[[Tick], Awaitable[None]],
        *,
        raised: set[Key],
    ) -> list[Tick]:
        """`run` on each tick of a workload not busy; the ticks it ended on within the wait
        without raising, in order; those it raised on are added to `raised`. A step that
        had not begun at the wait is dropped, taken again next tick. Cancelled (SIGTERM
        mid-tick), it cancels the steps it started."""
        busy = self.busy()
        lane, slow_lane = (asyncio.Semaphore(STEP_CONCURRENCY) for _ in range(2))
        begun: set[Key] = set()

        async def one(t: Tick) -> bool:
            async with slow_lane if t.workload.key in self._slow else lane:
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

        tasks = {asyncio.create_task(one(t)): t for t in ticks if t.workload.key not in busy}
        if not tasks:
            return []
        try:
            done, pending = await asyncio.wait(tasks.keys(), timeout=self._wait)
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            raise
        for task in done:
            key = tasks[task].workload.key
            self._slow.discard(key)
            if not task.result():
                raised.add(key)
        for task in pending:
            key = tasks[task].workload.key
            if key in begun:
                self._busy[key] = task
                self._slow.add(key)
                self._stats.busy_steps += 1
            else:
                task.cancel()
        return [t for task, t in tasks.items() if task in done and task.result()]
