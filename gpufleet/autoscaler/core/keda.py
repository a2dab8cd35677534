"""The `keda` policy: a KEDA ScaledObject with one queue-length trigger, reproduced as pure code.

KEDA splits the job in two, and so does this policy. KEDA's own loop polls the trigger
every `pollingInterval` and owns activation: 0 -> 1 when the value is above
`activationThreshold`, 1 -> 0 once `cooldownPeriod` has passed since the trigger was last
active (and only when minReplicaCount is 0, or to `idleReplicaCount` when that is set).
Between 1 and N, the HPA that KEDA creates does the scaling on its own 15 s sync, with the
trigger as an External metric of the trigger's `metricType` (`AverageValue`, KEDA's
default, or `Value`); that part is `HpaPolicy`, unchanged. No I/O, no clock: time is
`Observation.now`. Facts from KEDA's `pkg/scaling/executor/scale_scaledobjects.go`
(`RequestScale`) and `pkg/fallback/fallback.go` (`keda_fallback`).

Missing data: the Prometheus scaler's `ignoreNullValues` defaults to true, turning an empty
or NaN result into 0. KEDA serves that 0 to the HPA too, so the HPA never sees a failed
metric and its own missing-metric hold does not apply: a gap reads as an empty queue on
both paths (the HPA's 300 s downscale window still damps it). With `ignore_null_values`
False a gap is a trigger error instead: KEDA changes nothing, and the HPA holds, unless
a `fallback` is set: once more reads in a row have failed than its `failureThreshold`,
KEDA serves the HPA a value standing for the fallback replicas and counts the trigger
active (`keda_fallback` says how). A fallback with 0 replicas lets an erroring, inactive
trigger scale to zero after the cooldown; any other keeps the count where it is.
"""

import math
from dataclasses import replace
from enum import StrEnum

from gpufleet.autoscaler.core.hpa.policy import (
    DEFAULT_SYNC_PERIOD_SECONDS,
    QUEUE_DEPTH,
    AverageValue,
    HpaPolicy,
    MetricSpec,
    Value,
)
from gpufleet.autoscaler.core.keda_fallback import Fallback, fallback_value
from gpufleet.autoscaler.core.observation import Observation, ReplicaState, Series
from gpufleet.autoscaler.core.policy import Decision, Reason
from gpufleet.autoscaler.core.workload import Behavior, WorkloadConfig

DEFAULT_POLLING_INTERVAL_SECONDS = 30.0
DEFAULT_COOLDOWN_SECONDS = 300.0
DEFAULT_QUEUE_TARGET = 10.0  # a common per-replica waiting-requests target for vLLM
_EPSILON_SECONDS = 1e-9  # float slack when a poll falls due exactly on a sync tick


class MetricType(StrEnum):
    """A trigger's `metricType`: the External metric target type KEDA gives the HPA."""

    AVERAGE_VALUE = "AverageValue"  # value / replicas against the target (KEDA's default)
    VALUE = "Value"  # the value itself against the target, scaling the ready pods


