"""Arrival-rate forecast over a lead time, from the recent level, a linear trend and peaks.

Pure numpy over one `Series` of rates: no clock (the caller passes `now`), no state. A
replica asked for now serves only after its cold start (and a node's boot when no GPU is
free), so the policy must size for the rate at `now + lead`, not the rate it sees; and the
rate it sees is already a scrape plus a query old. Three estimates come back, and the policy
decides how to combine them:

- `level`: the mean over a short window, what the service gets now;
- `predicted`: a least-squares line over the trend window, extrapolated to the horizon
  (never below zero, and its growth capped so one noisy window cannot ask for the moon);
- `peaks`: the highest mean over each of a few averaging windows (5 s to a minute) within
  the peak memory, which bursty traffic returns to.
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
    # Growth the trend may add at the horizon, as a multiple of the level: 1.0 means the
    # forecast at most doubles the level, bounding a steep fit on a noisy window.
    max_trend_growth_ratio: float = 1.0
    # Peaks are kept per averaging window: a 5-s burst and a 60-s surge need different
    # capacity for one TTFT SLO (the SLO's slack absorbs a larger share of a short burst),
    # so the policy sizes each and takes the largest. The shortest is one scrape.
    peak_averaging_seconds: tuple[float, ...] = (5.0, 15.0, 30.0, 60.0)
    # 600 s: bursty traffic (the code trace) comes back within minutes; remembering the
    # last ten minutes' peaks keeps capacity for the next burst.
    peak_memory_seconds: float = 600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RateForecast:
    """Rates in the series' unit (requests/s); `horizon_seconds` is measured from `now`."""

    latest: float  # the newest sample
    level: float  # mean over the level window
    slope_per_second: float  # the trend, rate units per second
    predicted: float  # level plus capped trend growth at the horizon, >= 0
    peaks: tuple[tuple[float, float], ...]  # (averaging window s, highest mean rate in it)
    horizon_seconds: float
    points: int  # samples the trend used


def forecast_rate(
    times: tuple[float, ...] | np.ndarray,
    values: tuple[float, ...] | np.ndarray,
    *,
    now: float,
    horizon_seconds: float,
    settings: ForecastSettings,
) -> RateForecast:
    """Forecast the rate at `now + horizon_seconds` from samples at `times` (oldest first).

    Samples older than the longest window are ignored. An empty series forecasts zero
    everywhere: the caller decides whether a missing signal means hold (it should).
    """
    t = np.asarray(times, dtype=float)
    v = np.asarray(values, dtype=float)
    if t.size == 0:
        return RateForecast(
            latest=0.0,
            level=0.0,
            slope_per_second=0.0,
            predicted=0.0,
            peaks=tuple((w, 0.0) for w in settings.peak_averaging_seconds),
            horizon_seconds=horizon_seconds,
            points=0,
        )
    level = _window_mean(t, v, since=now - settings.level_window_seconds)
    slope, points = _trend(t, v, now=now, settings=settings)
    # Extrapolate from the newest sample's time: the data is already late by `now - t[-1]`.
    ahead_seconds = horizon_seconds + max(0.0, now - float(t[-1]))
    growth = min(slope * ahead_seconds, settings.max_trend_growth_ratio * level)
    predicted = max(0.0, level + growth)
    peaks = _peaks(t, v, now=now, settings=settings)
    return RateForecast(
        latest=float(v[-1]),
        level=level,
        slope_per_second=slope,
        predicted=predicted,
        peaks=peaks,
        horizon_seconds=horizon_seconds,
        points=points,
    )


def _window_mean(t: np.ndarray, v: np.ndarray, *, since: float) -> float:
    """Mean of the samples after `since`; the newest sample when none is that recent."""
    mask = t > since
    return float(v[mask].mean()) if mask.any() else float(v[-1])


def _trend(
    t: np.ndarray, v: np.ndarray, *, now: float, settings: ForecastSettings
) -> tuple[float, int]:
    """Least-squares slope over the trend window (0 with too few points)."""
    mask = t > now - settings.trend_window_seconds
    points = int(mask.sum())
    if points < settings.trend_min_points:
        return 0.0, points
    tw = t[mask]
    vw = v[mask]
    dt = tw - tw.mean()
    denom = float(np.dot(dt, dt))
    if denom <= 0.0:
        return 0.0, points
    return float(np.dot(dt, vw - vw.mean()) / denom), points


def _peaks(
    t: np.ndarray, v: np.ndarray, *, now: float, settings: ForecastSettings
) -> tuple[tuple[float, float], ...]:
    """Highest rolling mean over each averaging window, within the peak memory."""
    mask = t > now - settings.peak_memory_seconds
    vw = v[mask]
    if vw.size == 0:
        return tuple((w, 0.0) for w in settings.peak_averaging_seconds)
    step = float(np.median(np.diff(t[mask]))) if vw.size > 1 else 1.0
    sums = np.concatenate(([0.0], np.cumsum(vw)))
    out = []
    for window in settings.peak_averaging_seconds:
        width = max(1, min(vw.size, round(window / max(step, 1e-9))))
        means = (sums[width:] - sums[:-width]) / width
        out.append((window, float(means.max())))
    return tuple(out)
