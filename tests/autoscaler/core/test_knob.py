"""The target-attainment knob (issue 17): one quantity, every setting it moves monotone."""

import dataclasses
import math

import numpy as np
import pytest

from gpufleet.autoscaler.core import knob
from gpufleet.autoscaler.core.gpufleet_policy import GpufleetPolicy
from gpufleet.autoscaler.core.gpufleet_settings import GpufleetSettings
from gpufleet.autoscaler.core.workload import WorkloadConfig

BASE = GpufleetSettings()
# Every target from the cheapest to the top, in fine steps of nines, and the ends.
TARGETS = [
    knob.MIN_TARGET,
    *(1.0 - 10.0**-n for n in np.linspace(knob.nines(knob.MIN_TARGET), 5.0, 141)),
    knob.MAX_TARGET,
]


def moved(s: GpufleetSettings) -> dict[str, float]:
    """The settings the knob moves, each oriented so that more buys more capacity."""
    return {
        "headroom": s.headroom,
        "reserve_ratio": s.reserve_ratio,
        "panic_hold_seconds": s.panic_hold_seconds,
        "peak_quantile": s.forecast.peak_quantile,
        "forget_after_blocks": s.forecast.forget_after_blocks,
        "max_scale_up_ratio": s.max_scale_up_ratio,
        "unlearned_max_scale_up_ratio": s.unlearned_max_scale_up_ratio,
        "placeholder_share": s.placeholder_share,
        "backlog_drain_seconds": -s.backlog_drain_seconds,  # a shorter drain buys more
        "new_node_waits_lead": -s.new_node_waits_lead,  # waiting for a node buys less
        "feedback_min_ratio": -s.feedback.min_ratio,  # a higher credit floor buys less
        # the probe credits more only on more load: a higher bar buys more
        "probe_min_load": s.feedback.min_load,
        "pressure_step": s.pressure_step,  # a pressure sample also steps the fleet
        # The prompt tail's replicas go as 1 / the share its waits may miss (0: off).
        "prompt_tail": 1.0 / s.prompt_tail_miss_share if s.prompt_tail_miss_share else 0.0,
    }


def test_every_setting_it_moves_is_monotone_in_the_target() -> None:
    rows = [moved(knob.apply(BASE, t)) for t in TARGETS]
    for name in rows[0]:
        values = [row[name] for row in rows]
        assert values == sorted(values), name
        assert values[-1] > values[0], name  # and it does move


def test_the_range_spans_half_to_five_nines() -> None:
    assert (knob.MIN_TARGET, knob.DEFAULT_TARGET, knob.MAX_TARGET) == (0.5, 0.99, 0.99999)
    assert knob.apply(BASE, knob.MIN_TARGET) == knob.apply(BASE, 0.5)  # lands on the anchor


def test_the_cheapest_target_buys_no_node_for_a_crowd_it_cannot_serve_in_time() -> None:
    cheap = knob.apply(BASE, 0.5)
    assert (cheap.headroom, cheap.reserve_ratio, cheap.forecast.peak_quantile) == (0.0, 0.0, 0.5)
    assert (cheap.max_scale_up_ratio, cheap.placeholder_share) == (1.25, 0.0)
    assert cheap.backlog_drain_seconds == 240.0
    assert cheap.feedback.min_ratio == 1.0  # observed waits never shrink a replica's credit
    # Between 50% and 90% the cap loosens smoothly, and is gone at 90%.
    assert 1.25 < knob.apply(BASE, 0.8).max_scale_up_ratio < 20.0
    assert knob.apply(BASE, 0.9).max_scale_up_ratio == math.inf


def test_only_targets_below_60_percent_wait_the_node_lead_time_for_a_new_node() -> None:
    assert knob.apply(BASE, 0.5).new_node_waits_lead
    assert knob.apply(BASE, 0.599).new_node_waits_lead
    assert not any(knob.apply(BASE, t).new_node_waits_lead for t in (0.6, 0.8, 0.9, 0.99))
    given = dataclasses.replace(BASE, new_node_waits_lead=True)
    assert knob.apply(given, 0.99).new_node_waits_lead  # what is given stays


def test_the_top_target_stands_more_of_everything() -> None:
    top, below = knob.apply(BASE, 0.99999), knob.apply(BASE, 0.9999)
    assert (top.headroom, top.reserve_ratio, top.panic_hold_seconds) == (2.0, 150.0, 600.0)
    assert (top.forecast.peak_quantile, top.forecast.forget_after_blocks) == (1.0, 20)
    assert top.headroom > below.headroom and top.reserve_ratio > below.reserve_ratio


# What every target from 90% to 99.99% mapped to before the range grew (commit 427d6c0):
# (headroom, reserve_ratio, panic_hold_seconds, peak_quantile, forget_after_blocks).
BEFORE = {
    0.9: (0.0, 0.0, 60.0, 0.8, 5),
    0.95: (0.12041199840000001, 0.0, 60.0, 0.8301029996, 5),
    0.99: (0.4, 0.0, 60.0, 0.9, 5),
    0.995: (0.5204119984000001, 9.03089988, 78.06179976, 0.9301029996, 6),
    0.998: (0.6795880016, 20.96910012, 101.93820024, 0.9698970004, 7),
    0.9995: (0.9354634982000001, 33.01029996, 138.06179975999999, 1.0, 9),
    0.9999: (1.25, 40.0, 180.0, 1.0, 12),
}


