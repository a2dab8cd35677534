"""SLO feedback: pressure credits less than the learned rate at once, passing restores it slowly."""

import math
from dataclasses import replace

import pytest

from gpufleet.autoscaler.core.observation import Observation, Replica, ReplicaState, Series
from gpufleet.autoscaler.core.slo_feedback import (
    FeedbackSettings,
    FeedbackState,
    Sample,
    clamp,
    newest_sample,
    update,
)

SLO = 2.0
S = FeedbackSettings()


def sample(t: float, *, p90: float = 0.5, wait: float | None = 0.0, **kw: bool) -> Sample:
    return Sample(
        time=t,
        ttft_p90_seconds=p90,
        wait_seconds=wait,
        loaded=kw.get("loaded", False),
        held=kw.get("held", False),
    )


def fold(state: FeedbackState, *samples: Sample) -> FeedbackState:
    for s in samples:
        state = update(state, s, S, slo=SLO)
    return state


def test_queue_wait_credits_less_than_the_learned_rate() -> None:
    # 0.5 s mean wait, over 0.05 x SLO: the latency probe stopped at 1.0, this goes under it.
    # 0.15 s of mean wait at a 2-s SLO is pressure already: most requests wait nothing.
    assert fold(FeedbackState(), sample(0.0, wait=0.15)).ratio == S.backoff
    state = fold(FeedbackState(), *(sample(t, wait=0.5) for t in range(5)))
    assert state.ratio == pytest.approx(S.backoff**5)
    state = fold(state, *(sample(10.0 + t, wait=0.5) for t in range(100)))
    assert state.ratio == S.min_ratio


def test_up_quickly_down_slowly() -> None:
    low = fold(FeedbackState(), sample(0.0, wait=1.0))
    back = fold(low, *(sample(1.0 + t, wait=0.0) for t in range(5)))
    assert low.ratio < back.ratio < 1.0  # five passing samples undo less than one failing
    back = fold(back, *(sample(10.0 + t, wait=0.0) for t in range(100)))
    assert back.ratio == 1.0  # recovery stops at the learned rate; growth is the probe's


def test_the_newest_pressure_is_remembered_for_the_scale_down() -> None:
    state = fold(FeedbackState(), sample(5.0, wait=1.0), sample(10.0, wait=1.0, held=True))
    assert state.pressed == 10.0  # held pressure shrinks nothing, but it is still waiting
    assert fold(state, sample(15.0), sample(20.0, p90=1.5)).pressed == 10.0
    assert FeedbackState().pressed == -math.inf


def test_pressure_while_replicas_start_or_at_max_winds_nothing_down() -> None:
    state = fold(FeedbackState(), *(sample(t, wait=1.0, held=True) for t in range(20)))
    assert state.ratio == 1.0


def test_a_long_prompts_own_prefill_is_not_pressure() -> None:
    # p90 TTFT over the SLO with no wait: the prompts are long, more replicas do not help.
    state = fold(FeedbackState(ratio=0.5), sample(0.0, p90=3.0, wait=0.0))
    assert state.ratio > 0.5
    # Without the wait signal, a p90 over the SLO is the stand-in for pressure.
    state = fold(FeedbackState(), sample(0.0, p90=3.0, wait=None))
    assert state.ratio == S.backoff


def test_the_latency_probe_grows_credit_only_at_load_and_within_half_the_slo() -> None:
    assert fold(FeedbackState(), sample(0.0, p90=0.5)).ratio == 1.0
    grown = fold(FeedbackState(), *(sample(t, p90=0.5, loaded=True) for t in range(10)))
    assert grown.ratio == pytest.approx((1 + S.growth) ** 10)
    # Over half the SLO without pressure withdraws the credit, never below 1.
    assert fold(grown, sample(20.0, p90=1.5)).ratio == pytest.approx(grown.ratio * S.backoff)
    assert fold(FeedbackState(), sample(0.0, p90=1.5)).ratio == 1.0
    capped = fold(FeedbackState(), *(sample(t, p90=0.1, loaded=True) for t in range(500)))
    assert capped.ratio == S.max_ratio


def test_each_sample_counts_once() -> None:
    once = fold(FeedbackState(), sample(5.0, wait=1.0))
    assert fold(once, sample(5.0, wait=1.0), sample(4.0, wait=1.0)) == once
    assert update(once, None, S, slo=SLO) == once


def test_clamp_keeps_a_persisted_ratio_within_bounds() -> None:
    assert clamp(99.0, S) == S.max_ratio and clamp(0.0, S) == S.min_ratio
    assert clamp(0.5, S) == 0.5


def _obs(*, ttft_sum: float, prefill_sum: float, starting: int = 0) -> Observation:
    t = (0.0, 5.0)
    ready = Replica(name="r", state=ReplicaState.READY, since=-1.0, created=-1.0)
    start = Replica(name="s", state=ReplicaState.STARTING, since=4.0, created=4.0)
    return Observation(
        now=6.5,
        ttft_p90_seconds=Series(t, (0.4, 0.9)),
        ttft_sum_rate=Series(t, (0.0, ttft_sum)),
        prefill_sum_rate=Series(t, (0.0, prefill_sum)),
        prompt_tokens_rate=Series(t, (0.0, 4000.0)),
        replicas=(ready,) + (start,) * starting,
    )


def test_the_mean_wait_is_ttft_minus_prefill_per_first_token() -> None:
    # 4000 tokens/s at 1000 tokens per request: 4 first tokens/s; 6 s of TTFT and 2 s of
    # prefill summed per second: 1 s of wait each.
    got = newest_sample(
        _obs(ttft_sum=6.0, prefill_sum=2.0), tokens_per_request=1000.0, loaded=True, held_back=False
    )
    assert got == Sample(time=5.0, ttft_p90_seconds=0.9, wait_seconds=1.0, loaded=True, held=False)
    held = newest_sample(
        _obs(ttft_sum=6.0, prefill_sum=2.0, starting=1),
        tokens_per_request=1000.0,
        loaded=True,
        held_back=False,
    )
    assert held is not None and held.held
    unknown = newest_sample(
        _obs(ttft_sum=6.0, prefill_sum=2.0), tokens_per_request=None, loaded=True, held_back=True
    )
    assert unknown is not None and unknown.wait_seconds is None and unknown.held
    no_prefill = replace(_obs(ttft_sum=6.0, prefill_sum=2.0), prefill_sum_rate=Series())
    got = newest_sample(no_prefill, tokens_per_request=1000.0, loaded=True, held_back=False)
    assert got is not None and got.wait_seconds is None
    assert (
        newest_sample(Observation(now=0.0), tokens_per_request=1.0, loaded=True, held_back=False)
        is None
    )
    assert math.isinf(FeedbackState().seen)
