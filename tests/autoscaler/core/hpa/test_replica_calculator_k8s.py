"""Kubernetes' own `replica_calculator_test.go` cases, ported as facts (inputs and expected
replicas) against our calculator.

Each row names its Go test. Levels there are milli-units (a Pods or External metric) or
millicores over 1-core requests (a Resource metric, here percent of request); a pod the
Go case marks unready is, for a Resource metric, set aside as `groupPods` does (our
`pending_pods`), and its sample is dropped; a pod with no level is missing (None). Go cases
with unequal requests per pod, or CPU initialization windows, have no GPU counterpart and
are not ported. Tolerance 0.1 throughout (`defaultTestingTolerance`).
"""

import pytest

from gpufleet.autoscaler.core.hpa.calc import (
    Proposal,
    average_value_replicas,
    pods_average_value_replicas,
    pods_utilization_replicas,
    value_replicas,
)

# (current, values per running pod, set-aside pods, target, expected)
PODS_METRIC = [
    # 20000, 10000, 30000 over 15000: average 20000 -> 1.33 -> ceil(4.0) = 4.
    pytest.param(3, [20.0, 10.0, 30.0], 0, 15.0, 4, id="TestReplicaCalcScaleUpCM"),
    pytest.param(5, [12.0] * 5, 0, 20.0, 3, id="TestReplicaCalcScaleDownCM"),
    # average 20666 / 20000 = 1.033: within.
    pytest.param(3, [20.0, 21.0, 21.0], 0, 20.0, 3, id="TestReplicaCalcToleranceCM"),
]


@pytest.mark.parametrize(("current", "values", "aside", "target", "expected"), PODS_METRIC)
def test_pods_metric(current, values, aside, target, expected):
    outcome = pods_average_value_replicas(
        current_replicas=current, values=values, pending_pods=aside, target=target
    )
    assert isinstance(outcome, Proposal)
    assert outcome.replicas == expected


# (current, percents of the ready pods (None = missing), unready set aside, target %, expected)
RESOURCE_METRIC = [
    # Readiness F,T,T; 300, 500, 700 over 30%: the unready pod is set aside, 60% -> 2.0 up,
    # recomputed with it at 0: 40% -> 1.33 -> ceil(4.0) = 4.
    pytest.param(3, [50.0, 70.0], 1, 30, 4, id="TestReplicaCalcScaleUpUnreadyLessScale"),
    # T,F,F; 400 over 30%: 1.33 up, with two at 0: 13% -> down: flipped, hold.
    pytest.param(3, [40.0], 2, 30, 3, id="TestReplicaCalcScaleUpUnreadyNoScale"),
    # T,T,T,F,F; 100, 300, 500 over 50%: 30% -> 0.6, set-aside pods play no part on a
    # scale-down: ceil(0.6 x 3) = 2.
    pytest.param(5, [10.0, 30.0, 50.0], 2, 50, 2, id="TestReplicaCalcScaleDownIncludeUnreadyPods"),
    # One running pod at 10%, four Pending: ceil(0.2 x 1) = 1.
    pytest.param(5, [10.0], 4, 50, 1, id="TestReplicaCalcScaleDownExcludeUnscheduledPods"),
    # 400, 95 and two missing over 100%: 24% down; missing at 100%: 62% -> ceil(2.48) = 3.
    pytest.param(4, [40.0, 9.5, None, None], 0, 100, 3, id="TestReplicaCalcMissingMetrics"),
    pytest.param(2, [100.0, None], 0, 100, 2, id="TestReplicaCalcMissingMetricsNoChangeEq"),
    # 190% up; the missing one at 0: 95% -> within.
    pytest.param(2, [190.0, None], 0, 100, 2, id="TestReplicaCalcMissingMetricsNoChangeGt"),
    # 60% down; the missing one at 100%: 80% -> ceil(1.6) = 2.
    pytest.param(2, [60.0, None], 0, 100, 2, id="TestReplicaCalcMissingMetricsNoChangeLt"),
    # F,T,T; 100, 450, - over 50%: 45% down, missing at 100%: 72% -> up: flipped, hold.
    pytest.param(3, [45.0, None], 1, 50, 3, id="TestReplicaCalcMissingMetricsUnreadyChange"),
    # F,T,T; 100, 2000, - over 50%: 200% up; missing and unready at 0: 66% -> ceil(3.96) = 4.
    pytest.param(3, [200.0, None], 1, 50, 4, id="TestReplicaCalcMissingMetricsUnreadyScaleUp"),
    # F,T,T,T; 100, 100, 100, - over 50%: 10% down; missing at 100%: 40% -> ceil(2.4) = 3.
    pytest.param(
        4, [10.0, 10.0, None], 1, 50, 3, id="TestReplicaCalcMissingMetricsUnreadyScaleDown"
    ),
    # A third Running pod during a surge has no sample: 10% down, missing at 100%: 40%
    # -> ceil(0.8 x 3) = 3 would turn a scale-down from 2 into a scale-up: hold 2.
    pytest.param(
        2, [10.0, 10.0, None], 0, 50, 2, id="TestReplicaCalcDuringRollingUpdateWithMaxSurge"
    ),
]  # fmt: skip