@pytest.mark.parametrize("target", list(BEFORE))
def test_every_target_from_90_to_9999_maps_exactly_as_before(target: float) -> None:
    s = knob.apply(BASE, target)
    moved_before = (
        s.headroom,
        s.reserve_ratio,
        s.panic_hold_seconds,
        s.forecast.peak_quantile,
        s.forecast.forget_after_blocks,
    )
    assert moved_before == BEFORE[target]
    # and nothing else: the settings only the cheapest targets move stay as given (the
    # cap until capacity is learned, which targets above 99% move, has its own test)
    rest = dict(max_scale_up_ratio=math.inf, placeholder_share=1.0, backlog_drain_seconds=60.0)
    feedback = dataclasses.replace(BASE.feedback, min_load=s.feedback.min_load)  # its own test
    assert s == dataclasses.replace(s, **rest, feedback=feedback)
    assert not s.new_node_waits_lead


def test_above_99_percent_an_unlearned_scale_up_may_ask_for_more_than_twice() -> None:
    cap = {t: knob.apply(BASE, t).unlearned_max_scale_up_ratio for t in (0.5, 0.99, 0.995)}
    assert cap[0.5] == cap[0.99] == BASE.unlearned_max_scale_up_ratio == 2.0
    assert 2.0 < cap[0.995] < 4.0
    assert {knob.apply(BASE, t).unlearned_max_scale_up_ratio for t in (0.999, 0.99999)} == {4.0}
    given = dataclasses.replace(BASE, unlearned_max_scale_up_ratio=3.0)
    assert knob.apply(given, 0.99).unlearned_max_scale_up_ratio == 3.0
    assert knob.apply(given, 0.999).unlearned_max_scale_up_ratio == 6.0
    # a scale-down step is as careful at every target until then
    shares = {knob.apply(BASE, t).unlearned_max_scale_down_share for t in TARGETS}
    assert shares == {BASE.unlearned_max_scale_down_share}


def test_above_99_percent_the_probe_credits_more_only_on_more_load() -> None:
    loads = {t: knob.apply(BASE, t).feedback.min_load for t in (0.5, 0.9, 0.99, 0.9935, 0.99999)}
    assert loads == {0.5: 0.5, 0.9: 0.5, 0.99: 0.5, 0.9935: 0.7, 0.99999: 0.7}
    assert BASE.feedback.min_load == 0.5
    given = dataclasses.replace(BASE, feedback=dataclasses.replace(BASE.feedback, min_load=0.8))
    assert {knob.apply(given, t).feedback.min_load for t in (0.5, 0.99, 0.999)} == {0.8}


def test_above_99_percent_a_pressure_sample_also_steps_the_fleet() -> None:
    steps = {t: knob.apply(BASE, t).pressure_step for t in (0.5, 0.9, 0.99, 0.9901, 0.99999)}
    assert steps == {0.5: False, 0.9: False, 0.99: False, 0.9901: True, 0.99999: True}
    assert not BASE.pressure_step
    given = dataclasses.replace(BASE, pressure_step=True)
    assert {knob.apply(given, t).pressure_step for t in (0.5, 0.99)} == {True}


def test_the_cheap_settings_scale_what_is_given() -> None:
    feedback = dataclasses.replace(BASE.feedback, min_ratio=0.5)
    given = dataclasses.replace(
        BASE, backlog_drain_seconds=30.0, placeholder_share=0.5, feedback=feedback
    )
    assert knob.apply(given, 0.99).backlog_drain_seconds == 30.0
    assert knob.apply(given, 0.99).feedback == feedback
    cheap = knob.apply(given, 0.5)
    assert (cheap.backlog_drain_seconds, cheap.placeholder_share) == (120.0, 0.0)
    assert cheap.feedback.min_ratio == 1.0
    assert 0.5 < knob.apply(given, 0.8).feedback.min_ratio < 1.0


def test_the_default_target_is_the_default_settings() -> None:
    assert knob.apply(BASE, knob.DEFAULT_TARGET) == BASE
    filled = dataclasses.replace(BASE, fill_nodes=True)
    assert knob.apply(filled, knob.DEFAULT_TARGET) == filled  # what it does not move stays


def test_the_top_stands_a_reserve_and_remembers_every_peak() -> None:
    top = knob.apply(BASE, 0.999)
    assert top.reserve_ratio > 0 and top.forecast.peak_quantile == 1.0


@pytest.mark.parametrize("target", [0.0, 0.49, 0.999995, 1.0, -math.inf, math.nan, math.inf])
def test_a_target_out_of_range_is_refused(target: float) -> None:
    with pytest.raises(ValueError, match=r"target attainment must be in \[0.5, 0.99999\]"):
        knob.apply(BASE, target)


def test_a_workloads_target_sets_its_policy() -> None:
    workload = WorkloadConfig(name="llm", target_attainment=0.995)
    assert GpufleetPolicy(workload).settings == knob.apply(BASE, 0.995)
    unset = GpufleetPolicy(WorkloadConfig(name="llm"))
    assert unset.settings == BASE  # existing workloads keep their meaning


def test_the_prompt_tail_is_held_from_99_percent_up_linearly_in_nines() -> None:
    share = {t: knob.apply(BASE, t).prompt_tail_miss_share for t in (0.98, 0.99, 0.999, 0.99999)}
    assert share[0.98] == 0.0  # no floor below the default
    assert share[0.99] == BASE.prompt_tail_miss_share  # the default target: the default
    assert share[0.99] / share[0.999] == pytest.approx(2.0)  # n - 1: 1 -> 2 -> 4
    assert share[0.99] / share[0.99999] == pytest.approx(4.0)
