"""Arrival-rate forecast over a lead time, from the recent level, a linear trend and peaks.

Pure numpy over one `Series` of rates: no clock (the caller passes `now`), no state. A
replica asked for now serves only after its cold start (and a node's boot when no GPU is
free), so the policy must size for the rate at `now + lead`, not the rate it sees; and the
rate it sees is already a scrape plus a query old. Five estimates come back, and the policy
decides how to combine them:

- `level`: the mean over a short window, what the service gets now;
- `predicted`: the trend over the trend window (the median of the slopes between every
  pair of samples, Theil-Sen, so one burst does not tilt it), extrapolated to the horizon
  (never below zero, and its growth capped so one noisy window cannot ask for the moon);
  a trend must hold in the window's newer half too, so a step is not a ramp;
- `sustained`: the trend line through the trend window's median, at the horizon (capped
  like `predicted`): what the rate holds at without its bursts, for capacity that takes
  minutes to arrive;
- `peaks`: for each of a few averaging windows (5 s to a minute), how high bursts usually
  get: a high quantile of the per-minute highest means within the peak memory, the
  standing capacity bursty traffic needs (see `ForecastSettings.peak_quantile`); a crowd
  that is over is forgotten by evidence, not only by age (`ForecastSettings.forget_*`);
- `base`: a low quantile of the samples within the peak memory, the rate the traffic
  returns to between its bursts (what a standing reserve is sized on).
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True, kw_only=True)
class ForecastSettings:
    # 30 s: six 5-s scrapes, enough to average Poisson noise at a few requests/s, short
    # enough that a ramp shows within one cold start.
    level_window_seconds: float = 30.0
    # 300 s: a trend must persist for minutes to be one; LLM traffic ramps over tens of
    # minutes (the conversation trace) while bursts last seconds.
    trend_window_seconds: float = 300.0
    # Fewer points than this make no trend (slope 0): two minutes of 5-s samples. Fewer
    # fit a line through one surge (a minute's ramp doubled over a cold start launches a
    # node the next minute does not need), which is the burst path's job, not the trend's.
    trend_min_points: int = 24
    # A trend must also hold over the newest `trend_confirm_seconds` (with half the points):
    # the slope used is whichever of the two is nearer zero, and none when they disagree
    # in sign. A step (a crowd arriving or leaving: flat on both sides) tilts the window's
    # pairwise slopes for minutes while its newer half is already flat: extrapolated, a
    # 10x step asked for 25% over its new level for two minutes, and placeholders launched
    # nodes for it (flash-long x10 at 0.997: 72 node GPUs for 48 replicas). A ramp holds
    # in both. A step younger than the newer half still tilts both, less (noisy steps
    # 90-120 s old: 10-30% over, against 75-90% with the window alone).
    trend_confirm_seconds: float = 150.0
    # Growth the trend may add at the horizon, as a multiple of the level: 1.0 means the
    # forecast at most doubles the level, bounding a steep fit on a noisy window.
    max_trend_growth_ratio: float = 1.0
    # Peaks are kept per averaging window: a 5-s burst and a 60-s surge need different
    # capacity for one TTFT SLO (the SLO's slack absorbs a larger share of a short burst),
    # so the policy sizes each and takes the largest. The shortest is one scrape.
    peak_averaging_seconds: tuple[float, ...] = (5.0, 15.0, 30.0, 60.0)
    # Bursts that last less than a replica's cold start (the code trace's last 5-15 s) are
    # over before capacity asked for at their sight serves, so what serves them must be
    # standing. The peak is a statistic of the recent past: the `peak_quantile` of the
    # highest mean in each `peak_block_seconds` block of the last `peak_memory_seconds`.
    # A maximum over a short memory swung with every record burst (up after it, when it is
    # over; down when it aged out, whenever the next came), which made capacity follow
    # the last burst instead of the next, at a far higher cost for the same attainment
    # (BENCHMARKS.md, "What each part is worth"). 30 minutes of one-minute blocks with the 0.9
    # quantile ignore the three busiest minutes of the half hour (for the 30- and 60-s
    # windows fewer: a mean is filed under its newest sample's block, so one burst raises
    # the next block too); `headroom` buys those back when they matter. The policy needs
    # that much history in its observations (the simulator's `history_seconds`).
    peak_memory_seconds: float = 1800.0
    peak_block_seconds: float = 60.0
    peak_quantile: float = 0.9
    # Forget a crowd by evidence (issue 17): when the newest `forget_after_blocks` blocks'
    # highest means all sit below `forget_below_ratio` x the remembered peak, and the
    # caller says nothing waits (`forecast_rate(quiet=True)`: an empty queue), the older
    # blocks are forgotten and the peak is the quiet blocks' own. Without it a crowd kept
    # ~3x the needed replicas for the whole half hour after it was over. Five minutes far
    # below the peak (the scale-down window's length, so forgetting never outruns it): a
    # bursty service keeps its burst capacity through a lull of a few minutes. A third of
    # the peak is "far": ordinary minutes of bursty traffic sit above it. 0 never forgets.
    # A one-off crowd (the only run of busy blocks in a whole memory's history) is also
    # forgotten while what waits clears within the SLO (`forecast_rate(clearing=True)`):
    # at the base rate a request or two queue now and then, and each such tick brought the
    # crowd's peak back, a scale-up four seconds after a scale-down, which the node-flap
    # hold then kept for half an hour (3x the replicas after a flash crowd on a one-hour
    # trace). Anything else keeps `quiet`'s stricter test: between recurring bursts, and
    # after a first burst in less history than that (on/off traffic's first lull), a
    # queued request in a long lull is what kept the burst capacity for the next burst.
    forget_after_blocks: int = 5
    forget_below_ratio: float = 1 / 3
    # Bursts that recur are evidence too: where the memory holds several busy runs, `quiet`
    # forgets only after a quiet run this many times the longest quiet gap between them
    # (0: off). On/off traffic (MMPP: bursts a few minutes apart, gaps exponential) went
    # quiet for 14 minutes after three bursts 3-4 minutes apart; forgetting after five
    # halved the fleet two minutes before the next burst (on/off x10 at 99%: 96.73%, and
    # 99.65% with 2, for 0.05 GPU-h more; 2 and 3 alike, 4 worse; nothing else on the
    # tuning seeds moved). A one-off crowd has no gap, and is forgotten as before.
    forget_recurrence_ratio: float = 2.0
    # The base rate is this quantile of the samples within the peak memory: low enough that
    # a crowd filling most of the memory does not become the base.
    base_quantile: float = 0.25


@dataclass(frozen=True, slots=True, kw_only=True)
class RateForecast:
    """Rates in the series' unit (requests/s); `horizon_seconds` is measured from `now`."""

    latest: float  # the newest sample
    level: float  # mean over the level window
    slope_per_second: float  # the trend, rate units per second
    predicted: float  # level plus capped trend growth at the horizon, >= 0
    sustained: float  # the median plus capped trend growth at the sustained horizon, >= 0
    peaks: tuple[tuple[float, float], ...]  # (averaging window s, its usual peak mean rate)
    base: float  # the `base_quantile` of the samples within the peak memory
    horizon_seconds: float
    points: int  # samples the trend used


