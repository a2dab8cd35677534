"""The `hpa` policy: the Kubernetes HorizontalPodAutoscaler controller, reproduced as pure code.

It is the baseline the simulator measures our own policy against, so it must be the real
controller's arithmetic rather than a plausible imitation: the per-metric replica
calculator lives in `hpa.calc`, metric specs and their reading of an `Observation` in
`hpa.metrics`, stabilization and rate policies in `core.behavior`; this module runs one
controller sync and explains the result. No I/O, no clock, no logging: time is
`Observation.now`. `current_replicas` (starting + ready) stands for both
`scale.spec.replicas` and `scale.status.replicas`.
"""

from dataclasses import replace

from gpufleet.autoscaler.core.behavior import (
    DEFAULT_DOWNSCALE_STABILIZATION_SECONDS,
    Bounds,
    History,
    Normalized,
    limit_legacy,
    limit_with_behavior,
    record_initial,
    record_scale,
    stabilize,
    stabilize_legacy,
)
from gpufleet.autoscaler.core.hpa.calc import DEFAULT_TOLERANCE, Proposal, Tolerances, combine
from gpufleet.autoscaler.core.hpa.metrics import (
    ARRIVAL_RATE,
    IN_FLIGHT,
    PODS_ENGINE_ACTIVE,
    PODS_GPU_UTIL,
    QUEUE_DEPTH,
    AverageValue,
    Evaluated,
    MetricSource,
    MetricSpec,
    MetricTarget,
    Utilization,
    Value,
    evaluate,
)
from gpufleet.autoscaler.core.observation import Observation
from gpufleet.autoscaler.core.policy import Decision, Reason
from gpufleet.autoscaler.core.workload import (
    Behavior,
    WorkloadConfig,
    default_scale_down,
    default_scale_up,
)

__all__ = [
    "ARRIVAL_RATE",
    "DEFAULT_SYNC_PERIOD_SECONDS",
    "IN_FLIGHT",
    "PODS_ENGINE_ACTIVE",
    "PODS_GPU_UTIL",
    "QUEUE_DEPTH",
    "AverageValue",
    "HpaPolicy",
    "MetricSource",
    "MetricSpec",
    "MetricTarget",
    "Utilization",
    "Value",
    "field_hpa",
]

DEFAULT_SYNC_PERIOD_SECONDS = 15.0  # --horizontal-pod-autoscaler-sync-period


