"""Arrival-rate forecast: level, trend, cap on growth, sustained rate, usual peaks
(synthetic series)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.autoscaler.core.forecast import ForecastSettings, _mean, _median, forecast_rate

S = ForecastSettings()
NOW = 1000.0
AGE = 1.5  # the newest sample is this late (evaluation + query)


def series(rate_at, *, seconds: float = 600.0, step: float = 5.0):
    """Samples every `step` s ending `AGE` before NOW, of `rate_at(t)`."""
    t = np.arange(NOW - AGE - seconds, NOW - AGE + 1e-9, step)
    return t, np.array([rate_at(x) for x in t], dtype=float)


def test_empty_series_forecasts_zero() -> None:
    fc = forecast_rate((), (), now=NOW, horizon_seconds=60, settings=S)
    assert (fc.latest, fc.level, fc.predicted, fc.sustained, fc.points) == (0, 0, 0, 0, 0)
    assert all(p == 0 for _, p in fc.peaks)


@pytest.mark.parametrize("rate", [0.0, 3.0, 250.0], ids=["idle", "few-per-second", "fleet"])
def test_steady_rate_forecasts_itself(rate: float) -> None:
    t, v = series(lambda _: rate)
    fc = forecast_rate(t, v, now=NOW, horizon_seconds=240, settings=S)
    assert fc.level == pytest.approx(rate)
    assert fc.slope_per_second == pytest.approx(0.0, abs=1e-9)
    assert fc.predicted == pytest.approx(rate)
    assert fc.sustained == pytest.approx(rate)
    assert all(p == pytest.approx(rate) for _, p in fc.peaks)


@pytest.mark.parametrize(
    ("slope", "horizon"),
    [
        pytest.param(0.01, 60.0, id="gentle-ramp-cold-start-lead"),
        pytest.param(0.01, 240.0, id="gentle-ramp-node-lead"),
        pytest.param(0.05, 60.0, id="steeper-ramp"),
    ],
)
def test_ramp_extrapolates_to_the_horizon(slope: float, horizon: float) -> None:
    t, v = series(lambda x: 5.0 + slope * x)
    fc = forecast_rate(t, v, now=NOW, horizon_seconds=horizon, settings=S)
    assert fc.slope_per_second == pytest.approx(slope, rel=1e-6)
    truth = 5.0 + slope * (NOW + horizon)
    # The level is a 30-s mean, so it trails the ramp by about half its window.
    assert fc.predicted == pytest.approx(truth, abs=slope * S.level_window_seconds)
    assert fc.predicted > fc.level
    # The median line reaches the same horizon (a ramp's median is its middle).
    assert fc.sustained == pytest.approx(truth, rel=1e-6)
    node_lead = forecast_rate(
        t, v, now=NOW, horizon_seconds=horizon, settings=S, sustained_horizon_seconds=horizon + 180
    )
    assert node_lead.predicted == fc.predicted
    assert node_lead.sustained == pytest.approx(truth + slope * 180, rel=1e-6)


def test_trend_growth_is_capped_at_the_ratio_of_the_level() -> None:
    t, v = series(lambda x: max(0.0, 3.0 * (x - 800.0)))  # from 0 to ~600/s in 3 min
    fc = forecast_rate(t, v, now=NOW, horizon_seconds=600, settings=S)
    assert fc.slope_per_second * 600 > fc.level * S.max_trend_growth_ratio
    assert fc.predicted == pytest.approx(fc.level * (1 + S.max_trend_growth_ratio))


def test_falling_trend_forecasts_lower_but_never_negative() -> None:
    t, v = series(lambda x: max(0.0, 100.0 - 0.2 * (x - 400.0)))
    fc = forecast_rate(t, v, now=NOW, horizon_seconds=600, settings=S)
    assert fc.slope_per_second < 0
    assert fc.predicted == 0.0


@pytest.mark.parametrize("age", [20.0, 45.0, 75.0, 100.0, 150.0, 200.0, 270.0])
@pytest.mark.parametrize(("before", "after"), [(20.0, 200.0), (200.0, 20.0)], ids=["up", "down"])
def test_a_step_is_not_a_ramp(age: float, before: float, after: float) -> None:
    """A crowd arriving (or leaving) at once: while the step sits in the trend window, its
    pairwise slopes tilt the window's median, but its newer half is flat on one side."""
    t, v = series(lambda x: after if x > NOW - AGE - age else before)
    fc = forecast_rate(t, v, now=NOW, horizon_seconds=240, settings=S)
    assert fc.slope_per_second == 0.0
    assert fc.predicted == fc.level


