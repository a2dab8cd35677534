"""KEDA's `fallback`: the metric KEDA serves in place of a trigger that keeps failing.

Facts from KEDA's `pkg/fallback/fallback.go`. Every read of the trigger (KEDA's own poll
and each HPA query of KEDA's metrics server) that fails adds one to the trigger's failure
count; a read that succeeds resets it to 0. Once the count exceeds `failureThreshold`,
KEDA suppresses the error and serves the value that makes the HPA land on the fallback
replicas: target x replicas for an `AverageValue` target, and target x replicas / ready
pods for a `Value` one (none when no pod is ready, which the HPA sees as an error). While
it serves one, the trigger counts as active. Pure: no I/O, no clock.
"""

import math
from dataclasses import dataclass
from enum import StrEnum


class FallbackBehavior(StrEnum):
    """`fallback.behavior`: which replica count the served value stands for."""

    STATIC = "static"  # fallback.replicas (KEDA's default)
    CURRENT_REPLICAS = "currentReplicas"  # the target's current count
    CURRENT_REPLICAS_IF_HIGHER = "currentReplicasIfHigher"  # max(current, fallback.replicas)
    CURRENT_REPLICAS_IF_LOWER = "currentReplicasIfLower"  # min(current, fallback.replicas)


@dataclass(frozen=True, slots=True, kw_only=True)
class Fallback:
    """A ScaledObject's `spec.fallback`; KEDA's webhook rejects negative numbers, so do we."""

    failure_threshold: int
    replicas: int
    behavior: FallbackBehavior = FallbackBehavior.STATIC

    def __post_init__(self) -> None:
        if self.failure_threshold < 0 or self.replicas < 0:
            # KEDA's CheckFallbackValid text.
            raise ValueError(
                f"FailureThreshold={self.failure_threshold} & Replicas={self.replicas} "
                "must both be greater than or equal to 0"
            )

    def exceeded(self, failures: int) -> bool:
        """Whether `failures` consecutive failed reads put the trigger on its fallback."""
        return failures > self.failure_threshold

    def target_replicas(self, current_replicas: int) -> int:
        """The replica count the fallback value stands for (`doFallback`)."""
        if self.behavior is FallbackBehavior.CURRENT_REPLICAS:
            return current_replicas
        if self.behavior is FallbackBehavior.CURRENT_REPLICAS_IF_HIGHER:
            return max(current_replicas, self.replicas)
        if self.behavior is FallbackBehavior.CURRENT_REPLICAS_IF_LOWER:
            return min(current_replicas, self.replicas)
        return self.replicas


def fallback_value(
    fallback: Fallback,
    *,
    target: float,
    per_replica: bool,
    current_replicas: int,
    ready_replicas: int,
) -> float | None:
    """The metric value KEDA serves in the trigger's place, or None when it cannot.

    `per_replica` is an `AverageValue` target; otherwise a `Value` target, divided by the
    ready pods (None with none ready: KEDA logs it and the read fails). The value is a
    milli-quantity truncated toward zero, as `NewMilliQuantity(int64(...))` makes it.
    """
    replicas = float(fallback.target_replicas(current_replicas))
    if not per_replica:
        if ready_replicas == 0:
            return None
        replicas /= ready_replicas
    return math.trunc(target * 1000 * replicas) / 1000
