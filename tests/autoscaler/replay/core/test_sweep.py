"""Sweeps: Pareto fronts, front dominance and the run plan (pure, no simulation)."""

import dataclasses
import math

import numpy as np
import pytest

from gpufleet.autoscaler.core import factory as policies
from gpufleet.autoscaler.core import knob
from gpufleet.autoscaler.core.factory import Tuning
from gpufleet.autoscaler.core.gpufleet_settings import GpufleetSettings
from gpufleet.autoscaler.core.observation import Observation, Replica, ReplicaState, Series
from gpufleet.autoscaler.core.workload import WorkloadConfig
from gpufleet.autoscaler.replay.core import sweep
from gpufleet.autoscaler.replay.core.model import ReplayConfig
from gpufleet.autoscaler.replay.core.sweep import Point, dominates, pareto_front
from gpufleet.autoscaler.replay.core.trace import trace_from_arrays


def pts(*pairs: tuple[float, float]) -> list[Point]:
    """Points from (attainment, GPU-hours) pairs, labelled p0, p1, ... in order."""
    return [Point(a, h, f"p{i}") for i, (a, h) in enumerate(pairs)]


@pytest.mark.parametrize(
    ("points", "front_labels"),
    [
        ([], []),
        (pts((0.9, 10)), ["p0"]),
        (pts((0.9, 10), (0.95, 12), (0.99, 20)), ["p0", "p1", "p2"]),
        (pts((0.99, 20), (0.9, 10), (0.95, 12)), ["p1", "p2", "p0"]),
        (pts((0.9, 10), (0.8, 12)), ["p0"]),
        (pts((0.9, 10), (0.95, 10)), ["p1"]),
        (pts((0.9, 10), (0.9, 12)), ["p0"]),
        (pts((0.9, 10), (0.9, 10)), ["p0"]),
        (pts((0.5, 5), (0.99, 30), (0.7, 40), (0.98, 25)), ["p0", "p3", "p1"]),
    ],
    ids=[
        "empty",
        "one point",
        "all on the front, cheapest first",
        "input order does not matter",
        "costlier and worse is dropped",
        "same cost, better attainment wins",
        "same attainment, costlier is dropped",
        "equal points keep the first",
        "a point beaten by a cheaper one is dropped",
    ],
)
def test_pareto_front(points, front_labels):
    assert [p.label for p in pareto_front(points)] == front_labels


@pytest.mark.parametrize(
    ("front_a", "front_b", "expected"),
    [
        (pts((0.99, 10)), pts((0.95, 12)), True),
        (pts((0.95, 12)), pts((0.95, 12)), True),
        (pts((0.94, 10)), pts((0.95, 12)), False),
        (pts((0.99, 13)), pts((0.95, 12)), False),
        (pts((0.9, 5), (0.99, 10)), pts((0.85, 6), (0.98, 10)), True),
        (pts((0.9, 5), (0.99, 10)), pts((0.85, 4), (0.98, 10)), False),
        (pts((0.999, 100)), pts((0.5, 1)), False),
        (pts((0.9, 5)), [], True),
        ([], pts((0.5, 1)), False),
    ],
    ids=[
        "better on both axes",
        "equal point counts as matched",
        "cheaper but worse attainment",
        "better attainment but costlier",
        "every point matched by some point",
        "b's cheapest point is cheaper than all of a",
        "one great expensive point does not cover a cheap one",
        "empty b is dominated vacuously",
        "empty a dominates nothing",
    ],
)
def test_dominates(front_a, front_b, expected):
    assert dominates(front_a, front_b) is expected


def test_uncovered_names_the_points_not_matched():
    a = pts((0.9, 5), (0.99, 10))
    b = [Point(0.85, 4, "cheap"), Point(0.98, 10, "covered"), Point(0.995, 11, "better")]
    assert [p.label for p in sweep.uncovered(a, b)] == ["cheap", "better"]


def test_nearest_is_the_best_at_its_cost_and_the_cheapest_at_its_attainment():
    front = [Point(0.90, 4, "a"), Point(0.95, 8, "b"), Point(0.99, 12, "c")]
    assert sweep.nearest(front, Point(0.97, 10, "t")) == (front[1], front[2])
    # Nothing as cheap, nothing as high.
    assert sweep.nearest(front, Point(0.999, 3, "t")) == (None, None)


def test_matching_seeds_are_those_some_candidate_matches_on():
    # A point missed on the mean of two seeds, matched on the first of them.
    at_cost = [Point(0.95, 8), Point(0.93, 8)]
    at_attainment = [Point(0.97, 11), Point(0.96, 12)]
    target = [Point(0.94, 9), Point(0.96, 10)]
    assert sweep.matching_seeds([at_cost, at_attainment], target) == [0]
    assert sweep.matching_seeds([at_attainment], target) == []
    assert sweep.matching_seeds([], target) == []


