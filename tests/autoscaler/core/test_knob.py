"""The target-attainment knob (issue 17): one quantity, every setting it moves monotone."""

import dataclasses
import math

import numpy as np
import pytest

from gpufleet.autoscaler.core import knob
from gpufleet.autoscaler.core.gpufleet_policy import GpufleetPolicy, GpufleetSettings
from gpufleet.autoscaler.core.workload import WorkloadConfig

BASE = GpufleetSettings()
# Every target from the cheapest to the top, in fine steps of nines.
TARGETS = [1.0 - 10.0**-n for n in np.linspace(1.0, 4.0, 61)]


def moved(s: GpufleetSettings) -> dict[str, float]:
    """The settings the knob moves, each oriented so that more buys more capacity."""
    return {
        "headroom": s.headroom,
        "reserve_ratio": s.reserve_ratio,
        "panic_hold_seconds": s.panic_hold_seconds,
        "peak_quantile": s.forecast.peak_quantile,
        "forget_after_blocks": s.forecast.forget_after_blocks,
    }


def test_every_setting_it_moves_is_monotone_in_the_target() -> None:
    rows = [moved(knob.apply(BASE, t)) for t in TARGETS]
    for name in rows[0]:
        values = [row[name] for row in rows]
        assert values == sorted(values), name
        assert values[-1] > values[0], name  # and it does move


def test_the_default_target_is_the_default_settings() -> None:
    assert knob.apply(BASE, knob.DEFAULT_TARGET) == BASE
    filled = dataclasses.replace(BASE, fill_nodes=True)
    assert knob.apply(filled, knob.DEFAULT_TARGET) == filled  # what it does not move stays


def test_the_top_stands_a_reserve_and_remembers_every_peak() -> None:
    top = knob.apply(BASE, 0.999)
    assert top.reserve_ratio > 0 and top.forecast.peak_quantile == 1.0


@pytest.mark.parametrize("target", [0.5, 0.89, 0.99995, 1.0, math.nan, math.inf])
def test_a_target_out_of_range_is_refused(target: float) -> None:
    with pytest.raises(ValueError, match=r"target attainment must be in \[0.9, 0.9999\]"):
        knob.apply(BASE, target)


def test_a_workloads_target_sets_its_policy() -> None:
    workload = WorkloadConfig(name="llm", target_attainment=0.995)
    assert GpufleetPolicy(workload).settings == knob.apply(BASE, 0.995)
    unset = GpufleetPolicy(WorkloadConfig(name="llm"))
    assert unset.settings == BASE  # existing workloads keep their meaning