class HpaPolicy:
    """The HPA controller for one workload, synced every `interval_seconds`.

    Bounds come from the workload; behavior too, unless `without_behavior` models an HPA
    whose `spec.behavior` is unset (then the flag's downscale window and the legacy
    max(2 x current, 4) growth cap apply and no rate policies exist). `tolerance` is the
    controller flag; a ScalingRules.tolerance overrides it per direction. At 0 current
    replicas the controller does nothing unless `scale_to_zero` models the HPAScaleToZero
    gate, which lets min_replicas be 0 and External metrics bring the target back.
    """

    name = "hpa"
    __slots__ = (
        "_behavior",
        "_bounds",
        "_downscale_window_seconds",
        "_history",
        "_metrics",
        "_scale_to_zero",
        "_tolerance",
        "interval_seconds",
    )

    def __init__(
        self,
        workload: WorkloadConfig,
        metrics: tuple[MetricSpec, ...],
        *,
        sync_period_seconds: float = DEFAULT_SYNC_PERIOD_SECONDS,
        tolerance: float = DEFAULT_TOLERANCE,
        without_behavior: bool = False,
        downscale_stabilization_seconds: float = DEFAULT_DOWNSCALE_STABILIZATION_SECONDS,
        scale_to_zero: bool = False,
    ) -> None:
        if not metrics:
            raise ValueError("an HPA needs at least one metric")
        self.interval_seconds = sync_period_seconds
        self._metrics = metrics
        self._behavior: Behavior | None = None if without_behavior else workload.behavior
        # Without the gate the API rejects minReplicas 0, so the floor is 1.
        low = workload.min_replicas if scale_to_zero else max(1, workload.min_replicas)
        self._bounds = Bounds(low, workload.max_replicas)
        self._tolerance = tolerance
        self._downscale_window_seconds = downscale_stabilization_seconds
        self._scale_to_zero = scale_to_zero
        self._history = History()

    def _tolerances(self) -> Tolerances:
        if self._behavior is None:
            return Tolerances(self._tolerance, self._tolerance)
        down, up = self._behavior.scale_down.tolerance, self._behavior.scale_up.tolerance
        return Tolerances(
            self._tolerance if down is None else down, self._tolerance if up is None else up
        )

    def decide(self, obs: Observation) -> Decision:
        """One controller sync (`reconcileAutoscaler`) against `obs`."""
        now, current = obs.now, obs.current_replicas
        self._history = record_initial(self._history, now=now, current=current)
        low, high = self._bounds
        if current == 0 and not self._may_scale_from_zero():
            return Decision(
                desired=0,
                reason=Reason.STEADY,
                message="scaling disabled: the target has 0 replicas",
            )
        if current > high or current < low:
            desired = high if current > high else low
            side = f"above max {high}" if current > high else f"below min {low}"
            self._record_scale(now, current, desired)
            return Decision(
                desired=desired,
                reason=Reason.BOUNDED,
                message=f"current replicas {side}: {current} -> {desired}",
            )
        tol = self._tolerances()
        evaluated = [evaluate(spec, obs, current, tol) for spec in self._metrics]
        proposed = combine([e.outcome for e in evaluated], spec_replicas=current)
        described = self._describe_metrics(evaluated)
        if proposed is None:
            return Decision(
                desired=current,
                reason=Reason.MISSING_METRICS,
                message=f"{described}: holding {current}, no valid metric proposes a scale-up",
            )
        normalized = self._normalize(now, current, proposed)
        self._record_scale(now, current, normalized.replicas)
        return Decision(
            desired=normalized.replicas,
            reason=_reason(current, proposed, normalized, self._bounds),
            message=f"{described}: {current} -> {normalized.replicas}"
            + self._notes(current, proposed, normalized),
        )

    def _may_scale_from_zero(self) -> bool:
        has_external = any(not spec.source.per_pod for spec in self._metrics)
        return self._scale_to_zero and self._bounds.min_replicas == 0 and has_external

    def _describe_metrics(self, evaluated: list[Evaluated]) -> str:
        if len(evaluated) == 1:
            return evaluated[0].description
        parts = []
        for e in evaluated:
            proposal = f" -> {e.outcome.replicas}" if isinstance(e.outcome, Proposal) else ""
            parts.append(e.description + proposal)
        return "; ".join(parts)

    def _normalize(self, now: float, current: int, proposed: int) -> Normalized:
        if self._behavior is None:
            stabilized, self._history = stabilize_legacy(
                self._history,
                now=now,
                desired=proposed,
                window_seconds=self._downscale_window_seconds,
            )
            return limit_legacy(current=current, stabilized=stabilized, bounds=self._bounds)
        stabilized, self._history = stabilize(
            self._history, now=now, current=current, desired=proposed, behavior=self._behavior
        )
        return limit_with_behavior(
            self._history,
            now=now,
            current=current,
            stabilized=stabilized,
            behavior=self._behavior,
            bounds=self._bounds,
        )

    def _record_scale(self, now: float, previous: int, new: int) -> None:
        # The controller keeps scale events only for HPAs with a behavior (rate policies).
        if self._behavior is not None:
            self._history = record_scale(
                self._history, now=now, previous=previous, new=new, behavior=self._behavior
            )

    def _notes(self, current: int, proposed: int, n: Normalized) -> str:
        notes = []
        if _window_mattered(proposed, n, self._bounds):
            direction = "down" if proposed < n.stabilized else "up"
            window = self._window(direction)
            notes.append(f"recommendation {proposed} held at {n.stabilized} by the {window}")
        if n.limit is not None:
            direction = "up" if n.stabilized > current else "down"
            notes.append(f"scale-{direction} limited to {n.limit} by {n.limit_note}")
        low, high = self._bounds
        if n.limited_by == "bounds" or not low <= proposed <= high:
            notes.append(f"bounded to [{low}, {high}]")
        return "".join(f"; {note}" for note in notes)

    def _window(self, direction: str) -> str:
        if self._behavior is None:
            return f"{self._downscale_window_seconds:g}s downscale stabilization window"
        rules = self._behavior.scale_up if direction == "up" else self._behavior.scale_down
        return f"{rules.stabilization_window_seconds:g}s scale-{direction} window"


def _clamp(replicas: int, bounds: Bounds) -> int:
    return max(bounds.min_replicas, min(bounds.max_replicas, replicas))


def _window_mattered(proposed: int, n: Normalized, bounds: Bounds) -> bool:
    # A window that only moved a recommendation the bounds would clip anyway (a raw 0
    # held at the floor of 1) is not why the count is what it is.
    return _clamp(n.stabilized, bounds) != _clamp(proposed, bounds)


def _reason(current: int, proposed: int, n: Normalized, bounds: Bounds) -> Reason:
    """The stage that bound the result: rate policy, then window, then bounds."""
    if n.limited_by == "rate":
        return Reason.RATE_LIMITED
    if _window_mattered(proposed, n, bounds):
        return Reason.STABILIZED
    if n.limited_by == "bounds" or _clamp(proposed, bounds) != proposed:
        return Reason.BOUNDED
    if n.replicas > current:
        return Reason.SCALE_UP
    if n.replicas < current:
        return Reason.SCALE_DOWN
    return Reason.STEADY


def field_hpa(
    workload: WorkloadConfig,
    *,
    target_util: float = 70.0,
    scale_up_window_s: float = 60,
    scale_down_window_s: float = 300,
    behavior: Behavior | None = None,
) -> HpaPolicy:
    """An HPA as teams deploy it on GPUs: average DCGM GPU util as a Pods metric.

    Default rate policies, with the given stabilization windows (a short scale-up window
    is common practice to ride out single-scrape spikes), unless `behavior` is given: an
    operator's own, which wins.
    """
    behavior = behavior or Behavior(
        scale_up=replace(default_scale_up(), stabilization_window_seconds=scale_up_window_s),
        scale_down=replace(default_scale_down(), stabilization_window_seconds=scale_down_window_s),
    )
    spec = MetricSpec(source=PODS_GPU_UTIL, target=AverageValue(target_util))
    return HpaPolicy(replace(workload, behavior=behavior), (spec,))
