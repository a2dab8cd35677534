"""Burst detection in traces and the reaction delay of a run's decisions."""

import numpy as np
import pytest

from gpufleet.autoscaler.replay.core.bursts import (
    BurstRule,
    burst_starts,
    earliest_decision,
    overload_visible,
    reaction_delays,
    visible_delay,
)
from gpufleet.autoscaler.replay.core.model import PipelineModel
from gpufleet.autoscaler.replay.core.result import DecisionRecord


def steady(start: float, end: float, rate: float) -> np.ndarray:
    return np.arange(start, end, 1.0 / rate)


@pytest.mark.parametrize(
    ("arrivals", "expected"),
    [
        (steady(0, 300, 2.0), []),
        (np.concatenate([steady(0, 120, 1.0), steady(120.25, 150, 5.0)]), [120.25]),
        # Two jumps closer than a baseline apart are one burst.
        (
            np.concatenate([steady(0, 120, 1.0), steady(120, 140, 5.0), steady(140, 160, 25.0)]),
            [120.0],
        ),
        # A trickle after silence is below min_rate.
        (np.concatenate([steady(0, 10, 1.0), steady(100, 200, 0.5)]), []),
        # Load at the very start has no baseline to burst over.
        (steady(0, 50, 10.0), []),
    ],
    ids=["steady", "jump x5", "two jumps one burst", "trickle", "start of trace"],
)
def test_burst_starts(arrivals, expected):
    # Found to within the search step (1 s).
    starts = burst_starts(np.sort(arrivals), BurstRule()).tolist()
    assert starts == pytest.approx(expected, abs=1.0)


def decisions(*pairs: tuple[float, int]) -> tuple[DecisionRecord, ...]:
    return tuple(DecisionRecord(t=t, desired=d, reason="x", message="") for t, d in pairs)


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        (decisions((0, 2), (100, 2), (104, 3), (106, 5)), 4.0),
        (decisions((0, 2), (100, 2), (104, 1), (110, 2)), None),  # never above 2
        (decisions((0, 2), (170, 3)), None),  # beyond the 60 s horizon
        (decisions((0, 2), (100, 3)), 0.0),  # a decision at the very start counts
    ],
    ids=["first raise", "no raise", "too late", "same instant"],
)
def test_reaction_delay(history, expected):
    delay = reaction_delays(np.array([100.0]), history)[0]
    if expected is None:
        assert np.isnan(delay)
    else:
        assert delay == expected


@pytest.mark.parametrize(
    ("start", "expected"),
    [(101.0, 5.5), (100.0, 6.5), (104.9, 1.6)],
    ids=["mid interval", "on a scrape", "just before a scrape"],
)
def test_visible_delay_is_next_scrape_plus_evaluation_and_query(start, expected):
    assert visible_delay(start, PipelineModel()) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("start", "interval", "expected"),
    [
        (101.0, 2.0, 7.0),  # the 105 s scrape is seen at 106.5; ticks at 106 and 108
        (100.0, 2.0, 8.0),  # the 100 s scrape missed it: a burst on a scrape waits longest
        (104.9, 2.0, 3.1),
        (103.5, 15.0, 16.5),  # HPA's next sync after 106.5 is at 120
        (101.5, 1.5, 5.0),  # seen at 106.5 exactly: that tick sees it
    ],
    ids=["mid interval", "on a scrape", "just before a scrape", "hpa sync", "on a tick"],
)
def test_earliest_decision_is_the_first_tick_that_sees_the_first_sample(start, interval, expected):
    assert earliest_decision(start, PipelineModel(), interval) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("ready", "expected"),
    [
        # 10 arrivals/s of 1,000 tokens from t=100: 50k tokens per 5-s sample.
        (4, 106.5),  # 4 x 1k tokens/s x (5 s + 2 s SLO) = 28k < 50k: the first sample
        (8, None),  # 56k: absorbed within the SLO
    ],
    ids=["first sample overloads", "absorbed"],
)
def test_overload_visible_is_the_first_sample_the_ready_replicas_cannot_prefill(ready, expected):
    arrivals = np.concatenate([steady(0, 100, 0.5), steady(100, 130, 10.0)])
    seen = overload_visible(
        np.array([100.0]),
        arrival_seconds=arrivals,
        prompt_tokens=np.full(len(arrivals), 1000),
        ready_times=np.array([0.0]),
        ready=np.array([ready]),
        prefill_tokens_per_second=1_000.0,
        slo_ttft_seconds=2.0,
        pipeline=PipelineModel(),
    )[0]
    if expected is None:
        assert np.isnan(seen)
    else:
        assert seen == pytest.approx(expected)


def test_overload_visible_counts_the_replicas_ready_at_each_scrape():
    # Within a sample plus the SLO 2 serving prefill 14k, 8 (from t=110) 56k: the sample
    # scraped at 105 is overloaded, and a start at 108, first covered at 110, never is.
    arrivals = np.concatenate([steady(0, 100, 0.5), steady(100, 140, 10.0)])
    seen = overload_visible(
        np.array([100.0, 108.0]),
        arrival_seconds=arrivals,
        prompt_tokens=np.full(len(arrivals), 1000),
        ready_times=np.array([0.0, 110.0]),
        ready=np.array([2, 8]),
        prefill_tokens_per_second=1_000.0,
        slo_ttft_seconds=2.0,
        pipeline=PipelineModel(),
    )
    assert seen[0] == pytest.approx(106.5)
    assert np.isnan(seen[1])


def test_an_overload_seen_after_the_next_burst_starts_is_that_bursts():
    # Overloaded only from t=150 (2 serving, 14k per sample plus the SLO): the burst at 100
    # had none before the one at 148 started, so it counts for the second alone.
    arrivals = np.concatenate([steady(0, 100, 0.5), steady(100, 150, 2.0), steady(150, 170, 10.0)])
    seen = overload_visible(
        np.array([100.0, 148.0]),
        arrival_seconds=arrivals,
        prompt_tokens=np.full(len(arrivals), 1000),
        ready_times=np.array([0.0]),
        ready=np.array([2]),
        prefill_tokens_per_second=1_000.0,
        slo_ttft_seconds=2.0,
        pipeline=PipelineModel(),
    )
    assert np.isnan(seen[0])
    assert seen[1] == pytest.approx(156.5)
