"""The `keda` policy: a KEDA ScaledObject with one queue-length trigger, reproduced as pure code.

KEDA splits the job in two, and so does this policy. KEDA's own loop polls the trigger
every `pollingInterval` and owns activation: 0 -> 1 when the value is above
`activationThreshold`, 1 -> 0 once `cooldownPeriod` has passed since the trigger was last
active (and only when minReplicaCount is 0). Between 1 and N, the HPA that KEDA creates
does the scaling on its own 15 s sync, with the trigger as an External `AverageValue`
metric; that part is `HpaPolicy`, unchanged. No I/O, no clock: time is `Observation.now`.

Missing data: the Prometheus scaler's `ignoreNullValues` defaults to true, turning an empty
or NaN result into 0. KEDA serves that 0 to the HPA too, so the HPA never sees a failed
metric and its own missing-metric hold does not apply: a gap reads as an empty queue on
both paths (the HPA's 300 s downscale window still damps it). With `ignore_null_values`
False a gap is a trigger error instead: KEDA changes nothing, and the HPA holds.
"""

import math
from dataclasses import replace

from gpufleet.autoscaler.core.hpa.policy import (
    DEFAULT_SYNC_PERIOD_SECONDS,
    QUEUE_DEPTH,
    AverageValue,
    HpaPolicy,
    MetricSpec,
)
from gpufleet.autoscaler.core.observation import Observation, Series
from gpufleet.autoscaler.core.policy import Decision, Reason
from gpufleet.autoscaler.core.workload import Behavior, WorkloadConfig

DEFAULT_POLLING_INTERVAL_SECONDS = 30.0
DEFAULT_COOLDOWN_SECONDS = 300.0
DEFAULT_QUEUE_TARGET = 10.0  # a common per-replica waiting-requests target for vLLM
_EPSILON_SECONDS = 1e-9  # float slack when a poll falls due exactly on a sync tick


class KedaPolicy:
    """KEDA's scale loop plus the HPA it manages, for one workload.

    Replica bounds come from the workload (KEDA's own defaults are min 0, max 100; the
    simulator passes the workload's so every policy runs under the same bounds). The
    managed HPA gets min max(1, min_replicas), as KEDA sets it. `hpa_behavior` None models
    a ScaledObject without `advanced.horizontalPodAutoscalerConfig.behavior`: KEDA then
    leaves the HPA's behavior unset, so the controller's legacy normalization applies.

    `decide` runs every HPA sync (`interval_seconds`); KEDA's poll runs on the first call
    and then on the first sync at or after each `polling_interval_seconds` step.
    """

    name = "keda"
    __slots__ = (
        "_activation_threshold",
        "_cooldown_seconds",
        "_created_at",
        "_hpa",
        "_ignore_null_values",
        "_initial_cooldown_seconds",
        "_last_active_at",
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
    ) -> None:
        if polling_interval_seconds <= 0:
            raise ValueError("polling_interval_seconds must be positive")
        self.interval_seconds = hpa_sync_period_seconds
        self._workload = workload
        self._queue_target = queue_target
        self._activation_threshold = activation_threshold
        self._polling_interval_seconds = polling_interval_seconds
        self._cooldown_seconds = cooldown_seconds
        self._initial_cooldown_seconds = initial_cooldown_seconds
        self._ignore_null_values = ignore_null_values
        hpa_workload = replace(
            workload,
            min_replicas=max(1, workload.min_replicas),
            behavior=hpa_behavior if hpa_behavior is not None else workload.behavior,
        )
        self._hpa = HpaPolicy(
            hpa_workload,
            (MetricSpec(source=QUEUE_DEPTH, target=AverageValue(queue_target)),),
            sync_period_seconds=hpa_sync_period_seconds,
            without_behavior=hpa_behavior is None,
        )
        self._next_poll_at: float | None = None
        self._created_at: float | None = None
        self._last_active_at: float | None = None

    def decide(self, obs: Observation) -> Decision:
        """One HPA sync, preceded by KEDA's poll when one is due; KEDA's write wins."""
        if self._created_at is None:
            self._created_at = obs.now
        value = self._trigger_value(obs)
        # The HPA syncs on its own schedule against the current scale, as in a cluster.
        hpa = self._hpa.decide(self._hpa_view(obs, value))
        if self._poll_due(obs.now):
            keda = self._poll(obs, value)
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
            and self._workload.min_replicas == 0
            and self._last_active_at is not None
        )

    def _trigger_value(self, obs: Observation) -> float | None:
        """What the scaler returns: None only for an error (a gap with ignoreNullValues off)."""
        latest = obs.queue_depth.latest()
        if latest is not None and math.isfinite(latest):
            return latest
        return 0.0 if self._ignore_null_values else None

    def _hpa_view(self, obs: Observation, value: float | None) -> Observation:
        # KEDA's metrics server hands the HPA the scaler's value, nulls already zeroed.
        if value is None or obs.queue_depth.latest() == value:
            return obs
        return replace(obs, queue_depth=Series((obs.now,), (value,)))

    def _poll_due(self, now: float) -> bool:
        if self._next_poll_at is not None and now < self._next_poll_at - _EPSILON_SECONDS:
            return False
        due = now if self._next_poll_at is None else self._next_poll_at
        while due <= now + _EPSILON_SECONDS:
            due += self._polling_interval_seconds
        self._next_poll_at = due
        return True

    def _poll(self, obs: Observation, value: float | None) -> Decision | None:
        """`RequestScale`: KEDA's own write for this poll, or None when it leaves it to the HPA."""
        now, current = obs.now, obs.current_replicas
        minimum = self._workload.min_replicas
        if value is None:
            return None  # trigger error without fallback: KEDA only sets a condition
        threshold = self._activation_threshold
        if value > threshold:
            self._last_active_at = now
            if current == 0:
                desired = minimum if minimum > 0 else 1
                return Decision(
                    desired=desired,
                    reason=Reason.ACTIVATE,
                    message=f"queue_depth {value:.1f} > activation {threshold:g}: 0 -> {desired}",
                )
            return None
        if current > 0 and minimum == 0 and self._cooled_down(now):
            since = "creation" if self._last_active_at is None else "last active"
            return Decision(
                desired=0,
                reason=Reason.DEACTIVATE,
                message=f"queue_depth {value:.1f} <= activation {threshold:g} and cooldown"
                f" passed since {since}: {current} -> 0",
            )
        if current < minimum:
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
    cooldown_seconds: float | None = None,
) -> KedaPolicy:
    """KEDA as typically deployed for vLLM: Prometheus trigger on waiting requests, defaults
    (`cooldown_seconds` None: KEDA's cooldownPeriod default)."""
    return KedaPolicy(
        workload,
        queue_target=queue_target,
        polling_interval_seconds=polling_interval_s,
        cooldown_seconds=DEFAULT_COOLDOWN_SECONDS if cooldown_seconds is None else cooldown_seconds,
    )
