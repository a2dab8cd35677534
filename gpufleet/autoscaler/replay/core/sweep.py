"""Sweeps: each policy's main knob over its range, and the Pareto fronts that result.

A single run compares policies at one setting each, which flatters whichever baseline
setting happens to suit the trace. A sweep traces each policy's whole cost/quality curve:
the Pareto front of (SLO attainment up, billed GPU-hours down) over its knob's values. One
front dominates another when every point of the other is matched or beaten on both axes.

Pure: `plan` lists the runs, `run` runs one (in whichever process calls it; `replay.main`
fans them out), `pareto_front` and `dominates` are arithmetic on points.
"""

import dataclasses
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from gpufleet.autoscaler.core import factory as policies
from gpufleet.autoscaler.core.factory import Tuning
from gpufleet.autoscaler.core.workload import WorkloadConfig
from gpufleet.autoscaler.replay.core.model import ReplayConfig
from gpufleet.autoscaler.replay.core.result import RunResult

if TYPE_CHECKING:  # the sweep only passes these values along
    from gpufleet.autoscaler.core.policy import Policy
    from gpufleet.autoscaler.replay.core.trace import Trace


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RunSpec:
    """One simulator run: a trace, a policy and, for a sweep point, its knob's value."""

    trace: "Trace"
    policy: str
    workload: WorkloadConfig
    config: ReplayConfig
    tuning: Tuning = dataclasses.field(default_factory=Tuning)
    knob_value: float | None = None  # None: the policy's value from `tuning`

    @property
    def label(self) -> str:
        """`trace policy [knob=value]`, for progress lines."""
        knob = "" if self.knob_value is None else " " + self.knob
        return f"{self.trace.name} {self.policy}{knob}"

    @property
    def knob(self) -> str:
        if self.knob_value is None:
            return ""
        return policies.knob_label(self.policy, self.knob_value)


def plan(
    traces: Sequence["Trace"],
    names: Sequence[str],
    *,
    workload: WorkloadConfig,
    config: ReplayConfig,
    tuning: Tuning,
    sweep: bool,
    warm_start: bool = False,
) -> list[RunSpec]:
    """The runs, trace by trace in the order given, then policy by policy, knob ascending.

    Without `sweep`, one run per (trace, policy). With it, one per knob value; the oracle
    has no knob and stays a single point, the bound every front is measured against.
    `warm_start` starts each trace's runs with the replicas its first minutes need
    (`oracle.warm_start_replicas`), the same for every policy.
    """
    from gpufleet.autoscaler.replay.core.oracle import warm_start_replicas

    specs = []
    for trace in traces:
        trace_config = config
        if warm_start:
            initial = warm_start_replicas(trace, workload=workload, config=config)
            trace_config = dataclasses.replace(
                config, initial_replicas=max(initial, config.initial_replicas)
            )
        for name in names:
            values: Sequence[float | None] = [None]
            if sweep and name != policies.ORACLE:
                values = policies.knob(name).sweep
            specs += [
                RunSpec(
                    trace=trace,
                    policy=name,
                    workload=policies.run_workload(name, workload, tuning),
                    config=trace_config,
                    tuning=tuning,
                    knob_value=value,
                )
                for value in values
            ]
    return specs


def run(
    spec: RunSpec,
    progress: Callable[[float], None] | None = None,
    *,
    policy: "Policy | None" = None,
) -> RunResult:
    """Run one spec to its result; the result's `knob` names the sweep point, if any.
    `policy`: the policy object to run instead of the one the spec names (a bench that
    changes its settings). SimulationError names the run (`RunSpec.label`)."""
    # Imported here so that the sweep's arithmetic loads without the engine.
    from gpufleet.autoscaler.replay.core.engine import SimulationError, simulate

    if spec.policy == policies.ORACLE:
        from gpufleet.autoscaler.replay.core.oracle import run_oracle

        return run_oracle(spec.trace, workload=spec.workload, config=spec.config, progress=progress)
    if policy is None:
        policy = policies.make_policy(
            spec.policy, spec.workload, spec.tuning, knob_value=spec.knob_value
        )
    try:
        result = simulate(
            spec.trace, policy, workload=spec.workload, config=spec.config, progress=progress
        )
    except SimulationError as exc:  # named, so that the run can be repeated on its own
        raise SimulationError(f"{spec.label}: {exc}") from None
    # The policy object's own name may differ from the name it was asked for by.
    return dataclasses.replace(result, policy=spec.policy, knob=spec.knob)


class Point(NamedTuple):
    attainment: float  # fraction of requests within the TTFT SLO
    gpu_hours: float  # billed node GPU-hours
    label: str = ""


def point(result: RunResult) -> Point:
    return Point(result.slo_attainment, result.node_gpu_hours, result.knob)


def pareto_front(points: Iterable[Point]) -> tuple[Point, ...]:
    """The points no other point beats: none has >= attainment at <= GPU-hours, better in one.

    Ordered by GPU-hours, so attainment rises along the front. Of equal points the first
    given is kept.
    """
    front: list[Point] = []
    ordered = sorted(enumerate(points), key=lambda ip: (ip[1].gpu_hours, -ip[1].attainment, ip[0]))
    for _, p in ordered:
        if not front or p.attainment > front[-1].attainment:
            front.append(p)
    return tuple(front)


