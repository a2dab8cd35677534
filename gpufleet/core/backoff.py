"""How long a reflector waits before it lists or watches again, from how the last attempt
ended: client-go's reflector backoff, kept apart from the thread that sleeps it.

Pure: the caller says how long an attempt lasted, by its own clock.
"""

from dataclasses import dataclass

SHORT_SECONDS = 1.0  # an attempt ended sooner counts toward the backoff
HEALTHY_SECONDS = 60.0  # an attempt that failed after this long starts the backoff afresh


@dataclass(slots=True)
class Backoff:
    """Failures in a row, and the wait they earn: `base` seconds doubling with each, up to
    `cap`. An attempt that ends in a failure after HEALTHY_SECONDS of working is a first
    failure again; one that ends without failing (a watch the server ends, a 410) counts
    only where it ended within SHORT_SECONDS (answered so at once: a hot loop otherwise),
    else the count starts over."""

    base: float
    cap: float
    failures: int = 0

    def failed(self, lasted: float) -> float:
        """An attempt failed after `lasted` seconds: the wait before the next."""
        self.failures = 1 if lasted >= HEALTHY_SECONDS else self.failures + 1
        return self.delay()

    def ended(self, lasted: float) -> float:
        """An attempt ended without failing after `lasted` seconds: the wait before the
        next (0 where it did not end at once)."""
        self.failures = self.failures + 1 if lasted < SHORT_SECONDS else 0
        return self.delay()

    def reset(self) -> None:
        self.failures = 0

    def delay(self) -> float:
        if not self.failures:
            return 0.0
        return min(self.cap, self.base * 2 ** min(self.failures - 1, 64))
