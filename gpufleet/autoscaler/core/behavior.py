"""A workload's `behavior` (autoscaling/v2), applied as HPA's `horizontal.go` applies it:
stabilization, rate policies, bounds.

The behavior is the workload's, not the HPA baseline's: `hpa` applies all of it, the
`gpufleet` policy its rate policies (it smooths with its own scale-down window), and any
policy an operator configures is held to it.

Pure. The controller's in-memory history (recent raw recommendations, recent scale events)
is an immutable `History` value that each step returns a new copy of; the caller keeps it.

Window edges: a recommendation or scale event counts while its age is below the window or
period. The behavior path's `After(cutoff)` comparisons say exactly that. The legacy
path's `Before(cutoff)` would also count one exactly `window` old, but a real controller's
syncs always land slightly more than a sync period apart, so it never sees that tie; the
simulator's exact clock would, so we resolve it the way the real timing does.
"""

import math
from dataclasses import dataclass
from typing import NamedTuple

from gpufleet.autoscaler.core.workload import (
    Behavior,
    RateKind,
    RatePolicy,
    ScalingRules,
    SelectPolicy,
)

LEGACY_SCALE_UP_FACTOR = 2.0  # without behavior: at most double per sync ...
LEGACY_SCALE_UP_MINIMUM = 4  # ... or grow to 4, whichever is larger
DEFAULT_DOWNSCALE_STABILIZATION_SECONDS = 300.0  # --horizontal-pod-autoscaler-downscale-...


class Stamped(NamedTuple):
    at_seconds: float
    replicas: int  # a raw recommendation, or the size of a scale event (non-negative)


@dataclass(frozen=True, slots=True, kw_only=True)
class History:
    """The controller's memory for one HPA: raw recommendations and scale events."""

    recommendations: tuple[Stamped, ...] = ()
    scale_ups: tuple[Stamped, ...] = ()
    scale_downs: tuple[Stamped, ...] = ()


class Bounds(NamedTuple):
    min_replicas: int
    max_replicas: int


class Normalized(NamedTuple):
    """Where the raw recommendation ended up, and which stage moved it."""

    replicas: int
    stabilized: int  # after the stabilization window, before rate limits and bounds
    limit: int | None  # the binding-direction cap or floor the rate policies allowed
    limit_note: str  # e.g. "Pods 4/15s"; "" when no policy applies
    limited_by: str  # "", "rate" or "bounds": what clipped `stabilized` to `replicas`


def _age_below(stamp: Stamped, now: float, window_seconds: float) -> bool:
    return now - stamp.at_seconds < window_seconds


def record_initial(history: History, *, now: float, current: int) -> History:
    """The first sync seeds the window with the current count (`recordInitialRecommendation`)."""
    if history.recommendations:
        return history
    return History(
        recommendations=(Stamped(now, current),),
        scale_ups=history.scale_ups,
        scale_downs=history.scale_downs,
    )


def stabilize(
    history: History, *, now: float, current: int, desired: int, behavior: Behavior
) -> tuple[int, History]:
    """`stabilizeRecommendationWithBehaviors`: clamp between the windows' min and max.

    Scale-up uses the lowest recommendation inside the scale-up window, scale-down the
    highest inside the scale-down window; `desired` is then recorded for later syncs.
    """
    up_window = behavior.scale_up.stabilization_window_seconds
    down_window = behavior.scale_down.stabilization_window_seconds
    up, down = desired, desired
    for rec in history.recommendations:
        if _age_below(rec, now, up_window):
            up = min(up, rec.replicas)
        if _age_below(rec, now, down_window):
            down = max(down, rec.replicas)
    recommendation = min(max(current, up), down)
    keep = max(up_window, down_window)
    return recommendation, _with_recommendation(history, now, desired, keep)


def stabilize_legacy(
    history: History, *, now: float, desired: int, window_seconds: float
) -> tuple[int, History]:
    """`stabilizeRecommendation` (no behavior): the highest recommendation in the window."""
    highest = max(
        (r.replicas for r in history.recommendations if _age_below(r, now, window_seconds)),
        default=desired,
    )
    return max(highest, desired), _with_recommendation(history, now, desired, window_seconds)


def _with_recommendation(history: History, now: float, desired: int, keep: float) -> History:
    # The controller reuses the slot of one expired sample; dropping all expired ones is
    # the same for every later read, since windows only look back from a later `now`.
    kept = tuple(r for r in history.recommendations if _age_below(r, now, keep))
    return History(
        recommendations=(*kept, Stamped(now, desired)),
        scale_ups=history.scale_ups,
        scale_downs=history.scale_downs,
    )


def _changed_within(events: tuple[Stamped, ...], now: float, period_seconds: float) -> int:
    return sum(e.replicas for e in events if _age_below(e, now, period_seconds))


