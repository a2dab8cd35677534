"""The HPA replica calculator: one metric's replica proposal, as `replica_calculator.go` makes it.

Pure functions of plain numbers. Values travel as integer milli-units because that is how
the metrics APIs carry them (`resource.Quantity.MilliValue()`), and the controller's
average is an integer division of those; keeping that arithmetic is what makes the
tolerance boundary land exactly where the real controller puts it.

A metric that cannot be computed returns `Unavailable` rather than raising: the controller
treats a failed metric as data (it may still scale up on the others), and so do we.
"""

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

DEFAULT_TOLERANCE = 0.1  # --horizontal-pod-autoscaler-tolerance


class Tolerances(NamedTuple):
    """Per-direction tolerance on the usage ratio (KEP-4951); both default to the flag."""

    scale_down: float = DEFAULT_TOLERANCE
    scale_up: float = DEFAULT_TOLERANCE

    def within(self, ratio: float) -> bool:
        """True when the ratio is close enough to 1 that the controller keeps the count."""
        return (1.0 - self.scale_down) <= ratio <= (1.0 + self.scale_up)


FLAG_TOLERANCES = Tolerances()  # what an HPA without configured tolerances uses


class Proposal(NamedTuple):
    """One metric's replica proposal, with the numbers an operator needs to check it."""

    replicas: int
    ratio: float  # usage / target as first computed
    usage: float  # the current value in the metric's units (average, total or percent)
    recomputed_ratio: float | None = None  # after missing/unready substitution, if any


class Unavailable(NamedTuple):
    """The metric could not be computed this sync (no samples, no ready pods)."""

    detail: str


Outcome = Proposal | Unavailable


def milli(value: float) -> int:
    """A value as the integer milli-units a Quantity carries."""
    return round(value * 1000)


def _plain_ratio(metrics: Sequence[int], target_milli: int) -> tuple[float, float]:
    # GetMetricUsageRatio: integer average of milli-values, then a float ratio.
    average_milli = sum(metrics) // len(metrics)
    return average_milli / target_milli, average_milli / 1000


def _utilization_ratio(metrics: Sequence[int], target_percent: int) -> tuple[float, float]:
    # GetResourceUtilizationRatio truncates utilization to a whole percent. Each value here
    # is a percent of a one-unit request, in milli-percent, so the request is 100_000.
    utilization = (sum(metrics) * 100) // (len(metrics) * 100_000)
    return utilization / target_percent, float(utilization)


def _per_pod(
    *,
    current_replicas: int,
    values: Sequence[float | None],
    pending_pods: int,
    ratio_of: Callable[[Sequence[int]], tuple[float, float]],
    fallback_milli: int,
    tolerances: Tolerances,
) -> Outcome:
    """The shared body of `GetResourceReplicas` and `calcPlainMetricReplicas`."""
    if not values and pending_pods == 0:
        return Unavailable("no pods returned by selector")
    metrics = [milli(v) for v in values if v is not None]
    missing = sum(1 for v in values if v is None)
    if not metrics:
        return Unavailable("no metrics for targeted pods (pods might be unready)")
    ratio, usage = ratio_of(metrics)
    scale_up_with_unready = pending_pods > 0 and ratio > 1.0
    if not scale_up_with_unready and missing == 0:
        if tolerances.within(ratio):
            return Proposal(current_replicas, ratio, usage)
        return Proposal(math.ceil(ratio * len(metrics)), ratio, usage)
    # Missing pods count as at-target on a scale-down and as idle on a scale-up; unready
    # (pending) pods count as idle on a scale-up. Both make the move more conservative.
    if missing and ratio < 1.0:
        metrics += [fallback_milli] * missing
    elif missing and ratio > 1.0:
        metrics += [0] * missing
    if scale_up_with_unready:
        metrics += [0] * pending_pods
    new_ratio, _ = ratio_of(metrics)
    flipped = (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio)
    if tolerances.within(new_ratio) or flipped:
        return Proposal(current_replicas, ratio, usage, new_ratio)
    replicas = math.ceil(new_ratio * len(metrics))
    # The larger denominator can itself reverse the direction; the controller holds then.
    if (new_ratio < 1.0 and replicas > current_replicas) or (
        new_ratio > 1.0 and replicas < current_replicas
    ):
        return Proposal(current_replicas, ratio, usage, new_ratio)
    return Proposal(replicas, ratio, usage, new_ratio)


