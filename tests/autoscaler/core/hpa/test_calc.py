"""The HPA replica calculator, row by row against `replica_calculator.go`'s documented arithmetic.

Every row's comment derives the expected count by hand. Tolerance 0.1 unless a row says
otherwise; "running" values are one per Running pod (None = no sample).
"""

import math

import pytest

from gpufleet.autoscaler.core.hpa.calc import (
    Proposal,
    Tolerances,
    Unavailable,
    average_value_replicas,
    combine,
    pods_average_value_replicas,
    pods_utilization_replicas,
    value_replicas,
)

# (current, running values, pending, target, expected replicas)
PODS_AVERAGE_VALUE = [
    # 77/70 = 1.1 exactly; the band [0.9, 1.1] is inclusive, so no change.
    pytest.param(4, [77.0] * 4, 0, 70, 4, id="upper-tolerance-edge-holds"),
    # 77.1/70 = 1.1014 > 1.1 -> ceil(1.1014 x 4 = 4.406) = 5.
    pytest.param(4, [77.1] * 4, 0, 70, 5, id="just-above-tolerance-scales-up"),
    # 63/70 = 0.9 exactly: inside the band.
    pytest.param(4, [63.0] * 4, 0, 70, 4, id="lower-tolerance-edge-holds"),
    # 62.9/70 = 0.8986 -> ceil(0.8986 x 10 = 8.986) = 9.
    pytest.param(10, [62.9] * 10, 0, 70, 9, id="just-below-tolerance-scales-down"),
    # 90/70 = 1.2857 -> ceil(5.143) = 6.
    pytest.param(4, [90.0] * 4, 0, 70, 6, id="scale-up"),
    # 35/70 = 0.5 -> ceil(0.5 x 4) = 2.
    pytest.param(4, [35.0] * 4, 0, 70, 2, id="scale-down"),
    # Mixed: avg(50, 90, 100, 120) = 90 -> 1.2857 -> 6, same as uniform 90.
    pytest.param(4, [50.0, 90.0, 100.0, 120.0], 0, 70, 6, id="average-not-max"),
    # Missing on a scale-down count as the target: avg(35, 35, 70, 70) = 52.5 -> 0.75
    # -> ceil(0.75 x 4) = 3 (ignoring them would give ceil(0.5 x 2) = 1).
    pytest.param(4, [35.0, 35.0, None, None], 0, 70, 3, id="missing-as-target-on-scale-down"),
    # Missing on a scale-up count as 0: avg(140, 140, 0, 0) = 70 -> 1.0, within: hold.
    pytest.param(4, [140.0, 140.0, None, None], 0, 70, 4, id="missing-as-zero-holds-scale-up"),
    # avg(140, 140, 140, 0) = 105 -> 1.5 -> ceil(1.5 x 4) = 6.
    pytest.param(4, [140.0, 140.0, 140.0, None], 0, 70, 6, id="missing-as-zero-damps-scale-up"),
    # Missing flips the direction: 140/70 = 2 up, avg(140, 0, 0) = 46.7 -> 0.67 down: hold.
    pytest.param(3, [140.0, None, None], 0, 70, 3, id="missing-flip-holds"),
    # Pending pods are ignored on a scale-down: 35/70 = 0.5 over the 2 running -> 1.
    pytest.param(4, [35.0, 35.0], 2, 70, 1, id="pending-ignored-on-scale-down"),
    # Pending count as 0 on a scale-up: avg(140, 140, 0, 0) = 70 -> within: hold.
    pytest.param(4, [140.0, 140.0], 2, 70, 4, id="pending-as-zero-holds-scale-up"),
    # avg(210, 210, 0, 0) = 105 -> 1.5 -> ceil(1.5 x 4) = 6.
    pytest.param(4, [210.0, 210.0], 2, 70, 6, id="pending-as-zero-damps-scale-up"),
    # 100/70 = 1.43 up; avg(100, 0, 0, 0) = 25 -> 0.36 down: flip, hold.
    pytest.param(4, [100.0], 3, 70, 4, id="pending-flip-holds"),
    # Inconsistent input (4 running, current 2): 0.5 -> 0.75 x 4 = 3 > 2 would reverse
    # a scale-down into a scale-up, so the controller holds.
    pytest.param(2, [35.0, 35.0, None, None], 0, 70, 2, id="recount-reversal-holds"),
    # Milli-units and an integer average: (154001 + 0) // 2 = 77000 milli = 1.1 x target,
    # within: hold. A float average (77.0004 -> 1.100006) would have scaled to 3.
    pytest.param(2, [154.0008, 0.0], 0, 70, 2, id="milli-integer-average"),
]