@pytest.mark.parametrize("age", [150.0, 180.0, 210.0, 240.0, 270.0])
@pytest.mark.parametrize(("before", "after"), [(20.0, 200.0), (200.0, 20.0)], ids=["up", "down"])
def test_a_noisy_step_older_than_the_newer_half_is_not_extrapolated(
    age: float, before: float, after: float
) -> None:
    """With 5% noise the window's own slope put up to 88% on a 10x step's new level at a
    node's lead; once the newer half is past the step, nothing beyond the noise is left."""
    rng = np.random.default_rng(7)
    t, v = series(lambda x: after if x > NOW - AGE - age else before)
    v *= 1.0 + 0.05 * rng.standard_normal(v.size)
    fc = forecast_rate(t, v, now=NOW, horizon_seconds=240, settings=S)
    assert fc.predicted == pytest.approx(fc.level, rel=0.05)


def test_spike_shows_in_latest_and_level_not_in_the_trend_or_the_usual_peak() -> None:
    t, v = series(lambda _: 4.0, seconds=1200.0)
    v[-1] = 64.0  # one 5-s sample of a burst, just visible
    fc = forecast_rate(t, v, now=NOW, horizon_seconds=60, settings=S)
    assert fc.latest == 64.0
    assert fc.level == pytest.approx(4.0 + 60.0 / 6)  # six samples in the 30-s level window
    assert fc.predicted <= fc.level * (1 + S.max_trend_growth_ratio)
    assert fc.slope_per_second == 0.0  # a median of slopes ignores it
    assert fc.sustained == pytest.approx(4.0)  # and so does the median
    # One minute in twenty holds it, fewer than the 0.9 quantile of the minutes' highs sees.
    assert dict(fc.peaks) == pytest.approx({w: 4.0 for w in S.peak_averaging_seconds})


