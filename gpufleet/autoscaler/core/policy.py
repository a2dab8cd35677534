"""The one interface every scaling policy implements, and what a decision carries.

A policy is a plain object that keeps its own history (stabilization windows, learned
capacity) but does no I/O and reads no clock: `decide` is a function of the observation
sequence it has been given. The simulator and the live controller call the same objects.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from gpufleet.autoscaler.core.binding import Term
from gpufleet.autoscaler.core.observation import Observation


class Reason(StrEnum):
    """Why the desired count is what it is; operators see it in events and logs."""

    STEADY = "Steady"  # within tolerance or nothing to do
    SCALE_UP = "ScaleUp"  # demand exceeds capacity
    SCALE_DOWN = "ScaleDown"  # capacity exceeds demand
    BURST = "Burst"  # the fast path saw a burst (panic mode)
    FORECAST = "Forecast"  # predicted demand within the lead time
    BACKLOG = "Backlog"  # queued requests must drain within the SLO
    ACTIVATE = "Activate"  # 0 -> 1 on activity
    DEACTIVATE = "Deactivate"  # 1 -> 0 after the cooldown
    STABILIZED = "Stabilized"  # held by a stabilization window
    RATE_LIMITED = "RateLimited"  # held by a scale-up or scale-down rate policy
    BOUNDED = "Bounded"  # clamped to min or max replicas
    MISSING_METRICS = "MissingMetrics"  # held: never scale down on missing data
    # Observed TTFT / queue wait corrected the sizing upward (the SLO feedback term,
    # `binding.Term.SLO_FEEDBACK`).
    SLO_FEEDBACK = "SLOFeedback"


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    desired: int
    reason: Reason
    message: str  # one human-readable sentence with the numbers behind the decision
    headroom: int = 0  # extra warm placeholder replicas for demand due within node provisioning
    # The term that set `desired` (the message names it too); None for policies that do not
    # say (the baselines: their reason is their one term).
    bound_by: Term | None = None


class Policy(Protocol):
    name: str
    interval_seconds: float  # how often the live controller (and the simulator) calls decide

    def decide(self, obs: Observation) -> Decision: ...


@runtime_checkable
class Learns(Protocol):
    """A policy whose learned state outlives it (the `gpufleet` policy's capacity)."""

    def learned(self) -> Mapping[str, float]: ...

    def resume(self, learned: Mapping[str, Any]) -> None: ...
