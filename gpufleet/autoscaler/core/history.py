"""A workload's signal samples as they became known, and the window a policy sees of them.

The one place samples turn into an `Observation`, for both callers: the replay's simulated
pipeline adds what its scrapes measured, the live controller what Prometheus answered, and
both cut the same window (samples of the last `history_seconds` that are at least
`delay_seconds` old). So a policy decides the same on the same samples, live or replayed.

Pure. Per signal, samples may come in any order (the live gather fills a gap behind newer
samples when a workload joins a query others had fetched); a sample at a time already held
is dropped, so re-reading an overlapping Prometheus range adds nothing twice. Memory is
bounded: once a signal holds two windows (`history_seconds` + `delay_seconds`)
behind its newest sample, the older one is forgotten, which no `observe(now)` with `now`
at or after the newest sample can see (the live controller runs for weeks; 1,000
workloads kept every sample at about 9 GB a day).
"""

from bisect import bisect_left, bisect_right
from typing import TypeVar

from gpufleet.autoscaler.core.observation import (
    Buckets,
    Observation,
    PodTelemetry,
    Replica,
    Series,
)

V = TypeVar("V")

# The Observation fields that are signal series; the names are the fields'.
SIGNALS = (
    "arrival_rate",
    "queue_depth",
    "in_flight",
    "completion_rate",
    "prompt_tokens_rate",
    "ttft_p90_seconds",
    "ttft_sum_rate",
    "prefill_sum_rate",
)
# The Observation fields that are histogram signals (`Buckets`).
BUCKET_SIGNALS = ("prompt_tokens_buckets",)
BucketSample = tuple[tuple[float, float], ...]


class SignalHistory:
    """Samples per signal plus per-pod GPU telemetry, each with its sample times."""

    def __init__(self, *, history_seconds: float, delay_seconds: float = 0.0) -> None:
        if history_seconds <= 0:
            raise ValueError("history_seconds must be > 0")
        self.history_seconds = history_seconds
        self.delay_seconds = delay_seconds
        self._times: dict[str, list[float]] = {s: [] for s in SIGNALS}
        self._values: dict[str, list[float]] = {s: [] for s in SIGNALS}
        self._bucket_times: dict[str, list[float]] = {s: [] for s in BUCKET_SIGNALS}
        self._buckets: dict[str, list[BucketSample]] = {s: [] for s in BUCKET_SIGNALS}
        self._pod_times: list[float] = []
        self._pods: list[tuple[PodTelemetry, ...]] = []
        self._keep_seconds = history_seconds + delay_seconds  # what any window reaches back

    def add(self, signal: str, t: float, value: float) -> None:
        """One sample of `signal` (an `Observation` series field) taken at `t`."""
        self._append(self._times[signal], self._values[signal], t, value)

    def add_buckets(self, signal: str, t: float, buckets: BucketSample) -> None:
        """One sample of histogram `signal` (an `Observation` `Buckets` field) taken at `t`:
        cumulative (upper bound, value) pairs sorted by bound."""
        self._append(self._bucket_times[signal], self._buckets[signal], t, buckets)

    def add_pods(self, t: float, pods: tuple[PodTelemetry, ...]) -> None:
        """The replicas' GPU telemetry as scraped at `t`."""
        self._append(self._pod_times, self._pods, t, pods)

    def _append(self, times: list[float], values: list[V], t: float, value: V) -> None:
        """Keep (`t`, `value`) unless a sample at `t` is kept or no window reaches it, and
        forget what no window reaches."""
        if times and t <= times[-1]:
            at = bisect_left(times, t)
            if times[at] != t and t >= times[-1] - self._keep_seconds:
                times.insert(at, t)  # a backfill: rare, and bounded by the window
                values.insert(at, value)
            return
        times.append(t)
        values.append(value)
        if t - times[0] > 2 * self._keep_seconds:  # once per window: amortised O(1)
            cut = bisect_left(times, t - self._keep_seconds)
            del times[:cut], values[:cut]

    def forget_between(self, first: float, last: float) -> None:
        """Drop every sample taken from `first` to `last`: what the live gather fetched
        while those times were still to come, and fetches again."""
        for signal in SIGNALS:
            _drop_between(self._times[signal], self._values[signal], first, last)
        for signal in BUCKET_SIGNALS:
            _drop_between(self._bucket_times[signal], self._buckets[signal], first, last)
        _drop_between(self._pod_times, self._pods, first, last)

    def latest_time(self, signal: str) -> float | None:
        """When the newest sample of `signal` was taken; None before the first."""
        times = self._times[signal]
        return times[-1] if times else None

    def latest(self, now: float) -> dict[str, float]:
        """The newest value of each signal in the window `observe(now)` would cut, without
        building the Observation: what a status shows every tick for every workload."""
        return {signal: value for signal, (_, value) in self.latest_samples(now).items()}

    def latest_samples(self, now: float) -> dict[str, tuple[float, float]]:
        """`latest`, each value with the time its sample was taken."""
        newest, oldest = now - self.delay_seconds, now - self.history_seconds
        out = {}
        for signal in SIGNALS:
            times = self._times[signal]
            hi = bisect_right(times, newest)
            if hi and times[hi - 1] >= oldest:
                out[signal] = (times[hi - 1], self._values[signal][hi - 1])
        return out

    def latest_pods(self, now: float) -> tuple[float, tuple[PodTelemetry, ...]] | None:
        """The newest pod telemetry `observe(now)` would show, with its time; None if none."""
        hi = bisect_right(self._pod_times, now - self.delay_seconds)
        if hi and self._pod_times[hi - 1] >= now - self.history_seconds:
            return self._pod_times[hi - 1], self._pods[hi - 1]
        return None

    def observe(
        self,
        now: float,
        replicas: tuple[Replica, ...],
        *,
        node_free_gpus: tuple[int, ...] | None = None,
    ) -> Observation:
        """What a policy sees at `now`: samples taken in [now - history, now - delay], with
        the replicas and the nodes' free GPUs as they are now."""
        newest = now - self.delay_seconds
        oldest = now - self.history_seconds
        series = {s: self._window(s, oldest, newest) for s in SIGNALS}
        buckets = {s: self._bucket_window(s, oldest, newest) for s in BUCKET_SIGNALS}
        lo = bisect_left(self._pod_times, oldest)
        hi = bisect_right(self._pod_times, newest)
        return Observation(
            now=now,
            pods=self._pods[hi - 1] if hi > lo else (),
            replicas=replicas,
            node_free_gpus=node_free_gpus,
            **series,
            **buckets,
        )

    def _window(self, signal: str, oldest: float, newest: float) -> Series:
        times = self._times[signal]
        lo = bisect_left(times, oldest)
        hi = bisect_right(times, newest)
        return Series(tuple(times[lo:hi]), tuple(self._values[signal][lo:hi]))

    def _bucket_window(self, signal: str, oldest: float, newest: float) -> Buckets:
        times = self._bucket_times[signal]
        lo = bisect_left(times, oldest)
        hi = bisect_right(times, newest)
        return Buckets(tuple(times[lo:hi]), tuple(self._buckets[signal][lo:hi]))


def _drop_between(times: list[float], values: list[V], first: float, last: float) -> None:
    lo, hi = bisect_left(times, first), bisect_right(times, last)
    del times[lo:hi], values[lo:hi]
