"""Replicas for a heavy prompt tail: the waits behind long prefills (issue 17, §3, the work).

A replica prefills its prompts in arrival order (vLLM's chunked prefill gives a running
prefill the rest of every step's token budget), so a short request routed to a replica in
the middle of a 50k-token prefill waits for the rest of it. The mean prompt does not show
this: it is the tail's prefill beyond a newcomer's slack that misses. A replica is busy with
a prompt that makes a feasible newcomer miss for a share of the time

    (rate / N) x W,    W = mean over feasible newcomers c and prompts b of
                           max(0, S_b - (SLO - S_c)),

with N replicas sharing the arrivals and S the prefill seconds of a prompt at a replica's
prefill rate: the misses fall as 1/N whatever the load. So holding them to a share m of
the requests takes N >= rate x W / m (`replicas`). The prompts' distribution is vLLM's
`vllm:request_prompt_tokens` histogram (`Observation.prompt_tokens_buckets`) over the
observation's window (`PromptMix`), uniform within each bucket; newcomers that no replica
prefills within the SLO are left out (they miss anyway).
One prefill at a time is the model: where prefills queue deeper (a replica near its prefill
rate), the forecast's sizing binds instead. The model is pessimistic: a router that
balances requests in flight sends fewer newcomers to a replica once one waits there (runs
miss 10-30x less than it predicts, `GpufleetSettings.prompt_tail_miss_share`). Pure logic;
`PromptMix` keeps running sums so a tick adds only the samples it has not seen.
"""

import bisect
import math
import sys
from collections import deque

from gpufleet.autoscaler.core.observation import Buckets

Bucket = tuple[float, float, float]  # (lower tokens, upper tokens, requests)


class PromptMix:
    """Requests per prompt-length bucket over the last `window_seconds` of samples."""

    def __init__(self, *, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._bounds: tuple[float, ...] = ()
        self._sums: list[float] = []
        self._samples: deque[tuple[float, tuple[float, ...]]] = deque()

    def update(self, buckets: Buckets, now: float) -> None:
        """Add the samples newer than the last one added; forget those past the window. A
        sample's values are per second over its scrape; the mix needs only their shares, so
        they are summed as they are."""
        newest = self._samples[-1][0] if self._samples else -math.inf
        # from the first newer sample: a walk over the whole window cost a decision 75 us
        first = bisect.bisect_right(buckets.times, newest)
        for t, sample in zip(buckets.times[first:], buckets.values[first:], strict=True):
            if not sample:
                continue
            bounds = tuple(b for b, _ in sample)
            if bounds != self._bounds:  # a new layout (another max_model_len): start over
                self._bounds, self._sums = bounds, [0.0] * len(bounds)
                self._samples.clear()
            counts = _per_bucket(sample)
            self._samples.append((t, counts))
            self._sums = [a + b for a, b in zip(self._sums, counts, strict=True)]
        while self._samples and self._samples[0][0] < now - self.window_seconds:
            _, counts = self._samples.popleft()
            self._sums = [a - b for a, b in zip(self._sums, counts, strict=True)]

    def rate(self) -> float:
        """Requests/s over the window: the mean of the samples' totals."""
        return sum(self._sums) / len(self._samples) if self._samples else 0.0

    def buckets(self) -> tuple[Bucket, ...]:
        """(lower, upper, requests) per bucket with any; the last bucket (above every
        bound) is taken at its lower bound, the least it holds."""
        out = []
        lower = 0.0
        for upper, n in zip(self._bounds, self._sums, strict=True):
            if n > 1e-9:
                out.append((lower, lower if math.isinf(upper) else upper, n))
            lower = upper
        return tuple(out)


def _per_bucket(sample: tuple[tuple[float, float], ...]) -> tuple[float, ...]:
    """Cumulative buckets as each bucket's own value (never negative: a counter reset
    between two pods' scrapes can make a cumulative value dip)."""
    out = []
    below = 0.0
    for _, cumulative in sample:
        out.append(max(0.0, cumulative - below))
        below = max(below, cumulative)
    return tuple(out)


def blocking_seconds(
    mix: tuple[Bucket, ...], *, prefill_tokens_per_second: float, slo_seconds: float
) -> float:
    """W: the mean, over the feasible newcomers, of the seconds a prompt of the mix holds a
    replica's prefill beyond the newcomer's slack (the SLO less its own prefill); 0 with no
    feasible newcomer or no evidence."""
    r = prefill_tokens_per_second
    if r <= 0 or slo_seconds <= 0:
        return 0.0
    total = sum(n for _, _, n in mix)
    if total <= 0:
        return 0.0
    # Counts scaled by a power of two, which is exact: a mix of tiny counts keeps its
    # precision (their products went subnormal, and doubling every count moved W by 2%),
    # and any other mix gives the same bits as unscaled. Each count is scaled itself: the
    # factor alone overflows for a subnormal total (2**1029 for 2.2e-309).
    exponent = math.frexp(total)[1]
    mix = tuple((lo, hi, math.ldexp(n, -exponent)) for lo, hi, n in mix)
    total = math.ldexp(total, -exponent)
    feasible_tokens = slo_seconds * r
    weight = 0.0
    blocked = 0.0
    for lo, hi, n in mix:
        if lo >= feasible_tokens:
            continue
        top = min(hi, feasible_tokens)
        share = n * ((top - lo) / (hi - lo) if hi > lo else 1.0)
        slack = slo_seconds - (lo + top) / 2.0 / r
        weight += share
        blocked += share * sum(m * _beyond(a / r, b / r, slack) for a, b, m in mix) / total
    # A feasible share below float resolution is none: its ratio is rounding (a count of
    # 5e-324 halves to 0, its double does not).
    return blocked / weight if weight > total * sys.float_info.epsilon else 0.0


def _beyond(a: float, b: float, x: float) -> float:
    """E[max(0, S - x)] for S uniform on [a, b] seconds."""
    if b <= x:
        return 0.0
    if a >= x:
        return (a + b) / 2.0 - x
    return (b - x) ** 2 / (2.0 * (b - a))


def replicas(rate: float, blocking: float, *, miss_share: float) -> int:
    """Replicas that hold the tail's waits to `miss_share` of the requests arriving at
    `rate`/s (0: the term is off)."""
    if miss_share <= 0 or rate <= 0 or blocking <= 0:
        return 0
    return math.ceil(rate * blocking / miss_share)