def pods_average_value_replicas(
    *,
    current_replicas: int,
    values: Sequence[float | None],
    pending_pods: int,
    target: float,
    tolerances: Tolerances = FLAG_TOLERANCES,
) -> Outcome:
    """A Pods metric with an `AverageValue` target (`calcPlainMetricReplicas`).

    `values` has one entry per running pod, None where that pod has no sample; pending
    pods are counted separately. Terminating pods must not be passed at all.
    """
    target_milli = milli(target)
    return _per_pod(
        current_replicas=current_replicas,
        values=values,
        pending_pods=pending_pods,
        ratio_of=lambda m: _plain_ratio(m, target_milli),
        fallback_milli=target_milli,
        tolerances=tolerances,
    )


def pods_utilization_replicas(
    *,
    current_replicas: int,
    values_percent: Sequence[float | None],
    pending_pods: int,
    target_percent: int,
    tolerances: Tolerances = FLAG_TOLERANCES,
) -> Outcome:
    """A Resource-style `Utilization` target (`GetResourceReplicas`), values in % of request.

    Differs from `AverageValue` in two documented ways: utilization is truncated to a
    whole percent, and a missing pod on a scale-down counts as max(100, target) percent.
    """
    return _per_pod(
        current_replicas=current_replicas,
        values=values_percent,
        pending_pods=pending_pods,
        ratio_of=lambda m: _utilization_ratio(m, target_percent),
        fallback_milli=1000 * max(100, target_percent),
        tolerances=tolerances,
    )


def value_replicas(
    *,
    current_replicas: int,
    ready_pods: int,
    total: float,
    target: float,
    tolerances: Tolerances = FLAG_TOLERANCES,
) -> Proposal:
    """An Object/External metric with a `Value` target (`getUsageRatioReplicaCount`).

    Scales the ready pods by total/target; at 0 current replicas (scale-to-zero gate)
    there are no pods to scale, so the proposal is ceil(ratio) without tolerance.
    """
    usage_milli = milli(total)
    ratio = usage_milli / milli(target)
    if current_replicas == 0:
        return Proposal(math.ceil(ratio), ratio, usage_milli / 1000)
    if tolerances.within(ratio):
        return Proposal(current_replicas, ratio, usage_milli / 1000)
    return Proposal(math.ceil(ratio * ready_pods), ratio, usage_milli / 1000)


def average_value_replicas(
    *,
    status_replicas: int,
    total: float,
    target: float,
    tolerances: Tolerances = FLAG_TOLERANCES,
) -> Proposal:
    """An Object/External metric with an `AverageValue` target (`GetExternalPerPodMetricReplicas`).

    Tolerance is judged on total/(target x status replicas); the proposal ignores ready
    pods entirely and is ceil(total/target). This is the path KEDA's triggers take.
    """
    usage_milli, target_milli = milli(total), milli(target)
    if status_replicas == 0:
        # Go divides by zero here and gets +Inf or NaN, both outside the tolerance.
        return Proposal(math.ceil(usage_milli / target_milli), math.inf, usage_milli / 1000)
    ratio = usage_milli / (target_milli * status_replicas)
    replicas = status_replicas
    if not tolerances.within(ratio):
        replicas = math.ceil(usage_milli / target_milli)
    return Proposal(replicas, ratio, usage_milli / 1000)


def combine(outcomes: Sequence[Outcome], *, spec_replicas: int) -> int | None:
    """Several metrics into one proposal (`computeReplicasForMetrics`); None means hold.

    The largest valid proposal wins. With any metric failed, the controller still acts on
    a proposal at or above the current count, but refuses to scale down on partial data.
    """
    valid = [o.replicas for o in outcomes if isinstance(o, Proposal)]
    invalid = len(outcomes) - len(valid)
    replicas = max(valid, default=0)
    if invalid >= len(outcomes) or (invalid > 0 and replicas < spec_replicas):
        return None
    return replicas
