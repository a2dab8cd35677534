"""The `hpa` policy end to end: Observation in, Decision out, one sync per row, then a few
closed-loop scenarios over time (stabilization windows and rate policies across syncs).

Row comments derive the expected count by hand; targets are GPU util 70 (AverageValue)
unless a row says otherwise.
"""

import math
from dataclasses import replace

import pytest

from gpufleet.autoscaler.core.hpa.policy import (
    PODS_GPU_UTIL,
    QUEUE_DEPTH,
    AverageValue,
    HpaPolicy,
    MetricSpec,
    Utilization,
    Value,
    field_hpa,
)
from gpufleet.autoscaler.core.observation import (
    Observation,
    PodTelemetry,
    Replica,
    ReplicaState,
    Series,
)
from gpufleet.autoscaler.core.policy import Reason
from gpufleet.autoscaler.core.workload import (
    Behavior,
    RateKind,
    RatePolicy,
    ScalingRules,
    WorkloadConfig,
    default_scale_down,
    default_scale_up,
)

GPU70 = MetricSpec(source=PODS_GPU_UTIL, target=AverageValue(70))
QUEUE10 = MetricSpec(source=QUEUE_DEPTH, target=AverageValue(10))


def _obs(now=0.0, *, utils=(), starting=0, terminating=0, queue=None):
    """READY pods r0.. with `utils` (None: no telemetry), then STARTING and TERMINATING ones."""
    replicas, pods = [], []
    for i, util in enumerate(utils):
        replicas.append(Replica(name=f"r{i}", state=ReplicaState.READY, since=0, created=0))
        if util is not None:
            pods.append(PodTelemetry(pod=f"r{i}", gpu_util_percent=util))
    for i in range(starting):
        replicas.append(Replica(name=f"s{i}", state=ReplicaState.STARTING, since=0, created=0))
    for i in range(terminating):
        replicas.append(Replica(name=f"t{i}", state=ReplicaState.TERMINATING, since=0, created=0))
        pods.append(PodTelemetry(pod=f"t{i}", gpu_util_percent=0.0))  # must be ignored
    depth = Series() if queue is None else Series((now,), (queue,))
    return Observation(now=now, queue_depth=depth, pods=tuple(pods), replicas=tuple(replicas))


def _hpa(metrics=(GPU70,), *, up_window=0.0, down_window=0.0, up_tol=None, down_tol=None, **kw):
    """An HPA with default rate policies and the given windows (0 isolates one sync)."""
    bounds = {k: kw.pop(k) for k in ("min_replicas", "max_replicas") if k in kw}
    behavior = Behavior(
        scale_up=replace(
            default_scale_up(), stabilization_window_seconds=up_window, tolerance=up_tol
        ),
        scale_down=replace(
            default_scale_down(), stabilization_window_seconds=down_window, tolerance=down_tol
        ),
    )
    workload = WorkloadConfig(name="llm", behavior=behavior, **bounds)
    return HpaPolicy(workload, tuple(metrics), **kw)


