"""A tick's concurrent work, waited for at most the tick's wait, in two lanes.

The gather (Prometheus queries, by query text) and the steps (a workload's API calls, by
GPUAutoscaler) both start their work as tasks and wait for it at most `--tick-seconds`: what
runs longer goes on beside the loop, detached, and what had not begun is cancelled and taken
again next tick. Work that ran late takes its next turn in a slow lane of its own until it
ends in time, so that slow work never takes every slot from the rest.
"""

import asyncio
from collections.abc import Callable, Collection
from typing import Generic, TypeVar

K = TypeVar("K")
R = TypeVar("R")


class Lanes(Generic[K]):
    """Two lanes of `slots` each, new every tick; what ran late asks in the slow one."""

    def __init__(self, slots: int) -> None:
        self._slots = slots
        self.slow: set[K] = set()  # late once, not in time since

    def open(self) -> Callable[[K], asyncio.Semaphore]:
        """This tick's lanes: the one each key takes."""
        lane, slow_lane = (asyncio.Semaphore(self._slots) for _ in range(2))
        return lambda key: slow_lane if key in self.slow else lane

    def settle(self, *, in_time: Collection[K], late: Collection[K]) -> None:
        """Note what ended within the wait, and what ran past it."""
        self.slow.difference_update(in_time)
        self.slow.update(late)

    def keep_only(self, keys: Collection[K]) -> None:
        self.slow.intersection_update(keys)


async def wait_or_detach(
    tasks: Collection[asyncio.Task[R]], wait: float, *, begun: Callable[[asyncio.Task[R]], bool]
) -> tuple[set[asyncio.Task[R]], set[asyncio.Task[R]]]:
    """Wait for `tasks` at most `wait` seconds; returns those done and those that go on
    (detached). One still running that `begun` says never began is cancelled. Cancelled
    itself (SIGTERM mid-tick), it cancels them all: nothing runs on after the tick."""
    try:
        done, pending = await asyncio.wait(tasks, timeout=wait)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        raise
    detached = {task for task in pending if begun(task)}
    for task in pending - detached:
        task.cancel()
    return done, detached
