"""The queue a new node would meet: what is left of today's backlog when its replicas serve.

Why: the policy sizes for the arrivals plus the queue drained within its drain time. After
a crowd has overrun the fleet the queue is deep, but the replicas already starting drain
it before one asked for now on a new node serves (node boot plus a cold start). Sized on
the queue as it stood, every tick of a long crowd bought another node that arrived after
the queue was gone: flash-long x10 at the default target asked for 72 replicas on 9
nodes, where 32 served the crowd once the queue had drained (issue 17). Pure.
"""

from collections.abc import Iterable


def queue_at(
    queue: float,
    *,
    arrival_rps: float,
    serving_rps: float,
    arriving: Iterable[tuple[float, float]],
    horizon_seconds: float,
) -> float:
    """The queue `horizon_seconds` from now: requests arrive at `arrival_rps` and are served
    at `serving_rps`, plus each `(seconds from now, rps)` of capacity from when it starts
    serving (now, if overdue; never, if past the horizon). The queue never goes below 0 on
    the way: capacity idle while nothing waits serves nothing later."""
    t, left, rate = 0.0, queue, serving_rps
    for at, rps in sorted(arriving):
        if at >= horizon_seconds:
            break
        at = max(at, 0.0)
        left = max(0.0, left + (arrival_rps - rate) * (at - t))
        t, rate = at, rate + rps
    return max(0.0, left + (arrival_rps - rate) * (horizon_seconds - t))