def uncovered(front_a: Sequence[Point], front_b: Sequence[Point]) -> tuple[Point, ...]:
    """The points of `front_b` that no point of `front_a` matches or beats on both axes."""
    return tuple(b for b in front_b if not any(matches(a, b) for a in front_a))


def matches(a: Point, b: Point) -> bool:
    """Whether `a` matches or beats `b` on both axes."""
    return a.attainment >= b.attainment and a.gpu_hours <= b.gpu_hours


def nearest(front: Sequence[Point], target: Point) -> tuple[Point | None, Point | None]:
    """The points of `front` that come nearest to matching `target`, one per axis: the most
    attaining at no more than its cost, and the cheapest at no less than its attainment
    (None where `front` has none)."""
    cheap = [p for p in front if p.gpu_hours <= target.gpu_hours]
    high = [p for p in front if p.attainment >= target.attainment]
    return (
        max(cheap, key=lambda p: p.attainment) if cheap else None,
        min(high, key=lambda p: p.gpu_hours) if high else None,
    )


def matching_seeds(candidates: Sequence[Sequence[Point]], target: Sequence[Point]) -> list[int]:
    """The seeds (indices) on which some candidate matches or beats `target` on both axes:
    each candidate and `target` given per seed, in one seed order. A front judged on means
    can miss a point that it matches on some seeds; where it does, the gap is within the
    seeds' spread, and where it misses on every seed, it is not."""
    return [i for i, t in enumerate(target) if any(matches(c[i], t) for c in candidates)]


def dominates(front_a: Sequence[Point], front_b: Sequence[Point]) -> bool:
    """For every point of b, some point of a with >= attainment and <= GPU-hours.

    Vacuously true for an empty b; an empty a dominates nothing else.
    """
    return not uncovered(front_a, front_b)


def cost_at(front: Sequence[Point], attainment: float) -> float | None:
    """The GPU-hours `front` needs to reach `attainment`, or None when no point reaches it.

    `front` as `pareto_front` orders it (attainment strictly rising). Linear between the
    two front points around `attainment` (the straight line between two measured settings,
    not a measured one); the cheapest point's cost below its attainment, since no knob
    value of the sweep is cheaper.
    """
    for i, p in enumerate(front):
        if p.attainment >= attainment:
            if i == 0:
                return p.gpu_hours
            low = front[i - 1]
            share = (attainment - low.attainment) / (p.attainment - low.attainment)
            return low.gpu_hours + share * (p.gpu_hours - low.gpu_hours)
    return None


class Inversion(NamedTuple):
    """A point of a sweep that attains less than a lower knob value did, for less."""

    point: Point
    best_below: Point  # the lower knob value that attained the most (the first, if tied)
    most_below: float  # the most GPU-hours of the lower knob values


def inversions(
    points: Sequence[Point], *, cost_share: float, attainment_step: float
) -> tuple[Inversion, ...]:
    """The points of one sweep, given in the order of a knob that buys more as it grows,
    that cost more than `cost_share` less than some lower knob value did and attain more
    than `attainment_step` less than the best lower one did: where raising the knob
    pays less and loses requests (issue 17 asks for a knob that buys monotonically)."""
    out = []
    best, most = Point(-math.inf, 0.0, ""), 0.0
    for p in points:
        if (
            p.gpu_hours < most * (1.0 - cost_share)
            and p.attainment < best.attainment - attainment_step
        ):
            out.append(Inversion(p, best, most))
        best, most = max(best, p, key=lambda q: q.attainment), max(most, p.gpu_hours)
    return tuple(out)


def seed_differences(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """a - b, seed by seed (`a` and `b` in one seed order; ValueError if their lengths
    differ)."""
    return [x - y for x, y in zip(a, b, strict=True)]


def paired_difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float | None]:
    """The mean of a - b, seed by seed (`seed_differences`), and its standard error (None
    for one seed). Two settings run on the same seeds see the same traffic, so their
    difference is judged against its own spread, not each mean's."""
    diffs = seed_differences(a, b)
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return mean, None
    return mean, statistics.stdev(diffs, mean) / math.sqrt(len(diffs))


class Saving(NamedTuple):
    """One point of front a against front b at a's attainment."""

    ours: Point
    theirs_gpu_hours: float  # `cost_at(front_b, ours.attainment)`

    @property
    def gpu_hours(self) -> float:
        """GPU-hours a saves at equal attainment; negative where a costs more."""
        return self.theirs_gpu_hours - self.ours.gpu_hours


def savings(front_a: Sequence[Point], front_b: Sequence[Point]) -> tuple[Saving, ...]:
    """Each point of `front_a` that `front_b` reaches, with b's cost at its attainment."""
    out = []
    for p in front_a:
        cost = cost_at(front_b, p.attainment)
        if cost is not None:
            out.append(Saving(p, cost))
    return tuple(out)


def fronts(results: Iterable[RunResult]) -> dict[tuple[str, str], tuple[Point, ...]]:
    """Each (trace, policy)'s Pareto front, in the order the pairs first appear."""
    points: dict[tuple[str, str], list[Point]] = {}
    for result in results:
        points.setdefault((result.trace, result.policy), []).append(point(result))
    return {key: pareto_front(ps) for key, ps in points.items()}