TRACE = trace_from_arrays([0.0, 1.0], [10, 10], [5, 5], name="t")
WORKLOAD = WorkloadConfig(name="w")


@pytest.mark.parametrize(
    ("names", "sweep_mode", "expected"),
    [
        (("hpa", "oracle"), False, [("hpa", ""), ("oracle", "")]),
        (
            ("hpa", "oracle"),
            True,
            [("hpa", f"target_util={v:g}") for v in policies.knob("hpa").sweep] + [("oracle", "")],
        ),
        (("keda",), True, [("keda", f"queue_target={v:g}") for v in (1, 2, 5, 10, 20, 40)]),
    ],
    ids=["one run per policy", "sweep: each knob value, oracle once", "keda queue targets"],
)
def test_plan(names, sweep_mode, expected):
    specs = sweep.plan(
        [TRACE], names, workload=WORKLOAD, config=ReplayConfig(), tuning=Tuning(), sweep=sweep_mode
    )
    assert [(s.policy, s.knob) for s in specs] == expected


def test_plan_orders_trace_then_policy():
    other = trace_from_arrays(np.array([0.0]), [1], [1], name="u")
    specs = sweep.plan(
        [TRACE, other],
        ("keda", "hpa"),
        workload=WORKLOAD,
        config=ReplayConfig(),
        tuning=Tuning(),
        sweep=False,
    )
    assert [s.label for s in specs] == ["t keda", "t hpa", "u keda", "u hpa"]


@pytest.mark.parametrize("name", policies.POLICIES)
def test_factory_builds_the_named_policy_with_a_fresh_object(name):
    first = policies.make_policy(name, WORKLOAD, Tuning())
    second = policies.make_policy(name, WORKLOAD, Tuning())
    assert first.name == name
    assert first.interval_seconds > 0
    assert first is not second


def test_gpufleet_sweep_point_sets_its_target_attainment():
    policy = policies.make_policy("gpufleet", WORKLOAD, Tuning(gpufleet_headroom=0.1))
    assert policy.settings.headroom == 0.1
    # Issue 17: the sweep varies the target attainment, which owns the headroom.
    policy = policies.make_policy("gpufleet", WORKLOAD, Tuning(), knob_value=0.999)
    assert policy.workload.target_attainment == 0.999
    assert policy.settings == knob.apply(GpufleetSettings(fill_nodes=True), 0.999)
    default = policies.make_policy("gpufleet", WORKLOAD, Tuning(gpufleet_target_attainment=0.99))
    assert default.settings == GpufleetSettings(fill_nodes=True)  # 99% is the defaults


@pytest.mark.parametrize(
    ("min_replica_count", "keda_min", "reaches_zero"),
    [(None, 1, False), (0, 0, True)],
    ids=["the workload's floor by default", "minReplicaCount 0 scales to zero"],
)
def test_keda_min_replica_count(min_replica_count, keda_min, reaches_zero):
    # Work for 10 s, then none: with minReplicaCount 0 KEDA deactivates after the
    # cooldown (300 s since the last active poll), and the run must let it (the engine
    # clamps every decision to the run's workload). Other policies keep the floor.
    trace = trace_from_arrays(
        np.arange(0.0, 10.0, 0.5), np.full(20, 100), np.full(20, 20), name="burst"
    )
    tuning = Tuning(keda_min_replica_count=min_replica_count)
    specs = sweep.plan(
        [trace], ["hpa", "keda"], workload=WORKLOAD, config=ReplayConfig(), tuning=tuning,
        sweep=False,
    )  # fmt: skip
    assert [s.workload.min_replicas for s in specs] == [1, keda_min]
    result = sweep.run(dataclasses.replace(specs[1], trace=_padded(trace, 900.0)))
    assert (min(d.desired for d in result.decisions) == 0) is reaches_zero


def _padded(trace, until):
    """The trace with one tiny request at `until`, so the run lasts that long."""
    return trace_from_arrays(
        np.append(trace.arrival_seconds, until),
        np.append(trace.prompt_tokens, 1),
        np.append(trace.output_tokens, 1),
        name=trace.name,
    )