@pytest.mark.parametrize(("current", "values", "aside", "target", "expected"), RESOURCE_METRIC)
def test_resource_metric(current, values, aside, target, expected):
    outcome = pods_utilization_replicas(
        current_replicas=current, values_percent=values, pending_pods=aside, target_percent=target
    )
    assert isinstance(outcome, Proposal)
    assert outcome.replicas == expected


# Object or External with a Value target: (current, ready pods, total, target, expected)
VALUE_TARGET = [
    pytest.param(3, 3, 20.0, 15.0, 4, id="TestReplicaCalcScaleUpCMObject"),
    # Readiness F,T,F: 5.0 x 1 ready = 5 (15 if unready pods counted).
    pytest.param(3, 1, 50.0, 10.0, 5, id="TestReplicaCalcScaleUpCMObjectIgnoresUnreadyPods"),
    # F,T,F: 8600 / 4400 = 1.95 x 1 ready -> 2 (6 if unready pods counted).
    pytest.param(3, 1, 8.6, 4.4, 2, id="TestReplicaCalcScaleUpCMExternalIgnoresUnreadyPods"),
    pytest.param(5, 5, 12.0, 20.0, 3, id="TestReplicaCalcScaleDownCMObject"),
    pytest.param(5, 5, 8.6, 14.334, 3, id="TestReplicaCalcScaleDownCMExternal"),
    pytest.param(3, 3, 20.666, 20.0, 3, id="TestReplicaCalcToleranceCMObject"),
    pytest.param(3, 3, 8.6, 8.888, 3, id="TestReplicaCalcToleranceCMExternal"),
]


@pytest.mark.parametrize(("current", "ready", "total", "target", "expected"), VALUE_TARGET)
def test_value_target(current, ready, total, target, expected):
    proposal = value_replicas(
        current_replicas=current, ready_pods=ready, total=total, target=target
    )
    assert proposal.replicas == expected


# Object or External with an AverageValue target: (status replicas, total, target, expected)
AVERAGE_VALUE_TARGET = [
    pytest.param(3, 20.0, 5.0, 4, id="TestReplicaCalcScaleUpCMPerPodObject"),
    pytest.param(3, 8.6, 2.15, 4, id="TestReplicaCalcScaleUpPerPodCMExternal"),
    pytest.param(5, 6.0, 2.0, 3, id="TestReplicaCalcScaleDownPerPodCMObject"),
    pytest.param(5, 8.6, 2.867, 3, id="TestReplicaCalcScaleDownPerPodCMExternal"),
    # 20166 / (5000 x 4) = 1.008: within.
    pytest.param(4, 20.166, 5.0, 4, id="TestReplicaCalcTolerancePerPodCMObject"),
    pytest.param(3, 8.6, 2.9, 3, id="TestReplicaCalcTolerancePerPodCMExternal"),
]


@pytest.mark.parametrize(("status", "total", "target", "expected"), AVERAGE_VALUE_TARGET)
def test_average_value_target(status, total, target, expected):
    proposal = average_value_replicas(status_replicas=status, total=total, target=target)
    assert proposal.replicas == expected
