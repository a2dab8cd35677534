"""The leader's writes, each made only if this replica still leads when its thread starts.

A write waits for a thread of asyncio's default pool, and writes held by a hung admission
webhook can fill it: a write queued behind them starts seconds later, by when the lease
may have been lost and a standby may lead. Asked again in the thread, just before the
call, a write starts only while this replica leads (the lease's promise: a lost lease
stops writes before another holder can start). One not made raises NotLeading, which a
caller takes as "not written": no error, nothing recorded as kept.
"""

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")


class NotLeading(Exception):
    """The lease was lost while the write waited for a thread: it was not made."""


async def as_leader(is_leader: Callable[[], bool], call: Callable[..., R], *args: Any) -> R:
    """`call(*args)` in a thread, if `is_leader()` still holds when the thread starts it.
    Raises NotLeading, or what `call` raises."""

    def run() -> R:
        if not is_leader():
            raise NotLeading
        return call(*args)

    return await asyncio.to_thread(run)