def _policy_proposal(policy: RatePolicy, period_start: int, *, up: bool) -> int:
    if policy.kind is RateKind.PODS:
        return period_start + policy.value if up else period_start - policy.value
    if up:
        # Rounded up so that a small percentage can still add a pod.
        return math.ceil(period_start * (1 + policy.value / 100))
    return int(period_start * (1 - policy.value / 100))  # Go's int32() truncates


def rate_limit(
    history: History, *, now: float, current: int, rules: ScalingRules, up: bool
) -> tuple[int, str]:
    """`calculateScaleUpLimitWithScalingRules` / `...ScaleDownLimitWithBehaviors`.

    Each policy proposes from the count at the start of its period (current minus pods
    added plus pods removed within it); selectPolicy picks the widest (Max) or narrowest
    (Min) move; Disabled pins the count. Returns the limit and the policy that set it.
    """
    if rules.select_policy is SelectPolicy.DISABLED:
        return current, "selectPolicy Disabled"
    widest = rules.select_policy is SelectPolicy.MAX
    pick = max if widest == up else min
    best: tuple[int, str] | None = None
    for policy in rules.policies:
        added = _changed_within(history.scale_ups, now, policy.period_seconds)
        removed = _changed_within(history.scale_downs, now, policy.period_seconds)
        proposed = _policy_proposal(policy, current - added + removed, up=up)
        if best is None or pick(proposed, best[0]) != best[0]:
            best = (proposed, _describe(policy))
    if best is None:  # no policies: the API forbids it; treat as no movement allowed
        return current, "no policies"
    return best


def _describe(policy: RatePolicy) -> str:
    unit = "%" if policy.kind is RateKind.PERCENT else ""
    return f"{policy.kind.value} {policy.value}{unit}/{policy.period_seconds:g}s"


def limit_with_behavior(
    history: History,
    *,
    now: float,
    current: int,
    stabilized: int,
    behavior: Behavior,
    bounds: Bounds,
) -> Normalized:
    """`convertDesiredReplicasWithBehaviorRate`: rate policies, then min/max bounds."""
    if stabilized > current:
        limit, note = rate_limit(
            history, now=now, current=current, rules=behavior.scale_up, up=True
        )
        limit = max(limit, current)  # events not yet expired can push it below current
        allowed = min(bounds.max_replicas, limit)
        if stabilized > allowed:
            by = "rate" if allowed == limit and limit < bounds.max_replicas else "bounds"
            return Normalized(allowed, stabilized, limit, note, by)
        return Normalized(stabilized, stabilized, limit, note, "")
    if stabilized < current:
        limit, note = rate_limit(
            history, now=now, current=current, rules=behavior.scale_down, up=False
        )
        limit = min(limit, current)
        allowed = max(bounds.min_replicas, limit)
        if stabilized < allowed:
            by = "rate" if allowed == limit and limit > bounds.min_replicas else "bounds"
            return Normalized(allowed, stabilized, limit, note, by)
        return Normalized(stabilized, stabilized, limit, note, "")
    return Normalized(stabilized, stabilized, None, "", "")


def limit_legacy(*, current: int, stabilized: int, bounds: Bounds) -> Normalized:
    """`convertDesiredReplicasWithRules`: bounds plus the max(2 x current, 4) growth cap."""
    cap = int(max(LEGACY_SCALE_UP_FACTOR * current, LEGACY_SCALE_UP_MINIMUM))
    note = f"legacy cap max(2x{current}, 4)"
    if stabilized < bounds.min_replicas:
        return Normalized(bounds.min_replicas, stabilized, None, "", "bounds")
    if stabilized > min(bounds.max_replicas, cap):
        by = "rate" if cap < bounds.max_replicas else "bounds"
        return Normalized(min(bounds.max_replicas, cap), stabilized, cap, note, by)
    return Normalized(stabilized, stabilized, cap if stabilized > current else None, note, "")


def record_scale(
    history: History, *, now: float, previous: int, new: int, behavior: Behavior
) -> History:
    """`storeScaleEvent`: remember a rescale for the rate policies of its direction."""
    if new == previous:
        return history
    rules = behavior.scale_up if new > previous else behavior.scale_down
    longest = max((p.period_seconds for p in rules.policies), default=0.0)
    event = Stamped(now, abs(new - previous))
    if new > previous:
        kept = tuple(e for e in history.scale_ups if _age_below(e, now, longest))
        return History(
            recommendations=history.recommendations,
            scale_ups=(*kept, event),
            scale_downs=history.scale_downs,
        )
    kept = tuple(e for e in history.scale_downs if _age_below(e, now, longest))
    return History(
        recommendations=history.recommendations,
        scale_ups=history.scale_ups,
        scale_downs=(*kept, event),
    )