@pytest.mark.parametrize(
    ("metric_type", "desired"),
    # Queue 25 on 2 ready replicas. AverageValue: 25 / (10 x 2) = 1.25 -> ceil(25/10) = 3.
    # Value: 25/10 = 2.5 -> ceil(2.5 x 2) = 5, capped at max(2 x 2, 4) = 4.
    [("AverageValue", 3), ("Value", 4)],
)
def test_keda_metric_type(metric_type, desired):
    policy = policies.make_policy("keda", WORKLOAD, Tuning(keda_metric_type=metric_type))
    replicas = tuple(
        Replica(name=f"r{i}", state=ReplicaState.READY, since=0, created=0) for i in range(2)
    )
    obs = Observation(now=0, queue_depth=Series((0,), (25.0,)), replicas=replicas)
    assert policy.decide(obs).desired == desired


@pytest.mark.parametrize(
    ("name", "message"),
    [("oracle", "policy 'oracle' has no knob"), ("vpa", "policy 'vpa' has no knob")],
    ids=["oracle has no knob", "unknown"],
)
def test_knob_errors(name, message):
    with pytest.raises(ValueError, match=message):
        policies.knob(name)


def test_warm_start_gives_each_trace_its_own_initial_replicas_for_every_policy():
    # 400 requests of 15k prompt tokens in the first second need many replicas at once;
    # the quiet trace needs only the floor. The busy trace's count must not leak into it.
    busy = trace_from_arrays(np.linspace(0, 1, 400), [15_000] * 400, [1] * 400, name="busy")
    specs = sweep.plan(
        [busy, TRACE],
        ("hpa", "oracle"),
        workload=WORKLOAD,
        config=ReplayConfig(),
        tuning=Tuning(),
        sweep=False,
        warm_start=True,
    )
    initial = [(s.trace.name, s.config.initial_replicas) for s in specs]
    assert initial[0] == initial[1] and initial[0][1] > 1
    assert initial[2:] == [("t", 1), ("t", 1)]


@pytest.mark.parametrize(
    ("front", "attainment", "expected"),
    [
        (pts((0.9, 10), (0.99, 20)), 0.9, 10.0),
        (pts((0.9, 10), (0.99, 20)), 0.8, 10.0),
        (pts((0.9, 10), (0.99, 20)), 0.945, 15.0),
        (pts((0.9, 10), (0.99, 20)), 0.99, 20.0),
        (pts((0.9, 10), (0.99, 20)), 0.995, None),
        ([], 0.5, None),
    ],
    ids=[
        "on a point",
        "below the cheapest point costs the cheapest",
        "halfway between two points is linear",
        "on the last point",
        "above the front is unreachable",
        "empty front reaches nothing",
    ],
)
def test_cost_at(front, attainment, expected):
    cost = sweep.cost_at(front, attainment)
    assert cost == (None if expected is None else pytest.approx(expected))


def test_savings_at_equal_attainment():
    ours = pts((0.9, 4), (0.945, 12), (0.999, 30))
    theirs = pts((0.9, 10), (0.99, 20))
    # Ours at 0.9 costs 4 where theirs costs 10; at 0.945 theirs interpolates to 15;
    # theirs never reaches 0.999, so that point has no comparison.
    assert [(s.ours.label, pytest.approx(s.gpu_hours)) for s in sweep.savings(ours, theirs)] == [
        ("p0", 6.0),
        ("p1", 3.0),
    ]


def test_inversions_name_a_higher_knob_that_costs_less_and_attains_less():
    points = [
        Point(0.90, 10.0, "a"),
        Point(0.95, 20.0, "b"),
        Point(0.93, 12.0, "c"),  # -40% cost, -2 points: inverted
        Point(0.94, 19.8, "d"),  # 1% cheaper than b: noise, not an inversion
        Point(0.96, 15.0, "e"),  # cheaper, but attains more than any below it
    ]
    found = sweep.inversions(points, cost_share=0.03, attainment_step=0.00005)
    assert [(i.point.label, i.best_below, i.most_below) for i in found] == [
        ("c", Point(0.95, 20.0, "b"), 20.0)
    ]
    assert sweep.inversions(points[:2], cost_share=0.03, attainment_step=0.00005) == ()


def test_a_paired_difference_is_judged_by_its_own_spread():
    # Two settings on the same three seeds: each mean has a spread of 0.1, but their
    # difference is nearly constant, so its standard error is small.
    mean, error = sweep.paired_difference([0.90, 0.80, 0.70], [0.91, 0.81, 0.72])
    assert mean == pytest.approx(-0.04 / 3)
    assert error == pytest.approx(math.sqrt((2 * (0.01 / 3) ** 2 + (0.02 / 3) ** 2) / 2 / 3))
    assert sweep.paired_difference([0.9], [0.8]) == (pytest.approx(0.1), None)
    assert sweep.seed_differences([0.9, 0.8], [0.8, 0.8]) == pytest.approx([0.1, 0.0])
    with pytest.raises(ValueError):
        sweep.paired_difference([0.9, 0.8], [0.8])
