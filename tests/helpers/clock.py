"""A clock the test sets by hand, injected wherever the code under test reads time."""


class ManualClock:
    """Returns `now` when called; the test moves it (`clock.now = t`, `clock.advance(s)`).

    Safe to read from the thread under test: a float attribute is read and written whole.
    """

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move the clock on by `seconds`; returns the new time."""
        self.now += seconds
        return self.now
