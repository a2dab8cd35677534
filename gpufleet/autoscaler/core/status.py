"""A GPUAutoscaler's status, as HPA reports it: conditions an operator can act on.

- `AbleToScale`: False with `FailedGetScale`/`FailedUpdateScale` when the target's scale
  subresource cannot be read or written, `Competing` when an HPA or a ScaledObject already
  scales the target (the controller refuses to fight), else True `ReadyForNewScale`.
- `ScalingActive`: False with `InvalidSpec` (naming the field), `MissingMetrics` (a query
  failed: the count is held, never lowered), else True `ValidMetricFound`.
- `ScalingLimited`: True `TooFewReplicas`/`TooManyReplicas` when min or max bound the
  policy's wish, `RateLimited` when the workload's behavior did, else False.
- `NodeHeadroom`, for a workload planned on Karpenter NodePools: False `NodePoolLimit`
  when a pool's `spec.limits` leave room for less headroom than the policy asked (the
  message says how much), else True `WithinNodePoolLimits`.
A condition keeps its `lastTransitionTime` while its status stays the same. Pure.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str  # "True", "False"
    reason: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Health:
    """What went wrong this tick, if anything; empty strings mean nothing did."""

    invalid_spec: str = ""
    scale_error: str = ""  # "FailedGetScale: ..." or "FailedUpdateScale: ..."
    competitor: str = ""  # "HorizontalPodAutoscaler/name"
    missing_metrics: str = ""
    node_pool: str = ""  # the Karpenter NodePool the headroom was planned on; "": none
    node_pool_limit: str = ""  # why it holds less headroom than asked


def conditions(
    health: Health,
    *,
    wanted: int | None,
    desired: int | None,
    minimum: int,
    maximum: int,
    rate_limited: bool,
) -> tuple[Condition, ...]:
    """The conditions for one tick (`NodeHeadroom` only where a NodePool was planned);
    `wanted` is the policy's count before bounds."""
    if health.scale_error:
        reason, _, message = health.scale_error.partition(": ")
        able = Condition("AbleToScale", "False", reason, message)
    elif health.competitor:
        able = Condition(
            "AbleToScale",
            "False",
            "Competing",
            f"{health.competitor} already scales the target; not scaling it too",
        )
    else:
        able = Condition("AbleToScale", "True", "ReadyForNewScale", "the target can be scaled")
    if health.invalid_spec:
        active = Condition("ScalingActive", "False", "InvalidSpec", health.invalid_spec)
    elif health.missing_metrics:
        active = Condition(
            "ScalingActive",
            "False",
            "MissingMetrics",
            f"holding the replica count: {health.missing_metrics}",
        )
    else:
        active = Condition("ScalingActive", "True", "ValidMetricFound", "the signals are current")
    if wanted is not None and wanted < minimum:
        limited = Condition(
            "ScalingLimited",
            "True",
            "TooFewReplicas",
            f"the policy wanted {wanted}, below minReplicas {minimum}",
        )
    elif wanted is not None and wanted > maximum:
        limited = Condition(
            "ScalingLimited",
            "True",
            "TooManyReplicas",
            f"the policy wanted {wanted}, above maxReplicas {maximum}",
        )
    elif rate_limited:
        limited = Condition(
            "ScalingLimited", "True", "RateLimited", "the workload's behavior limits the step"
        )
    else:
        limited = Condition(
            "ScalingLimited",
            "False",
            "DesiredWithinRange",
            f"the desired count {desired} is within range",
        )
    if not health.node_pool:
        return able, active, limited
    if health.node_pool_limit:
        headroom = Condition("NodeHeadroom", "False", "NodePoolLimit", health.node_pool_limit)
    else:
        headroom = Condition(
            "NodeHeadroom",
            "True",
            "WithinNodePoolLimits",
            f"NodePool {health.node_pool} has room for the headroom the policy asked for",
        )
    return able, active, limited, headroom


def by_type(conditions: Any) -> dict[str, Mapping[str, Any]]:
    """A status's conditions by their type. The API holds what it was given: a status
    edited by hand may hold anything, which here is no condition."""
    if not isinstance(conditions, list):
        return {}
    return {c["type"]: c for c in conditions if isinstance(c, dict) and type(c.get("type")) is str}


def condition_list(
    current: Sequence[Condition], previous: Any, now_text: str
) -> list[dict[str, str]]:
    """Conditions as the API writes them, keeping each transition time while unchanged."""
    before = by_type(previous)
    out = []
    for c in current:
        old = before.get(c.type)
        changed = old is None or old.get("status") != c.status
        out.append(
            {
                "type": c.type,
                "status": c.status,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": now_text
                if changed
                else old.get("lastTransitionTime", now_text),
            }
        )
    return out
