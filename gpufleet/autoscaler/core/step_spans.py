"""Which step times of a range query a workload was handed, so that the gather asks again
only for the times one lacks (a workload that joined a query others had fetched, or came
back from ticks it sat out) and hands no time twice (a queue depth summed from two
queries would count it twice).

Pure. Times are a query's steps, `start + k * step`; two times less than half a step apart
are the same step, as floats summed from steps drift.
"""


class StepSpans:
    """Sorted runs of consecutive step times."""

    def __init__(self, step: float) -> None:
        if step <= 0:
            raise ValueError("step must be > 0")
        self._step = step
        self._spans: list[tuple[float, float]] = []  # (first, last), disjoint, not adjacent

    def add(self, first: float, last: float) -> None:
        """The times `first` .. `last` were handed."""
        if last < first:
            return
        reach = 1.5 * self._step  # a run that ends a step before `first` continues into it
        if self._spans and self._spans[-1][0] <= first <= self._spans[-1][1] + reach:
            a, b = self._spans[-1]  # what is new, each tick: the newest run goes on
            self._spans[-1] = (a, max(b, last))
            return
        kept = []
        for a, b in self._spans:
            if b < first - reach or a > last + reach:
                kept.append((a, b))
            else:
                first, last = min(first, a), max(last, b)
        kept.append((first, last))
        kept.sort()
        self._spans = kept

    def runs(self) -> list[tuple[float, float]]:
        """The runs of times handed, (first, last), oldest first."""
        return list(self._spans)

    def holds(self, t: float) -> bool:
        return self.holds_any(t, t)

    def holds_any(self, first: float, last: float) -> bool:
        """Whether any time from `first` to `last` was handed: mostly not (what is new),
        which spares a look at each sample."""
        half, spans = self._step / 2, self._spans
        if not spans or first > spans[-1][1] + half:
            return False  # past the newest run: what is new, every tick
        return any(a - half <= last and first <= b + half for a, b in spans)

    def covers(self, first: float, last: float) -> bool:
        """Whether every time from `first` to `last` was handed."""
        half, spans = self._step / 2, self._spans
        if len(spans) == 1:  # handed every time since it began: a look, not a walk
            return spans[0][0] - half <= first and last <= spans[0][1] + half
        return not self.gaps(first, last)

    def gaps(self, first: float, last: float) -> list[tuple[float, float]]:
        """The runs of step times from `first` to `last` not handed, oldest first."""
        half, out = self._step / 2, []
        at = first  # the oldest step not yet known handed
        for a, b in self._spans:
            if b < at - half:
                continue
            if a > last + half:
                break
            if a - self._step >= at - half:
                out.append((at, a - self._step))
            at = max(at, b + self._step)
        if at <= last + half:
            out.append((at, last))
        return out

    def forget_before(self, t: float) -> None:
        """Drop runs that end before `t`: no window reaches them."""
        self._spans = [(a, b) for a, b in self._spans if b >= t - self._step / 2]

    def forget_between(self, first: float, last: float) -> None:
        """Drop the times `first` to `last`: they are to be handed again (they were fetched
        while they were still to come)."""
        half, kept = self._step / 2, []
        for a, b in self._spans:
            if b < first - half or a > last + half:
                kept.append((a, b))
                continue
            if a < first - half:
                kept.append((a, first - self._step))
            if b > last + half:
                kept.append((last + self._step, b))
        self._spans = kept