class KedaPolicy:
    """KEDA's scale loop plus the HPA it manages, for one workload.

    Replica bounds come from the workload (KEDA's own defaults are min 0, max 100; the
    simulator passes the workload's so every policy runs under the same bounds). The
    managed HPA gets min max(1, min_replicas), as KEDA sets it; `idle_replica_count` must be
    below that, as KEDA's webhook requires (KEDA documents 0 as the only value that works:
    the HPA raises any other back to its min). `hpa_behavior` None models
    a ScaledObject without `advanced.horizontalPodAutoscalerConfig.behavior`: KEDA then
    leaves the HPA's behavior unset, so the controller's legacy normalization applies.

    `decide` runs every HPA sync (`interval_seconds`); KEDA's poll runs on the first call
    and then on the first sync at or after each `polling_interval_seconds` step.
    """

    name = "keda"
    __slots__ = (
        "_activation_threshold",
        "_active_at_start",
        "_cooldown_seconds",
        "_created_at",
        "_failures",
        "_fallback",
        "_hpa",
        "_idle_replica_count",
        "_ignore_null_values",
        "_initial_cooldown_seconds",
        "_last_active_at",
        "_metric_type",
        "_next_poll_at",
        "_polling_interval_seconds",
        "_queue_target",
        "_workload",
        "interval_seconds",
    )

    def __init__(
        self,
        workload: WorkloadConfig,
        *,
        queue_target: float = DEFAULT_QUEUE_TARGET,
        activation_threshold: float = 0.0,
        polling_interval_seconds: float = DEFAULT_POLLING_INTERVAL_SECONDS,
        cooldown_seconds: float = DEFAULT_COOLDOWN_SECONDS,
        initial_cooldown_seconds: float = 0.0,
        ignore_null_values: bool = True,
        hpa_behavior: Behavior | None = None,
        hpa_sync_period_seconds: float = DEFAULT_SYNC_PERIOD_SECONDS,
        metric_type: MetricType = MetricType.AVERAGE_VALUE,
        fallback: Fallback | None = None,
        idle_replica_count: int | None = None,
        active_at_start: bool = False,
    ) -> None:
        if polling_interval_seconds <= 0:
            raise ValueError("polling_interval_seconds must be positive")
        hpa_min = max(1, workload.min_replicas)
        if idle_replica_count is not None and not 0 <= idle_replica_count < hpa_min:
            # KEDA's ValidateMinReplicasAndIdleReplicas text.
            raise ValueError(
                f"IdleReplicaCount={idle_replica_count} must be less than MinReplicaCount={hpa_min}"
            )
        self.interval_seconds = hpa_sync_period_seconds
        self._workload = workload
        self._queue_target = queue_target
        self._activation_threshold = activation_threshold
        self._polling_interval_seconds = polling_interval_seconds
        self._cooldown_seconds = cooldown_seconds
        self._initial_cooldown_seconds = initial_cooldown_seconds
        self._ignore_null_values = ignore_null_values
        self._metric_type = metric_type
        self._fallback = fallback
        self._idle_replica_count = idle_replica_count
        self._failures = 0  # consecutive failed reads of the trigger (KEDA's health status)
        target = (
            AverageValue(queue_target)
            if metric_type is MetricType.AVERAGE_VALUE
            else Value(queue_target)
        )
        hpa_workload = replace(
            workload,
            min_replicas=hpa_min,
            behavior=hpa_behavior if hpa_behavior is not None else workload.behavior,
        )
        self._hpa = HpaPolicy(
            hpa_workload,
            (MetricSpec(source=QUEUE_DEPTH, target=target),),
            sync_period_seconds=hpa_sync_period_seconds,
            without_behavior=hpa_behavior is None,
        )
        self._next_poll_at: float | None = None
        self._created_at: float | None = None
        self._last_active_at: float | None = None
        # The ScaledObject was serving before its first decision (the replay's warm start):
        # its lastActiveTime is then, not unset, so the cooldown runs from there; unset,
        # KEDA scales an inactive target to zero after initialCooldownPeriod (default 0).
        self._active_at_start = active_at_start

    def decide(self, obs: Observation) -> Decision:
        """One HPA sync, preceded by KEDA's poll when one is due; KEDA's write wins."""
        if self._created_at is None:
            self._created_at = obs.now
            if self._active_at_start:
                self._last_active_at = obs.now
        value = self._trigger_value(obs)
        # The HPA syncs on its own schedule against the current scale, as in a cluster,
        # reading the trigger through KEDA's metrics server: one read, fallback applied.
        served, _ = self._read(obs, value)
        hpa = self._hpa.decide(self._hpa_view(obs, served))
        if self._poll_due(obs.now):
            polled, fallback_active = self._read(obs, value)  # the poll is a read of its own
            keda = self._poll(obs, polled, fallback_active=fallback_active)
            if keda is not None:
                return keda
        if obs.current_replicas == 0:
            return Decision(desired=0, reason=Reason.STEADY, message=self._idle_message(value))
        if self._cooling_down(value):
            resume = self._last_active_at + self._cooldown_seconds  # type: ignore[operator]
            return replace(hpa, message=f"{hpa.message}; KEDA inactive, 1 -> 0 from {resume:g}s")
        return hpa

    def _cooling_down(self, value: float | None) -> bool:
        return (
            value is not None
            and value <= self._activation_threshold
            and self._scales_in()
            and self._last_active_at is not None
        )

    def _scales_in(self) -> bool:
        """Whether KEDA itself takes an inactive target below the HPA's min."""
        return self._idle_replica_count is not None or self._workload.min_replicas == 0

    def _read(self, obs: Observation, value: float | None) -> tuple[float | None, bool]:
        """One read of the trigger as KEDA serves it: (value or None for an error, whether
        it is the fallback's). Counts failures and resets them, as KEDA's health status."""
        if value is not None:
            self._failures = 0
            return value, False
        if self._fallback is None:
            return None, False
        self._failures += 1
        if not self._fallback.exceeded(self._failures):
            return None, False
        ready = sum(1 for r in obs.replicas if r.state is ReplicaState.READY)
        served = fallback_value(
            self._fallback,
            target=self._queue_target,
            per_replica=self._metric_type is MetricType.AVERAGE_VALUE,
            current_replicas=obs.current_replicas,
            ready_replicas=ready,
        )
        return served, served is not None

    def _trigger_value(self, obs: Observation) -> float | None:
        """What the scaler returns: None only for an error (a gap with ignoreNullValues off)."""
        latest = obs.queue_depth.latest()
        if latest is not None and math.isfinite(latest):
            return latest
        return 0.0 if self._ignore_null_values else None

    def _hpa_view(self, obs: Observation, value: float | None) -> Observation:
        # KEDA's metrics server hands the HPA the scaler's value, nulls already zeroed or
        # the fallback's value; an error stays one.
        if value is None:
            return replace(obs, queue_depth=Series())
        if obs.queue_depth.latest() == value:
            return obs
        return replace(obs, queue_depth=Series((obs.now,), (value,)))

    def _poll_due(self, now: float) -> bool:
        soonest = now + self._polling_interval_seconds
        if self._next_poll_at is not None and self._next_poll_at > soonest + _EPSILON_SECONDS:
            # set before the loop's time went back (a live controller's clock found ahead
            # of Prometheus'): never more than an interval off
            self._next_poll_at = soonest
        if self._next_poll_at is not None and now < self._next_poll_at - _EPSILON_SECONDS:
            return False
        due = now if self._next_poll_at is None else self._next_poll_at
        while due <= now + _EPSILON_SECONDS:
            due += self._polling_interval_seconds
        self._next_poll_at = due
        return True

    def _poll(
        self, obs: Observation, value: float | None, *, fallback_active: bool
    ) -> Decision | None:
        """`RequestScale`: KEDA's own write for this poll, or None when it leaves it to the HPA.

        `value` None is a trigger error; a trigger on its fallback counts as active.
        """
        now, current = obs.now, obs.current_replicas
        minimum, idle = self._workload.min_replicas, self._idle_replica_count
        threshold = self._activation_threshold
        if fallback_active or (value is not None and value > threshold):
            self._last_active_at = now
            if current == 0 or (idle is not None and current < minimum):
                desired = minimum if minimum > 0 else 1
                why = (
                    "queue_depth failing, fallback active"
                    if fallback_active
                    else f"queue_depth {value:.1f} > activation {threshold:g}"
                )
                return Decision(
                    desired=desired,
                    reason=Reason.ACTIVATE,
                    message=f"{why}: {current} -> {desired}",
                )
            return None
        if value is None and (self._fallback is None or self._fallback.replicas != 0):
            return None  # trigger error: KEDA only sets a condition (or waits for fallback)
        floor = minimum if idle is None else idle
        if (idle is not None and current > idle) or (current > 0 and minimum == 0):
            if not self._cooled_down(now):
                return None
            since = "creation" if self._last_active_at is None else "last active"
            shown = "failing" if value is None else f"{value:.1f}"
            return Decision(
                desired=floor,
                reason=Reason.DEACTIVATE,
                message=f"queue_depth {shown} <= activation {threshold:g} and cooldown"
                f" passed since {since}: {current} -> {floor}",
            )
        if idle is None and current < minimum:
            return Decision(
                desired=minimum,
                reason=Reason.BOUNDED,
                message=f"inactive below minReplicaCount: {current} -> {minimum}",
            )
        return None

    def _cooled_down(self, now: float) -> bool:
        # KEDA compares with Before(now) on second-truncated timestamps, so a poll landing
        # exactly on the boundary scales down in a real cluster; `>=` reproduces that.
        if self._last_active_at is None:
            created = now if self._created_at is None else self._created_at
            return now - created >= self._initial_cooldown_seconds
        return now - self._last_active_at >= self._cooldown_seconds

    def _idle_message(self, value: float | None) -> str:
        if value is None:
            return "idle at 0 replicas: queue_depth unavailable (trigger error)"
        if value > self._activation_threshold:
            return (
                f"idle at 0 replicas: queue_depth {value:.1f} > activation"
                f" {self._activation_threshold:g}, waiting for the KEDA poll at"
                f" {self._next_poll_at:g}s"
            )
        return (
            f"idle at 0 replicas: queue_depth {value:.1f} <= activation"
            f" {self._activation_threshold:g}"
        )


def field_keda(
    workload: WorkloadConfig,
    *,
    queue_target: float = DEFAULT_QUEUE_TARGET,
    polling_interval_s: float = DEFAULT_POLLING_INTERVAL_SECONDS,
    metric_type: MetricType = MetricType.AVERAGE_VALUE,
    cooldown_seconds: float | None = None,
    active_at_start: bool = False,
) -> KedaPolicy:
    """KEDA as typically deployed for vLLM: Prometheus trigger on waiting requests, defaults
    (`cooldown_seconds` None: KEDA's cooldownPeriod default)."""
    return KedaPolicy(
        workload,
        queue_target=queue_target,
        polling_interval_seconds=polling_interval_s,
        metric_type=metric_type,
        cooldown_seconds=DEFAULT_COOLDOWN_SECONDS if cooldown_seconds is None else cooldown_seconds,
        active_at_start=active_at_start,
    )
