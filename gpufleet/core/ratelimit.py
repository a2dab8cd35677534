"""A token bucket with the semantics of Go's golang.org/x/time/rate `Limiter.Allow`.

Both rate limits gpufleet reproduces are that limiter: the kubelet's pod-resources server
(`rate.NewLimiter(qps, burst)`) and exporter-toolkit's web config `rate_limit`
(`rate.NewLimiter(rate.Every(interval), burst)`). One implementation keeps the two in step.

Pure: no I/O, no clock of its own (`clock` is injected), no locking; a caller that shares a
bucket between threads holds its own lock around `take()`.
"""

from collections.abc import Callable


class TokenBucket:
    """`burst` tokens, refilled continuously at `rate_per_second`; it starts full.

    `take()` spends one token when at least one whole token is there. Refill is capped at
    `burst`, so idle time never buys more than `burst` requests in a row. Edge cases, as in
    x/time/rate: `burst` 0 refuses everything; `rate_per_second` 0 grants the first `burst`
    requests and then nothing. A clock that steps back refills nothing (it never takes
    tokens away). `clock` returns seconds, monotonic.
    """

    __slots__ = ("_burst", "_clock", "_rate_per_second", "_tokens", "_updated")

    def __init__(self, *, rate_per_second: float, burst: int, clock: Callable[[], float]) -> None:
        if rate_per_second < 0:
            raise ValueError(f"token bucket: rate_per_second must be >= 0, got {rate_per_second}")
        if burst < 0:
            raise ValueError(f"token bucket: burst must be >= 0, got {burst}")
        self._rate_per_second = rate_per_second
        self._burst = float(burst)
        self._clock = clock
        self._tokens = self._burst
        self._updated = clock()

    def take(self) -> bool:
        """Spend one token and return True, or return False (and spend nothing)."""
        now = self._clock()
        elapsed_seconds = max(0.0, now - self._updated)
        self._updated = now
        self._tokens = min(self._burst, self._tokens + elapsed_seconds * self._rate_per_second)
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True