# (policy, observation, desired, reason, message fragment)
ONE_SYNC = [
    pytest.param(_hpa(), _obs(), 0, Reason.STEADY, "scaling disabled", id="zero-replicas-disabled"),
    pytest.param(
        _hpa(max_replicas=3), _obs(utils=[90] * 5), 3, Reason.BOUNDED, "above max 3",
        id="current-above-max",
    ),
    pytest.param(
        _hpa(min_replicas=4), _obs(utils=[10] * 2), 4, Reason.BOUNDED, "below min 4",
        id="current-below-min",
    ),
    # avg 83 -> 83/70 = 1.186 -> ceil(4.74) = 5; the limit is max(4+4, 4 x 2) = 8.
    pytest.param(
        _hpa(), _obs(utils=[80, 85, 83, 84]), 5, Reason.SCALE_UP,
        "gpu_util avg 83.0 over 4 pods vs target 70 (ratio 1.19): 4 -> 5;"
        " scale-up limited to 8 by Pods 4/15s",
        id="scale-up-message",
    ),
    # 75/70 = 1.07: within 0.1.
    pytest.param(_hpa(), _obs(utils=[75] * 4), 4, Reason.STEADY, "4 -> 4", id="within-tolerance"),
    # 35/70 = 0.5 -> 2, but the first sync seeds the 300 s window with the current 4.
    pytest.param(
        _hpa(down_window=300), _obs(utils=[35] * 4), 4, Reason.STABILIZED,
        "recommendation 2 held at 4 by the 300s scale-down window",
        id="first-sync-scale-down-stabilized",
    ),
    # Raw 0 at the floor of 1: the window's seeded 1 is not why it stays 1, the floor is.
    pytest.param(
        _hpa(down_window=300), _obs(utils=[0]), 1, Reason.BOUNDED, "1 -> 1; bounded to [1, 100]",
        id="window-behind-the-floor-reports-bounded",
    ),
    # Terminating pods (util 0) are ignored: 70/70 = 1.
    pytest.param(
        _hpa(), _obs(utils=[70] * 4, terminating=2), 4, Reason.STEADY, "over 4 pods",
        id="terminating-ignored",
    ),
    # 140/70 = 2 over the 2 ready; the 2 starting count 0: avg 70 -> hold.
    pytest.param(
        _hpa(), _obs(utils=[140, 140], starting=2), 4, Reason.STEADY,
        "0 without metrics, 2 starting, ratio with those counted 1.00",
        id="starting-pods-hold-scale-up",
    ),
    # Missing (no telemetry, or NaN) count as the target on a scale-down: avg(35, 35, 70, 70)
    # = 52.5 -> 0.75 -> 3.
    pytest.param(
        _hpa(), _obs(utils=[35, 35, None, math.nan]), 3, Reason.SCALE_DOWN, "2 without metrics",
        id="missing-and-nan-on-scale-down",
    ),
    pytest.param(
        _hpa(), _obs(utils=[None] * 3), 3, Reason.MISSING_METRICS, "gpu_util unavailable",
        id="no-telemetry-holds",
    ),
    # GPU metric failed, queue 60/10 = 6 > 4: the HPA still scales up (limit 8).
    pytest.param(
        _hpa((GPU70, QUEUE10)), _obs(utils=[None] * 4, queue=60), 6, Reason.SCALE_UP,
        "gpu_util unavailable (no metrics for targeted pods (pods might be unready));"
        " queue_depth 60.0 vs 10 per replica over 4 (ratio 1.50) -> 6: 4 -> 6",
        id="failed-metric-other-scales-up",
    ),
    # GPU metric failed, queue 10 -> 1 < 4: no scale-down on partial data.
    pytest.param(
        _hpa((GPU70, QUEUE10)), _obs(utils=[None] * 4, queue=10), 4, Reason.MISSING_METRICS,
        "holding 4", id="failed-metric-other-scales-down-holds",
    ),
    # GPU 90 -> 6, queue 20 -> 2: the maximum, 6.
    pytest.param(
        _hpa((GPU70, QUEUE10)), _obs(utils=[90] * 4, queue=20), 6, Reason.SCALE_UP,
        "(ratio 1.29) -> 6; queue_depth 20.0 vs 10 per replica over 4 (ratio 0.50) -> 2: 4 -> 6",
        id="max-of-metrics",
    ),
    # Value target: 30/10 = 3 x 2 ready = 6 (the 2 starting are not multiplied).
    pytest.param(
        _hpa((MetricSpec(source=QUEUE_DEPTH, target=Value(10)),)),
        _obs(utils=[50, 50], starting=2, queue=30), 6, Reason.SCALE_UP, "over 2 ready",
        id="external-value",
    ),
    # Same numbers as AverageValue: ceil(30/10) = 3 < 4: scale down.
    pytest.param(
        _hpa((QUEUE10,)), _obs(utils=[50, 50], starting=2, queue=30), 3, Reason.SCALE_DOWN,
        "ratio 0.75", id="external-average-value",
    ),
    # Utilization truncates: 77.9 -> 77% -> 1.1: hold (AverageValue would give 5).
    pytest.param(
        _hpa((MetricSpec(source=PODS_GPU_UTIL, target=Utilization(70)),)),
        _obs(utils=[77.9] * 4), 4, Reason.STEADY, "gpu_util 77% over 4 pods",
        id="utilization-target",
    ),
    # 90/70 = 1.29 inside a 0.5 scale-up tolerance.
    pytest.param(
        _hpa(up_tol=0.5), _obs(utils=[90] * 4), 4, Reason.STEADY, "4 -> 4", id="scale-up-tolerance"
    ),
    # 66.5/70 = 0.95; a 0 scale-down tolerance acts on it: ceil(0.95 x 20) = 19.
    pytest.param(
        _hpa(down_tol=0.0), _obs(utils=[66.5] * 20), 19, Reason.SCALE_DOWN, "20 -> 19",
        id="scale-down-tolerance-zero",
    ),
    # Without behavior: 700/70 = 10 -> 10, capped at max(2 x 1, 4) = 4.
    pytest.param(
        _hpa(without_behavior=True), _obs(utils=[700]), 4, Reason.RATE_LIMITED,
        "scale-up limited to 4 by legacy cap max(2x1, 4)", id="legacy-cap",
    ),
    # 140/70 = 2 -> 8, max 5.
    pytest.param(
        _hpa(max_replicas=5), _obs(utils=[140] * 4), 5, Reason.BOUNDED, "bounded to [1, 5]",
        id="bounded-by-max",
    ),
    # HPAScaleToZero: from 0 an External AverageValue proposes ceil(25/10) = 3.
    pytest.param(
        _hpa((QUEUE10,), min_replicas=0, scale_to_zero=True), _obs(queue=25), 3, Reason.SCALE_UP,
        "0 -> 3", id="scale-to-zero-gate-from-zero",
    ),
    # Without the gate the floor is 1 even with min_replicas 0, and 0 replicas disable it.
    pytest.param(
        _hpa((QUEUE10,), min_replicas=0), _obs(queue=25), 0, Reason.STEADY, "scaling disabled",
        id="no-gate-zero-disabled",
    ),
    # Queue 0 proposes 0; the floor is 1 (reported as bounded).
    pytest.param(
        _hpa((QUEUE10,), min_replicas=0), _obs(utils=[0], queue=0), 1, Reason.BOUNDED, "1 -> 1",
        id="no-gate-floor-one",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("policy", "obs", "desired", "reason", "fragment"), ONE_SYNC)
def test_one_sync(policy, obs, desired, reason, fragment):
    decision = policy.decide(obs)
    assert (decision.desired, decision.reason) == (desired, reason), decision.message
    assert fragment in decision.message


def _drive(policy, util_at, *, start, until, step=15):
    """Closed loop: every replica is READY at once and reports `util_at(t, current)`."""
    current, changes = start, []
    for t in range(0, until + 1, step):
        utils = [util_at(t, current)] * current
        decision = policy.decide(_obs(t, utils=utils))
        if decision.desired != current:
            changes.append((t, decision.desired))
        current = decision.desired
    return changes


def _with_unready(ready, unready):
    """READY pods r0.. with `ready` values, then Running-but-unready (STARTING with
    telemetry: a vLLM pod loading its weights) pods u0.. with `unready` values."""
    replicas = [
        Replica(name=f"r{i}", state=ReplicaState.READY, since=0, created=0)
        for i in range(len(ready))
    ]
    replicas += [
        Replica(name=f"u{i}", state=ReplicaState.STARTING, since=0, created=0)
        for i in range(len(unready))
    ]
    pods = [PodTelemetry(pod=f"r{i}", gpu_util_percent=v) for i, v in enumerate(ready)]
    pods += [PodTelemetry(pod=f"u{i}", gpu_util_percent=v) for i, v in enumerate(unready)]
    return Observation(now=0.0, pods=tuple(pods), replicas=tuple(replicas))


@pytest.mark.parametrize(
    ("ready", "unready", "desired"),
    [
        # TestReplicaCalcScaleUpCMUnreadyHotCpuNoLessScale: a Pods metric counts an unready
        # pod's value (readiness only matters for CPU): avg(50, 10, 30) = 30 over target 15
        # -> ratio 2 -> 6. Treated as pending it would be avg(50, 10, 0) = 20 -> 4.
        pytest.param([50.0, 10.0], [30.0], 6, id="CMUnreadyHotCpuNoLessScale"),
        # TestReplicaCalcScaleUpCMUnreadyHotCpuScaleWouldScaleDown: avg(15, 50, 30) =
        # 31.666 -> ratio 2.11 -> ceil(6.33) = 7 (as pending: 15 vs 15, no change).
        pytest.param([15.0], [50.0, 30.0], 7, id="CMUnreadyHotCpuScaleWouldScaleDown"),
    ],
)
def test_pods_metric_counts_running_but_unready_pods(ready, unready, desired):
    spec = MetricSpec(source=PODS_GPU_UTIL, target=AverageValue(15))
    decision = _hpa((spec,), max_replicas=10).decide(_with_unready(ready, unready))
    assert decision.desired == desired


def test_scale_down_waits_for_the_300s_window():
    # Util 35 -> raw ceil(0.5 x n). The seeded 4 and every raw 2 recorded at t=0 leave the
    # window at t=300 (age exactly 300); the new 2 is then held until 600 by the raw 2s.
    changes = _drive(_hpa(down_window=300), lambda t, n: 35, start=4, until=600)
    assert changes == [(300, 2), (600, 1)]


def test_scale_up_window_delays_then_follows():
    # field_hpa: up window 60. Util 90 on 4 -> raw 6, held by the seeded 4 until it is 60 s
    # old; on 6 pods raw 8 is held by the 6s recorded at 15..60 until they age out at 120.
    changes = _drive(field_hpa(WorkloadConfig(name="llm")), lambda t, n: 90, start=4, until=120)
    assert changes == [(60, 6), (120, 8)]


def test_rate_policies_compound_each_period():
    # Default scale-up from 1 at util 1000 (raw = ceil(14.3 n)): 1 -> max(1+4, 2) = 5,
    # then max(9, 10) = 10, 20, 40, then max 50.
    policy = _hpa(max_replicas=50)
    changes = _drive(policy, lambda t, n: 1000, start=1, until=60)
    assert changes == [(0, 5), (15, 10), (30, 20), (45, 40), (60, 50)]


def test_rate_period_longer_than_the_sync():
    # Pods 4 per 60 s: +4 at t=0, then nothing until that event is 60 s old.
    rules = ScalingRules(
        stabilization_window_seconds=0, policies=(RatePolicy(RateKind.PODS, 4, 60),)
    )
    workload = WorkloadConfig(name="llm", behavior=Behavior(scale_up=rules))
    changes = _drive(HpaPolicy(workload, (GPU70,)), lambda t, n: 1000, start=1, until=120)
    assert changes == [(0, 5), (60, 9), (120, 13)]


def test_legacy_window_keeps_growing_toward_a_recent_peak():
    # Without behavior the flag's 300 s window returns the highest recent recommendation,
    # even above the current count, and only the max(2n, 4) cap slows it. Util 1000 until
    # t=45: raw 15, 58, 115 at t=0, 15, 30 (ceil(14.29 n)). The load then drops to util 35
    # (raw ceil(0.5 n)), yet the 115 keeps doubling the count to max 100; it leaves the
    # window at t=330, when the highest is the raw 50 recorded at 100 replicas.
    policy = _hpa(without_behavior=True, max_replicas=100)
    changes = _drive(policy, lambda t, n: 1000 if t < 45 else 35, start=1, until=400)
    assert changes == [(0, 4), (15, 8), (30, 16), (45, 32), (60, 64), (75, 100), (330, 50)]


@pytest.mark.parametrize(
    ("source", "target"),
    [
        pytest.param(PODS_GPU_UTIL, Value(70), id="value-on-pods"),
        pytest.param(QUEUE_DEPTH, Utilization(70), id="utilization-on-external"),
        pytest.param(QUEUE_DEPTH, AverageValue(0), id="zero-target"),
    ],
)
def test_metric_spec_rejects(source, target):
    with pytest.raises(ValueError):
        MetricSpec(source=source, target=target)


def test_needs_a_metric():
    with pytest.raises(ValueError, match="at least one metric"):
        HpaPolicy(WorkloadConfig(name="llm"), ())


def test_field_hpa():
    policy = field_hpa(WorkloadConfig(name="llm"), target_util=60, scale_up_window_s=30)
    assert (policy.name, policy.interval_seconds) == ("hpa", 15.0)
    # 66/60 = 1.1 exactly: within; the target really is 60.
    assert policy.decide(_obs(utils=[66] * 4)).desired == 4
