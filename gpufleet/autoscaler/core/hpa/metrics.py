"""HPA metric specs and how each reads its value out of an `Observation`.

Pure. Each `MetricSpec` is one entry of an HPA's `spec.metrics`; `evaluate` turns it into
the replica calculator's inputs and returns the proposal with an operator-readable
sentence. An empty `Series`, a NaN, or a ready pod without telemetry is a missing metric.

Mapping onto the controller's view of pods: a READY replica is a Running, Ready pod; a
STARTING replica with telemetry is a Running pod not yet Ready (a vLLM pod loading its
weights: the GPU exporter already reports it), whose value a Pods metric counts like any
other, since `groupPods` sets pods aside as unready only for CPU; a STARTING replica without
telemetry is a Pending pod (excluded from the average, idle on a scale-up); a TERMINATING
one has a deletion timestamp and is ignored. Telemetry for pods that are not
in `Observation.replicas` is ignored (the controller only reads pods its selector lists).
"""

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from gpufleet.autoscaler.core.hpa.calc import (
    Outcome,
    Proposal,
    Tolerances,
    Unavailable,
    average_value_replicas,
    pods_average_value_replicas,
    pods_utilization_replicas,
    value_replicas,
)
from gpufleet.autoscaler.core.observation import Observation, ReplicaState, Series


class MetricSource(StrEnum):
    """Where a metric's value comes from in the `Observation`."""

    PODS_GPU_UTIL = "gpu_util"  # Pods metric: PodTelemetry.gpu_util_percent
    PODS_ENGINE_ACTIVE = "gr_engine_active"  # Pods metric: PodTelemetry.gr_engine_active_ratio
    QUEUE_DEPTH = "queue_depth"  # External metric: latest Observation.queue_depth
    ARRIVAL_RATE = "arrival_rate"  # External metric: latest Observation.arrival_rate
    IN_FLIGHT = "in_flight"  # External metric: latest Observation.in_flight

    @property
    def per_pod(self) -> bool:
        return self in (MetricSource.PODS_GPU_UTIL, MetricSource.PODS_ENGINE_ACTIVE)


PODS_GPU_UTIL = MetricSource.PODS_GPU_UTIL
PODS_ENGINE_ACTIVE = MetricSource.PODS_ENGINE_ACTIVE
QUEUE_DEPTH = MetricSource.QUEUE_DEPTH
ARRIVAL_RATE = MetricSource.ARRIVAL_RATE
IN_FLIGHT = MetricSource.IN_FLIGHT

_POD_FIELDS = {PODS_GPU_UTIL: "gpu_util_percent", PODS_ENGINE_ACTIVE: "gr_engine_active_ratio"}


class AverageValue(NamedTuple):
    """Per-pod average (Pods) or total per replica (External) the HPA aims for."""

    value: float


class Value(NamedTuple):
    """Total the HPA aims for across the ready pods (External/Object only)."""

    value: float


class Utilization(NamedTuple):
    """Resource-style target in whole percent of request (Pods sources only)."""

    percent: int


MetricTarget = AverageValue | Value | Utilization


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricSpec:
    """One entry of `spec.metrics`: a source signal and a target type."""

    source: MetricSource
    target: MetricTarget

    def __post_init__(self) -> None:
        allowed = (AverageValue, Utilization) if self.source.per_pod else (AverageValue, Value)
        if not isinstance(self.target, allowed):
            kind = "per-pod" if self.source.per_pod else "external"
            raise ValueError(f"{type(self.target).__name__} is not a {kind} target ({self.source})")
        if self.target[0] <= 0:
            raise ValueError(f"metric target must be positive, got {self.target}")


class Evaluated(NamedTuple):
    """One metric's outcome and the sentence that explains it."""

    outcome: Outcome
    description: str


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _pod_values(obs: Observation, source: MetricSource) -> tuple[list[float | None], int]:
    """Running pods' samples (None = missing), unready ones included, and the number of
    pending pods."""
    field = _POD_FIELDS[source]
    telemetry = {t.pod: t for t in obs.pods}
    values: list[float | None] = []
    pending = 0
    for replica in obs.replicas:
        sample = telemetry.get(replica.name)
        if replica.state is ReplicaState.STARTING and sample is None:
            pending += 1
        elif replica.state in (ReplicaState.READY, ReplicaState.STARTING):
            values.append(None if sample is None else _finite(getattr(sample, field)))
    return values, pending


def _external_total(obs: Observation, source: MetricSource) -> float | None:
    series: Series = getattr(obs, source.value)
    return _finite(series.latest())


def _describe_pods(
    spec: MetricSpec, outcome: Proposal, values: list[float | None], pending: int
) -> str:
    with_metrics = sum(1 for v in values if v is not None)
    if isinstance(spec.target, Utilization):
        text = (
            f"{spec.source} {outcome.usage:.0f}% over {with_metrics} pods"
            f" vs target {spec.target.percent}% (ratio {outcome.ratio:.2f})"
        )
    else:
        text = (
            f"{spec.source} avg {outcome.usage:.1f} over {with_metrics} pods"
            f" vs target {spec.target.value:g} (ratio {outcome.ratio:.2f})"
        )
    missing = len(values) - with_metrics
    if missing or pending:
        text += f", {missing} without metrics, {pending} starting"
    if outcome.recomputed_ratio is not None:
        text += f", ratio with those counted {outcome.recomputed_ratio:.2f}"
    return text


def _evaluate_pods(spec: MetricSpec, obs: Observation, current: int, tol: Tolerances) -> Evaluated:
    values, pending = _pod_values(obs, spec.source)
    if isinstance(spec.target, Utilization):
        outcome = pods_utilization_replicas(
            current_replicas=current,
            values_percent=values,
            pending_pods=pending,
            target_percent=spec.target.percent,
            tolerances=tol,
        )
    else:
        outcome = pods_average_value_replicas(
            current_replicas=current,
            values=values,
            pending_pods=pending,
            target=spec.target.value,
            tolerances=tol,
        )
    if isinstance(outcome, Unavailable):
        return Evaluated(outcome, f"{spec.source} unavailable ({outcome.detail})")
    return Evaluated(outcome, _describe_pods(spec, outcome, values, pending))


def _evaluate_external(
    spec: MetricSpec, obs: Observation, current: int, tol: Tolerances
) -> Evaluated:
    total = _external_total(obs, spec.source)
    if total is None:
        return Evaluated(Unavailable("no sample"), f"{spec.source} unavailable (no sample)")
    target = float(spec.target[0])  # AverageValue or Value: validated in MetricSpec
    if isinstance(spec.target, Value):
        ready = obs.count(ReplicaState.READY)
        outcome = value_replicas(
            current_replicas=current, ready_pods=ready, total=total, target=target, tolerances=tol
        )
        text = (
            f"{spec.source} {outcome.usage:.1f} vs target {target:g}"
            f" (ratio {outcome.ratio:.2f}) over {ready} ready"
        )
        return Evaluated(outcome, text)
    outcome = average_value_replicas(
        status_replicas=current, total=total, target=target, tolerances=tol
    )
    text = (
        f"{spec.source} {outcome.usage:.1f} vs {target:g} per replica over {current}"
        f" (ratio {outcome.ratio:.2f})"
    )
    return Evaluated(outcome, text)


def evaluate(spec: MetricSpec, obs: Observation, current: int, tol: Tolerances) -> Evaluated:
    """One `computeReplicasForMetric` call: the spec's proposal against `obs`."""
    if spec.source.per_pod:
        return _evaluate_pods(spec, obs, current, tol)
    return _evaluate_external(spec, obs, current, tol)