def forecast_rate(
    times: tuple[float, ...] | np.ndarray,
    values: tuple[float, ...] | np.ndarray,
    *,
    now: float,
    horizon_seconds: float,
    settings: ForecastSettings,
    sustained_horizon_seconds: float | None = None,
    quiet: bool = False,
    clearing: bool = False,
) -> RateForecast:
    """Forecast the rate at `now + horizon_seconds` from samples at `times` (oldest first);
    `sustained` at `now + sustained_horizon_seconds` (default: the same horizon), for
    capacity with a longer lead (nodes). `quiet` (nothing queued) lets the peaks forget a
    crowd that is over, and `clearing` (what is queued clears within the SLO) a one-off
    crowd that is over (`ForecastSettings.forget_after_blocks`).

    Samples older than the longest window are ignored, and so are non-finite ones (a NaN
    from a failed query must not turn every estimate into NaN). An empty series forecasts
    zero everywhere: the caller decides whether a missing signal means hold (it should).
    """
    t = np.asarray(times, dtype=float)
    v = np.asarray(values, dtype=float)
    finite = np.isfinite(t) & np.isfinite(v)
    t, v = t[finite], v[finite]
    if t.size == 0:
        return RateForecast(
            latest=0.0,
            level=0.0,
            slope_per_second=0.0,
            predicted=0.0,
            sustained=0.0,
            peaks=tuple((w, 0.0) for w in settings.peak_averaging_seconds),
            base=0.0,
            horizon_seconds=horizon_seconds,
            points=0,
        )
    level = _window_mean(t, v, since=now - settings.level_window_seconds)
    recent = t > now - settings.trend_window_seconds  # the trend window
    slope, points = _trend(t[recent], v[recent], min_points=settings.trend_min_points)
    newer = t > now - settings.trend_confirm_seconds
    confirm, _ = _trend(t[newer], v[newer], min_points=settings.trend_min_points // 2)
    slope = _nearer_zero(slope, confirm)
    # Extrapolate from the newest sample's time: the data is already late by `now - t[-1]`.
    ahead_seconds = horizon_seconds + max(0.0, now - float(t[-1]))
    growth = min(slope * ahead_seconds, settings.max_trend_growth_ratio * level)
    predicted = max(0.0, level + growth)
    # A median ignores bursts that a mean (and a 30-s level) would carry for minutes; the
    # line runs from the window's middle, where its median sits, to the horizon.
    median = _median(v[recent]) if recent.any() else float(v[-1])
    middle = _mean(t[recent]) if recent.any() else float(t[-1])
    sustained_at = (
        horizon_seconds if sustained_horizon_seconds is None else sustained_horizon_seconds
    )
    sustained_growth = slope * (now + sustained_at - middle)
    sustained = max(0.0, median + min(sustained_growth, settings.max_trend_growth_ratio * median))
    peaks = _peaks(t, v, now=now, settings=settings, quiet=quiet, clearing=clearing)
    memory = v[t > now - settings.peak_memory_seconds]
    base = _quantile(memory, settings.base_quantile) if memory.size else 0.0
    return RateForecast(
        latest=float(v[-1]),
        level=level,
        slope_per_second=slope,
        predicted=predicted,
        sustained=sustained,
        peaks=peaks,
        base=base,
        horizon_seconds=horizon_seconds,
        points=points,
    )


def _window_mean(t: np.ndarray, v: np.ndarray, *, since: float) -> float:
    """Mean of the samples after `since`; the newest sample when none is that recent."""
    mask = t > since
    return _mean(v[mask]) if mask.any() else float(v[-1])


def _trend(tw: np.ndarray, vw: np.ndarray, *, min_points: int) -> tuple[float, int]:
    """Theil-Sen slope of a window's samples (0 with fewer than `min_points`).

    A least-squares line swung with a burst at either end of the window; the median of
    pairwise slopes does not (BENCHMARKS.md). Quadratic in the samples: 60 at a 5-s scrape.
    """
    points = int(tw.size)
    if points < min_points:
        return 0.0, points
    dt = tw[None, :] - tw[:, None]
    upper = dt > 0
    if not upper.any():
        return 0.0, points
    return _median((vw[None, :] - vw[:, None])[upper] / dt[upper]), points


def _nearer_zero(slope: float, confirm: float) -> float:
    """`slope` where `confirm` agrees with it in sign, limited to `confirm`'s size; else 0."""
    if slope > 0.0:
        return max(0.0, min(slope, confirm))
    if slope < 0.0:
        return min(0.0, max(slope, confirm))
    return 0.0


def _peaks(
    t: np.ndarray,
    v: np.ndarray,
    *,
    now: float,
    settings: ForecastSettings,
    quiet: bool,
    clearing: bool,
) -> tuple[tuple[float, float], ...]:
    """Per averaging window, the `peak_quantile` of the per-block highest rolling means
    within the peak memory (only the newest blocks when they show the crowd is over:
    `_forget`). Blocks are aligned to absolute time, so a tick that moves `now` does
    not regroup the samples (and jolt the quantile)."""
    mask = t > now - settings.peak_memory_seconds
    tw, vw = t[mask], v[mask]
    if vw.size == 0:
        return tuple((w, 0.0) for w in settings.peak_averaging_seconds)
    step = _median(tw[1:] - tw[:-1]) if vw.size > 1 else 1.0
    # A one-off crowd only where the samples reach back to the memory's first block: one
    # crowd in less history than that says nothing yet about whether bursts recur.
    forget = quiet or (
        clearing
        and float(tw[0]) <= now - settings.peak_memory_seconds + settings.peak_block_seconds
    )
    sums = np.concatenate(([0.0], np.cumsum(vw)))
    block = np.floor(tw / settings.peak_block_seconds)
    out = []
    for window in settings.peak_averaging_seconds:
        width = max(1, min(vw.size, round(window / max(step, 1e-9))))
        means = (sums[width:] - sums[:-width]) / width
        ends = block[width - 1 :]  # each mean is known at its newest sample, in time order
        firsts = np.concatenate(([0], np.flatnonzero(np.diff(ends)) + 1))
        highest = np.maximum.reduceat(means, firsts)
        if forget:
            highest = _forget(highest, settings, one_off_only=not quiet)
        out.append((window, _quantile(highest, settings.peak_quantile)))
    return tuple(out)


def _forget(highest: np.ndarray, settings: ForecastSettings, *, one_off_only: bool) -> np.ndarray:
    """The blocks' highest means (oldest first), without those before a trailing run of at
    least `forget_after_blocks` blocks below `forget_below_ratio` x the remembered peak;
    with `one_off_only`, only where the blocks before that run hold one run of busy ones
    (a crowd, not recurring bursts), else only where that run is also
    `forget_recurrence_ratio` x the longest quiet gap between the busy ones."""
    if settings.forget_after_blocks < 1 or highest.size <= settings.forget_after_blocks:
        return highest
    low = highest < settings.forget_below_ratio * _quantile(highest, settings.peak_quantile)
    if low.all():
        return highest
    run = highest.size - 1 - int(np.flatnonzero(~low)[-1])  # trailing quiet blocks
    if run < settings.forget_after_blocks:
        return highest
    busy = ~low[:-run]
    if one_off_only:
        if int(busy[0]) + int(np.count_nonzero(busy[1:] & ~busy[:-1])) > 1:
            return highest  # more than one run of busy blocks: the bursts recur
    elif settings.forget_recurrence_ratio > 0:
        gap = _longest_inner_gap(busy)
        if gap and run < settings.forget_recurrence_ratio * gap:
            return highest
    return highest[-run:]


def _longest_inner_gap(busy: np.ndarray) -> int:
    """The longest run of quiet blocks between two busy ones; 0 when there is none."""
    where = np.flatnonzero(busy)
    if where.size < 2:
        return 0
    return int(np.max(np.diff(where)) - 1)


def _median(x: np.ndarray) -> float:
    """np.median of a non-empty 1-D array of finite numbers, to the bit, without its
    per-call overhead (its NaN checks, axis handling): a decision takes three, and at
    1,000 workloads they were a fifth of a tick."""
    half = x.size // 2
    if x.size % 2:
        return float(np.partition(x, half)[half])
    low, high = np.partition(x, (half - 1, half))[half - 1 : half + 1]
    return float((low + high) / 2)


def _mean(x: np.ndarray) -> float:
    """np.mean of a non-empty 1-D array, to the bit (the same pairwise sum, divided by
    the count), without its per-call overhead."""
    return float(x.sum() / x.size)


def _quantile(x: np.ndarray, q: float) -> float:
    """np.quantile's default (linear) for one 1-D array, without its per-call overhead:
    the policy asks for four every tick. Equal to it but in the last bit in about 1% of
    cases: numpy interpolates down from the upper neighbour past the midpoint, this always
    up from the lower one (kept, as every policy number was measured with it)."""
    ordered = np.sort(x)
    position = q * (ordered.size - 1)
    low = int(position)
    high = min(low + 1, ordered.size - 1)
    return float(ordered[low] + (position - low) * (ordered[high] - ordered[low]))