def test_usual_peak_is_the_quantile_of_the_minutes_highest_means() -> None:
    # A 5-s burst in every minute, its height growing minute by minute (10/s, 20/s, ...).
    def rate(x: float) -> float:
        minute = int(x // 60)
        return 10.0 * (minute - 5) if x % 60 < 5 else 1.0

    t, v = series(rate, seconds=600.0)
    fc = forecast_rate(t, v, now=NOW, horizon_seconds=60, settings=S)
    highs = [max(1.0, 10.0 * (m - 5)) for m in sorted({int(x // 60) for x in t})]
    assert dict(fc.peaks)[5.0] == pytest.approx(np.quantile(highs, S.peak_quantile))
    assert dict(fc.peaks)[5.0] < max(highs)  # the busiest minute alone does not size it


def test_bursts_in_most_minutes_set_the_usual_peak() -> None:
    t, v = series(lambda x: 80.0 if x % 60 < 5 else 2.0, seconds=1200.0)
    fc = forecast_rate(t, v, now=NOW, horizon_seconds=60, settings=S)
    assert dict(fc.peaks)[5.0] == pytest.approx(80.0)


def test_peaks_forget_bursts_older_than_the_memory() -> None:
    memory = S.peak_memory_seconds
    t, v = series(lambda x: 50.0 if x < NOW - memory - 10 else 2.0, seconds=memory + 300)
    fc = forecast_rate(t, v, now=NOW, horizon_seconds=60, settings=S)
    assert {w: p for w, p in fc.peaks} == pytest.approx({w: 2.0 for w in S.peak_averaging_seconds})


def test_too_few_points_make_no_trend() -> None:
    t, v = series(lambda x: x, seconds=20.0)
    fc = forecast_rate(t, v, now=NOW, horizon_seconds=60, settings=S)
    assert fc.points < S.trend_min_points
    assert fc.slope_per_second == 0.0
    assert fc.predicted == pytest.approx(fc.level)


def test_a_nan_sample_is_ignored_not_spread() -> None:
    t, v = series(lambda _: 6.0)
    v[len(v) // 2] = np.nan  # a failed query's sample
    fc = forecast_rate(t, v, now=NOW, horizon_seconds=60, settings=S)
    assert (fc.level, fc.predicted, fc.sustained) == pytest.approx((6.0, 6.0, 6.0))
    assert all(p == pytest.approx(6.0) for _, p in fc.peaks)


@pytest.mark.parametrize(
    ("quiet_minutes", "quiet", "forgotten"),
    [
        pytest.param(6, True, True, id="six-quiet-minutes-empty-queue-forget"),
        pytest.param(6, False, False, id="a-queue-keeps-the-crowd"),
        pytest.param(3, True, False, id="a-short-lull-keeps-the-crowd"),
    ],
)
def test_a_crowd_is_forgotten_by_evidence(quiet_minutes: int, quiet: bool, forgotten: bool) -> None:
    # Issue 17: 10 minutes at 100/s, then 10/s; the memory (30 min) still holds the crowd.
    end = NOW - 60.0 * quiet_minutes
    t, v = series(lambda x: 100.0 if end - 600.0 <= x < end else 10.0, seconds=1200.0)
    fc = forecast_rate(t, v, now=NOW, horizon_seconds=60, settings=S, quiet=quiet)
    peak = dict(fc.peaks)[60.0]
    assert peak == (pytest.approx(10.0) if forgotten else pytest.approx(100.0))
    assert fc.base == pytest.approx(10.0)  # a low quantile: the crowd is not the base


@pytest.mark.parametrize(
    ("bursts", "history", "quiet", "clearing", "forgotten"),
    [
        pytest.param(1, 2100.0, False, True, True, id="one-crowd-a-queue-that-clears-forgets"),
        pytest.param(1, 2100.0, False, False, False, id="one-crowd-a-queue-that-does-not-keeps"),
        pytest.param(1, 1500.0, False, True, False, id="one-burst-in-less-history-keeps"),
        pytest.param(
            2, 2100.0, False, True, False, id="recurring-bursts-a-queue-that-clears-keeps"
        ),
        pytest.param(2, 2100.0, True, True, True, id="recurring-bursts-an-empty-queue-forgets"),
    ],
)
def test_a_request_or_two_queued_brings_back_no_one_off_crowd(
    bursts: int, history: float, quiet: bool, clearing: bool, forgotten: bool
) -> None:
    # Issue 17: at the base rate a request or two queue now and then; that must not bring
    # back a crowd that is over (each tick that did was a scale-up right after a scale-down),
    # but between recurring bursts, or after a first burst in less than a memory's history,
    # it keeps the burst capacity through a long lull.
    starts = [NOW - 1400.0, NOW - 900.0][-bursts:]
    t, v = series(
        lambda x: 100.0 if any(s <= x < s + 300.0 for s in starts) else 10.0, seconds=history
    )
    fc = forecast_rate(
        t, v, now=NOW, horizon_seconds=60, settings=S, quiet=quiet, clearing=clearing
    )
    peak = dict(fc.peaks)[60.0]
    assert peak == (pytest.approx(10.0) if forgotten else pytest.approx(100.0))


@pytest.mark.parametrize(
    ("lull_minutes", "forgotten"),
    [
        pytest.param(7, False, id="a-lull-under-twice-the-gaps-keeps"),
        pytest.param(15, True, id="a-lull-past-twice-the-gaps-forgets"),
    ],
)
def test_recurring_bursts_are_forgotten_only_after_twice_their_gaps(
    lull_minutes: int, forgotten: bool
) -> None:
    # Issue 17, on/off traffic: a minute's burst every six minutes, then a lull. Five quiet
    # minutes forgot the bursts (an empty queue) and halved the fleet just before the next;
    # their gaps are four quiet minutes, so eight are needed now.
    last = NOW - 60.0 * (lull_minutes + 1)
    starts = [last - 360.0 * k for k in range(5)]
    t, v = series(
        lambda x: 100.0 if any(s <= x < s + 60.0 for s in starts) else 10.0, seconds=1800.0
    )
    fc = forecast_rate(t, v, now=NOW, horizon_seconds=60, settings=S, quiet=True)
    peak = dict(fc.peaks)[5.0]
    assert peak == (pytest.approx(10.0) if forgotten else pytest.approx(100.0))


@given(
    st.lists(
        st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12),
        min_size=1,
        max_size=80,
    )
)
def test_the_fast_median_and_mean_are_numpys_to_the_bit(values: list[float]) -> None:
    # A decision takes three medians; these stand in for np.median and np.mean (their
    # per-call overhead was a fifth of a 1,000-workload tick), so a replay must not move.
    x = np.array(values)
    assert _median(x) == float(np.median(x))
    assert _mean(x) == float(np.mean(x))
