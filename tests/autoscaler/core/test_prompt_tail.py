"""The prompt tail's standing replicas: the waits behind long prefills, by prompt histogram."""

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gpufleet.autoscaler.core.observation import Buckets
from gpufleet.autoscaler.core.prompt_tail import (
    PromptMix,
    _beyond,
    blocking_seconds,
    replicas,
)

INF = math.inf


@given(
    a=st.floats(0, 20),
    width=st.floats(0, 20),
    x=st.floats(-5, 30),
)
def test_beyond_is_the_mean_excess_of_a_uniform_prefill(a: float, width: float, x: float) -> None:
    b = a + width
    n = 2000  # midpoint rule: exact enough for a piecewise-linear integrand
    numeric = (
        sum(max(0.0, a + (i + 0.5) * width / n - x) for i in range(n)) / n
        if width
        else max(0.0, a - x)
    )
    assert _beyond(a, b, x) == pytest.approx(numeric, abs=1e-3 * max(1.0, b))


def test_a_mix_of_short_prompts_blocks_nobody() -> None:
    # At 15k tokens/s a 2k-token prompt takes 0.13 s: no newcomer's 2-s SLO is at risk.
    mix = ((1000.0, 2000.0, 50.0), (0.0, 1000.0, 50.0))
    assert blocking_seconds(mix, prefill_tokens_per_second=15000.0, slo_seconds=2.0) == 0.0


def test_blocking_by_hand() -> None:
    """Newcomers of 0-1k tokens (0-0.1 s at 10k/s, slack 1.95 s at the middle) behind
    prompts of exactly 50k (5 s): the long ones hold a replica 3.05 s beyond it; the long
    newcomers are infeasible (5 s > the 2-s SLO) and left out of the mean."""
    mix = ((0.0, 1000.0, 90.0), (50000.0, 50000.0, 10.0))
    w = blocking_seconds(mix, prefill_tokens_per_second=10000.0, slo_seconds=2.0)
    assert w == pytest.approx(0.1 * 3.05)


@given(
    counts=st.lists(st.floats(0, 100), min_size=5, max_size=5),
    rate=st.floats(1000, 50000),
    slo=st.floats(0.1, 10),
)
# A feasible count of 5e-324 halves to 0 and its double does not: a share below float
# resolution is no share (found by hypothesis in a full run).
@example(counts=[5e-324, 0.0, 0.0, 0.0, 1.0], rate=1000.0, slo=1.0)
# Tiny counts alone: their products went subnormal, and doubling them moved W by 2% (found
# by hypothesis in a CI run).
@example(counts=[2.620184131259718e-161, 0.0, 0.0, 0.0, 0.0], rate=1000.0, slo=0.5)
# A subnormal total: the scaling factor itself overflowed (found by hypothesis in a CI run).
@example(counts=[0.0, 0.0, 0.0, 0.0, 2.225073858507203e-309], rate=1000.0, slo=1.0)
def test_blocking_is_a_share_of_the_longest_prefill_and_depends_on_shares_only(
    counts: list[float], rate: float, slo: float
) -> None:
    # Not monotone in the prefill rate or the SLO: either makes more newcomers feasible,
    # and a feasible newcomer can be blocked where an infeasible one was left out.
    bounds = (0.0, 2000.0, 10000.0, 50000.0, 100000.0, 100000.0)
    mix = tuple((bounds[i], bounds[i + 1], n) for i, n in enumerate(counts) if n > 0)
    w = blocking_seconds(mix, prefill_tokens_per_second=rate, slo_seconds=slo)
    assert 0.0 <= w <= max((hi for _, hi, _ in mix), default=0.0) / rate + 1e-9
    doubled = tuple((lo, hi, 2 * n) for lo, hi, n in mix)
    assert blocking_seconds(doubled, prefill_tokens_per_second=rate, slo_seconds=slo) == (
        pytest.approx(w)
    )


def test_no_evidence_or_no_budget_stands_nothing() -> None:
    assert blocking_seconds((), prefill_tokens_per_second=15000.0, slo_seconds=2.0) == 0.0
    assert replicas(10.0, 0.3, miss_share=0.0) == 0
    assert replicas(0.0, 0.3, miss_share=0.1) == 0
    assert replicas(10.0, 0.3, miss_share=0.1) == 30
    assert replicas(10.0, 0.3, miss_share=0.05) == 60  # half the misses: twice the replicas


def sample(short: float, long: float) -> tuple[tuple[float, float], ...]:
    """Cumulative per-second buckets: `short` prompts up to 1k tokens, `long` over 100k."""
    return ((1000.0, short), (100000.0, short), (INF, short + long))


def test_the_mix_sums_the_window_and_forgets_what_falls_out() -> None:
    mix = PromptMix(window_seconds=10.0)
    times = (0.0, 5.0, 10.0, 15.0)
    mix.update(Buckets(times[:2], (sample(2.0, 1.0), sample(4.0, 0.0))), now=5.0)
    assert mix.buckets() == ((0.0, 1000.0, 6.0), (100000.0, 100000.0, 1.0))
    # The next tick sees the same samples again and two new ones: only the new ones add.
    mix.update(
        Buckets(times, (sample(2.0, 1.0), sample(4.0, 0.0), sample(1.0, 0.0), sample(1.0, 0.0))),
        now=15.0,
    )
    assert mix.buckets() == ((0.0, 1000.0, 6.0),)  # 0 s fell out: 5, 10, 15 are left


def test_a_new_bucket_layout_starts_over_and_a_dip_counts_nothing() -> None:
    mix = PromptMix(window_seconds=60.0)
    mix.update(Buckets((0.0,), (sample(2.0, 1.0),)), now=0.0)
    other = ((500.0, 3.0), (1000.0, 2.0), (INF, 4.0))  # a dip between two pods' counters
    mix.update(Buckets((5.0,), (other,)), now=5.0)
    assert mix.buckets() == ((0.0, 500.0, 3.0), (1000.0, 1000.0, 1.0))