@pytest.mark.parametrize(("current", "values", "pending", "target", "expected"), PODS_AVERAGE_VALUE)
def test_pods_average_value(current, values, pending, target, expected):
    outcome = pods_average_value_replicas(
        current_replicas=current, values=values, pending_pods=pending, target=target
    )
    assert isinstance(outcome, Proposal)
    assert outcome.replicas == expected


@pytest.mark.parametrize(
    ("values", "pending", "detail"),
    [
        pytest.param([], 0, "no pods", id="no-pods"),
        pytest.param([None, None], 0, "no metrics", id="all-running-missing"),
        pytest.param([], 3, "no metrics", id="only-pending"),
    ],
)
def test_pods_metric_unavailable(values, pending, detail):
    outcome = pods_average_value_replicas(
        current_replicas=3, values=values, pending_pods=pending, target=70
    )
    assert isinstance(outcome, Unavailable)
    assert detail in outcome.detail


# (current, running percents, target %, expected)
PODS_UTILIZATION = [
    # Utilization truncates to a whole percent: 77.9 -> 77 -> 1.1 within: hold
    # (AverageValue on the same numbers gives 77.9/70 = 1.113 -> 5).
    pytest.param(4, [77.9] * 4, 70, 4, id="truncated-percent-holds"),
    # 91/70 = 1.3 -> ceil(5.2) = 6.
    pytest.param(4, [91.0] * 4, 70, 6, id="scale-up"),
    # Missing on a scale-down count as max(100, target) = 100%, not the target:
    # avg(35, 35, 100, 100) = 67.5 -> 67 -> 0.957 within: hold (AverageValue gives 3).
    pytest.param(4, [35.0, 35.0, None, None], 70, 4, id="missing-as-100-percent"),
    # Target above 100%: missing count as the target, 150: avg(30, 30, 150, 150) = 90
    # -> 0.6 -> ceil(2.4) = 3.
    pytest.param(4, [30.0, 30.0, None, None], 150, 3, id="missing-as-target-above-100"),
    # replica_calculator_test.go TestReplicaCalcScaleUp: usage 300m, 500m, 700m over 1-core
    # requests is total usage over total requests, 1500m / 3000m = 50% (expectedUtilization
    # 50) -> 50/30 = 1.67 -> ceil(5.0) = 5. Every GPU pod requests the same one GPU, so
    # each value in percent of its request sums the same way.
    pytest.param(3, [30.0, 50.0, 70.0], 30, 5, id="k8s-ScaleUp-total-over-requests"),
]


@pytest.mark.parametrize(("current", "values", "target", "expected"), PODS_UTILIZATION)
def test_pods_utilization(current, values, target, expected):
    outcome = pods_utilization_replicas(
        current_replicas=current, values_percent=values, pending_pods=0, target_percent=target
    )
    assert isinstance(outcome, Proposal)
    assert outcome.replicas == expected


# (status replicas, total, target, expected)
EXTERNAL_AVERAGE_VALUE = [
    # 45 / (10 x 4) = 1.125 > 1.1 -> ceil(45 / 10) = 5.
    pytest.param(4, 45.0, 10, 5, id="scale-up-ceil-total-over-target"),
    # 44 / 40 = 1.1: within, hold.
    pytest.param(4, 44.0, 10, 4, id="tolerance-edge-holds"),
    # 36 / 40 = 0.9: within, hold; 35 / 40 = 0.875 -> ceil(3.5) = 4: also 4.
    pytest.param(4, 36.0, 10, 4, id="lower-edge-holds"),
    # 12 / 40 = 0.3 -> ceil(1.2) = 2.
    pytest.param(4, 12.0, 10, 2, id="scale-down"),
    # An empty queue proposes 0; the bounds keep the floor.
    pytest.param(3, 0.0, 10, 0, id="zero-total-proposes-zero"),
    # From 0 replicas: Go divides by 0 (outside tolerance) -> ceil(5 / 10) = 1.
    pytest.param(0, 5.0, 10, 1, id="from-zero"),
    pytest.param(0, 0.0, 10, 0, id="from-zero-empty"),
    # 100 / 7 = 14.29 -> 15: ready pods play no part.
    pytest.param(1, 100.0, 7, 15, id="large-jump"),
]


