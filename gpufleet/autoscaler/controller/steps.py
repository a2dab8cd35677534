"""The loop's per-workload steps, run so that no workload holds up another.

A step (reading a target, deciding and scaling, keeping headroom and status; for an invalid
GPUAutoscaler, writing its condition and releasing its headroom) runs for every workload of a
tick, STEP_CONCURRENCY at a time, and the tick waits for them at most its wait.
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
from typing import TypeVar

from gpufleet.autoscaler.controller.deadline import Lanes, wait_or_detach
from gpufleet.autoscaler.controller.stats import Stats
from gpufleet.autoscaler.controller.workload import Key, Tick
from gpufleet.logs import OutageLog

T = TypeVar("T")

# A tick's workload steps at once, in each lane (`deadline`): each may make API calls, on
# threads.
STEP_CONCURRENCY = 4


class Steps:
    """Runs a tick's steps; remembers the busy workloads' steps still running."""

    def __init__(self, stats: Stats, log: logging.Logger, *, wait_seconds: float) -> None:
        self._stats = stats
        self._log = log
        self._wait = wait_seconds
        self._busy: dict[Key, asyncio.Task[bool]] = {}
        self._lanes: Lanes[Key] = Lanes(STEP_CONCURRENCY)
        self._outages: dict[tuple[Key, str], OutageLog] = {}  # by (GPUAutoscaler, step)

    def busy(self) -> set[Key]:
        """The workloads whose step from an earlier tick still runs."""
        self._busy = {k: task for k, task in self._busy.items() if not task.done()}
        return set(self._busy)

    def forget_all_but(self, keys: set[Key]) -> None:
        """Drop what is kept of GPUAutoscalers gone (their running steps go on)."""
        self._lanes.keep_only(keys)
        self._outages = {k: v for k, v in self._outages.items() if k[0] in keys}

    def _outage(self, key: Key, step: str) -> OutageLog:
        found = self._outages.get((key, step))
        if found is None:
            what = f"{key[0]}/{key[1]}: {step} fails; it sits this tick out"
            found = self._outages[(key, step)] = OutageLog(self._log, what)
        return found

    def close(self) -> None:
        """Cancel the steps still running (at shutdown)."""
        for task in self._busy.values():
            task.cancel()
        self._busy.clear()

    async def each(
        self,
        items: list[T],
        step: str,
        run: Callable[[T], Awaitable[None]],
        *,
        key: Callable[[T], Key],
        raised: set[Key],
    ) -> list[T]:
        """`run` on each item (a Tick, or an invalid GPUAutoscaler's key) whose `key` is not
        busy; the items it ended on within the wait without raising, in order; the keys it
        raised on are added to `raised`. A step that had not begun at the wait is dropped,
        taken again next tick. Cancelled (SIGTERM mid-tick), it cancels the steps it
        started."""
        busy = self.busy()
        lane = self._lanes.open()
        begun: set[Key] = set()

        async def one(item: T) -> bool:
            k = key(item)
            async with lane(k):
                begun.add(k)
                outage = self._outage(k, step)
                try:
                    await run(item)
                except Exception as err:
                    self._stats.errors["workload"] += 1
                    outage.raised(err)
                    return False
                outage.recovered()
                return True

        tasks = {asyncio.create_task(one(item)): item for item in items if key(item) not in busy}
        if not tasks:
            return []
        done, detached = await wait_or_detach(
            tasks.keys(), self._wait, begun=lambda task: key(tasks[task]) in begun
        )
        for task in detached:
            self._busy[key(tasks[task])] = task
        self._stats.busy_steps += len(detached)
        self._lanes.settle(
            in_time=[key(tasks[task]) for task in done],
            late=[key(tasks[task]) for task in detached],
        )
        raised.update(key(tasks[task]) for task in done if not task.result())
        return [item for task, item in tasks.items() if task in done and task.result()]


def tick_key(t: Tick) -> Key:
    """The GPUAutoscaler a tick is of."""
    return t.workload.key