@pytest.mark.parametrize(("status", "total", "target", "expected"), EXTERNAL_AVERAGE_VALUE)
def test_external_average_value(status, total, target, expected):
    proposal = average_value_replicas(status_replicas=status, total=total, target=target)
    assert proposal.replicas == expected


# (current, ready, total, target, expected)
EXTERNAL_VALUE = [
    # 30 / 10 = 3 -> ceil(3 x 2 ready) = 6 (starting pods are not multiplied).
    pytest.param(4, 2, 30.0, 10, 6, id="scales-ready-pods"),
    # 10.5 / 10 = 1.05: within, hold.
    pytest.param(4, 4, 10.5, 10, 4, id="within-tolerance"),
    # 5 / 10 = 0.5 -> ceil(0.5 x 4) = 2.
    pytest.param(4, 4, 5.0, 10, 2, id="scale-down"),
    # At 0 replicas: ceil(25 / 10) = 3, no tolerance, no pods.
    pytest.param(0, 0, 25.0, 10, 3, id="from-zero-ceil-ratio"),
    # All pods starting: ceil(3 x 0) = 0.
    pytest.param(2, 0, 30.0, 10, 0, id="no-ready-pods"),
]


@pytest.mark.parametrize(("current", "ready", "total", "target", "expected"), EXTERNAL_VALUE)
def test_external_value(current, ready, total, target, expected):
    proposal = value_replicas(
        current_replicas=current, ready_pods=ready, total=total, target=target
    )
    assert proposal.replicas == expected


@pytest.mark.parametrize(
    ("tolerances", "ratio", "within"),
    [
        pytest.param(Tolerances(), 1.1, True, id="default-upper-inclusive"),
        pytest.param(Tolerances(), 0.9, True, id="default-lower-inclusive"),
        pytest.param(Tolerances(scale_down=0.0, scale_up=0.5), 0.99, False, id="zero-down"),
        pytest.param(Tolerances(scale_down=0.0, scale_up=0.5), 1.5, True, id="wide-up"),
        pytest.param(Tolerances(scale_down=0.3, scale_up=0.0), 1.001, False, id="zero-up"),
    ],
)
def test_tolerances_per_direction(tolerances, ratio, within):
    assert tolerances.within(ratio) is within


def test_per_direction_tolerance_reaches_the_calculator():
    # 90/70 = 1.29: outside the default band, inside a 0.5 scale-up tolerance.
    outcome = pods_average_value_replicas(
        current_replicas=4,
        values=[90.0] * 4,
        pending_pods=0,
        target=70,
        tolerances=Tolerances(scale_down=0.1, scale_up=0.5),
    )
    assert outcome == Proposal(4, 90 / 70, 90.0)


P = Proposal
GONE = Unavailable("no sample")

# (outcomes, current, expected; None = hold)
COMBINE = [
    pytest.param([P(5, 1, 1), P(3, 1, 1)], 4, 5, id="max-of-proposals"),
    pytest.param([P(2, 1, 1), P(3, 1, 1)], 4, 3, id="max-of-scale-downs"),
    pytest.param([GONE, P(6, 1, 1)], 4, 6, id="failed-metric-still-scales-up"),
    pytest.param([GONE, P(4, 1, 1)], 4, 4, id="failed-metric-at-current-proceeds"),
    pytest.param([GONE, P(2, 1, 1)], 4, None, id="failed-metric-blocks-scale-down"),
    pytest.param([GONE, GONE], 4, None, id="all-failed"),
    pytest.param([], 4, None, id="no-metrics"),
]


@pytest.mark.parametrize(("outcomes", "current", "expected"), COMBINE)
def test_combine(outcomes, current, expected):
    assert combine(outcomes, spec_replicas=current) == expected


def test_average_value_ratio_at_zero_is_infinite():
    assert math.isinf(average_value_replicas(status_replicas=0, total=5, target=10).ratio)
