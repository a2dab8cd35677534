"""The `keda` policy: activation and cooldown on KEDA's polling schedule, 1 -> N through the HPA.

Scenarios run the policy in a closed loop every 15 s (the HPA sync) with every replica
READY at once, and compare the times at which the count changed. Polls fall at 0, 30,
60, ... with the default 30 s polling interval.
"""

import math

import pytest

from gpufleet.autoscaler.core.keda import KedaPolicy, MetricType, field_keda
from gpufleet.autoscaler.core.keda_fallback import Fallback
from gpufleet.autoscaler.core.observation import Observation, Replica, ReplicaState, Series
from gpufleet.autoscaler.core.policy import Reason
from gpufleet.autoscaler.core.workload import Behavior, WorkloadConfig


def _obs(now, queue, current):
    replicas = tuple(
        Replica(name=f"r{i}", state=ReplicaState.READY, since=0, created=0) for i in range(current)
    )
    depth = Series() if queue is None else Series((now,), (queue,))
    return Observation(now=now, queue_depth=depth, replicas=replicas)


def _drive(policy, queue_at, *, start, until):
    """Changes of the replica count as (t, desired, reason); `queue_at(t)` None = no sample."""
    current, changes = start, []
    for t in range(0, until + 1, 15):
        decision = policy.decide(_obs(t, queue_at(t), current))
        if decision.desired != current:
            changes.append((t, decision.desired, decision.reason))
        current = decision.desired
    return changes


def _keda(min_replicas=0, max_replicas=100, **kw):
    workload = WorkloadConfig(name="llm", min_replicas=min_replicas, max_replicas=max_replicas)
    return KedaPolicy(workload, **kw)


ACT, DEACT = Reason.ACTIVATE, Reason.DEACTIVATE

# (policy, queue(t), start replicas, until, expected changes)
SCENARIOS = [
    # Work arrives at t=15, between polls: activation waits for the poll at 30.
    pytest.param(
        _keda(), lambda t: 5.0 if t >= 15 else 0.0, 0, 45, [(30, 1, ACT)],
        id="activation-waits-for-poll",
    ),
    # A 60 s polling interval: polls at 0, 60; activation at 60.
    pytest.param(
        _keda(polling_interval_seconds=60), lambda t: 5.0 if t >= 15 else 0.0, 0, 75,
        [(60, 1, ACT)], id="activation-polling-60s",
    ),
    # Active means value > activationThreshold: 5 is not above 5.
    pytest.param(_keda(activation_threshold=5), lambda t: 5.0, 0, 120, [], id="threshold-strict"),
    pytest.param(
        _keda(activation_threshold=5), lambda t: 5.5, 0, 15, [(0, 1, ACT)], id="threshold-exceeded"
    ),
    # minReplicaCount 2: activation goes straight to 2.
    pytest.param(_keda(min_replicas=2), lambda t: 1.0, 0, 15, [(0, 2, ACT)], id="activate-to-min"),
    # Last active at the poll at 60; inactive from 75; cooldown 300 s: 0 at the poll at 360.
    pytest.param(
        _keda(), lambda t: 5.0 if t <= 60 else 0.0, 1, 400, [(360, 0, DEACT)],
        id="deactivate-after-cooldown-since-last-active",
    ),
    # A shorter cooldown, 60 s: last active 60 -> the poll at 120.
    pytest.param(
        _keda(cooldown_seconds=60), lambda t: 5.0 if t <= 60 else 0.0, 1, 200, [(120, 0, DEACT)],
        id="cooldown-60s",
    ),
    # The queue is active on every poll (though tiny), so no scale-to-zero at all.
    pytest.param(_keda(), lambda t: 0.5, 1, 900, [], id="active-never-deactivates"),
    # minReplicaCount 1: KEDA never deactivates; the HPA floor is 1.
    pytest.param(_keda(min_replicas=1), lambda t: 0.0, 1, 900, [], id="min-one-never-zero"),
    # Never active since creation: initialCooldownPeriod (default 0) counts from creation,
    # so the first poll scales to 0 (as KEDA does with an idle trigger at creation).
    pytest.param(_keda(), lambda t: 0.0, 1, 60, [(0, 0, DEACT)], id="idle-from-creation"),
    pytest.param(
        _keda(initial_cooldown_seconds=120), lambda t: 0.0, 1, 200, [(120, 0, DEACT)],
        id="initial-cooldown",
    ),
    # Serving before its first decision (the replay's warm start): last active then, so an
    # idle start waits out the cooldown (300 s: the poll at 300), not 0 at the first poll.
    pytest.param(
        _keda(active_at_start=True), lambda t: 0.0, 1, 400, [(300, 0, DEACT)],
        id="active-at-start",
    ),
    # 1 -> N is the HPA's (legacy, KEDA sets no behavior): ceil(45/10) = 5 capped at
    # max(2 x 1, 4) = 4; then ceil(45/10) = 5 vs 45/(10 x 4) = 1.125: 5.
    pytest.param(
        _keda(), lambda t: 45.0, 1, 30, [(0, 4, Reason.RATE_LIMITED), (15, 5, Reason.SCALE_UP)],
        id="hpa-average-value-legacy",
    ),
    # With HPA default behavior: limit max(1+4, 1 x 2) = 5, so 5 at once.
    pytest.param(
        _keda(hpa_behavior=Behavior()), lambda t: 45.0, 1, 30, [(0, 5, Reason.SCALE_UP)],
        id="hpa-average-value-default-behavior",
    ),
    # Full cycle: activate at the poll at 30, grow on the HPA syncs (1 -> cap 4 -> cap 8 ->
    # ceil(100/10) = 10), then an empty queue from 120. The HPA's 300 s window would hold
    # 10 until the last raw 10 (t=105) ages out at 405, but KEDA's cooldown since the last
    # active poll (90) ends at 390 and its 1 -> 0 step takes 10 replicas straight to 0.
    pytest.param(
        _keda(), lambda t: 100.0 if 30 <= t < 120 else 0.0, 0, 450,
        [(30, 1, ACT), (45, 4, Reason.RATE_LIMITED), (60, 8, Reason.RATE_LIMITED),
         (75, 10, Reason.SCALE_UP), (390, 0, DEACT)],
        id="full-cycle",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("policy", "queue_at", "start", "until", "expected"), SCENARIOS)
def test_scenarios(policy, queue_at, start, until, expected):
    assert _drive(policy, queue_at, start=start, until=until) == expected


def test_a_poll_is_never_more_than_an_interval_off_when_time_goes_back():
    """The live loop's time goes back where the controller's clock was ahead before
    Prometheus' was read: the poll set a minute ahead held every count a minute more."""
    policy = _keda()
    assert policy.decide(_obs(1060, 0.0, 0)).desired == 0  # a poll, on the clock ahead
    waiting = policy.decide(_obs(1000, 5.0, 0))
    assert waiting.desired == 0 and waiting.message.endswith("poll at 1030s")  # not 1090
    assert policy.decide(_obs(1030, 5.0, 0)).desired == 1


def test_activation_message_names_the_poll():
    policy = _keda()
    policy.decide(_obs(0, 0.0, 0))
    waiting = policy.decide(_obs(15, 12.0, 0))
    assert (waiting.desired, waiting.reason) == (0, Reason.STEADY)
    assert waiting.message == (
        "idle at 0 replicas: queue_depth 12.0 > activation 0, waiting for the KEDA poll at 30s"
    )
    active = policy.decide(_obs(30, 12.0, 0))
    assert (active.desired, active.message) == (1, "queue_depth 12.0 > activation 0: 0 -> 1")


# Missing data. (policy, queue(t), start, until, expected changes)
MISSING = [
    # ignoreNullValues (default): a gap reads as 0 on both paths. The HPA's 300 s window
    # holds the seeded 3 until t=300, then the raw 0 is clamped to its floor 1 (min 1).
    pytest.param(
        _keda(min_replicas=1), lambda t: None, 3, 600, [(300, 1, Reason.BOUNDED)],
        id="gap-reads-as-zero",
    ),
    # NaN is a null too.
    pytest.param(
        _keda(min_replicas=1), lambda t: math.nan, 3, 600, [(300, 1, Reason.BOUNDED)],
        id="nan-reads-as-zero",
    ),
    # A gap after activity counts as inactive: cooldown since the last active poll (60).
    pytest.param(
        _keda(), lambda t: 5.0 if t <= 60 else None, 1, 400, [(360, 0, DEACT)],
        id="gap-after-activity-deactivates-after-cooldown",
    ),
    # ignoreNullValues off: a gap is a trigger error. KEDA changes nothing and the HPA
    # holds its count: no scale-down at all, even to zero with min 0.
    pytest.param(
        _keda(ignore_null_values=False), lambda t: 5.0 if t <= 60 else None, 3, 900, [],
        id="trigger-error-holds",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("policy", "queue_at", "start", "until", "expected"), MISSING)
def test_missing_data(policy, queue_at, start, until, expected):
    assert _drive(policy, queue_at, start=start, until=until) == expected


def _failing(**kw):
    return _keda(ignore_null_values=False, **kw)


# Fallback, idleReplicaCount and the Value metric type. Each sync is one read of the
# trigger by the HPA, and each poll (0, 30, ...) one more, as KEDA's metrics server and
# its scale loop both read it. (policy, queue(t), start, until, expected changes)
KEDA_SPEC = [
    # failureThreshold 3: reads fail at 0 (HPA, poll), 15 (HPA); the HPA's read at 30 is
    # the 4th: KEDA serves 6 x 10 = 60, ceil(60/10) = 6, legacy cap max(2 x 2, 4) = 4;
    # then 6 at 45.
    pytest.param(
        _failing(min_replicas=1, fallback=Fallback(failure_threshold=3, replicas=6)),
        lambda t: None, 2, 60, [(30, 4, Reason.RATE_LIMITED), (45, 6, Reason.SCALE_UP)],
        id="fallback-static-after-threshold",
    ),
    # At 0 replicas the HPA does nothing; the poll at 30 sees the trigger on its fallback,
    # counts it active and activates; the HPA then takes it to the fallback's 3.
    pytest.param(
        _failing(fallback=Fallback(failure_threshold=3, replicas=3)),
        lambda t: None, 0, 60, [(30, 1, ACT), (45, 3, Reason.SCALE_UP)],
        id="fallback-activates-from-zero",
    ),
    # A good read resets the count: failures never run 4 in a row, so no fallback.
    pytest.param(
        _failing(min_replicas=1, fallback=Fallback(failure_threshold=3, replicas=6)),
        lambda t: None if t % 45 else 10.0, 2, 120, [],
        id="fallback-count-resets-on-success",
    ),
    # An erroring, inactive trigger with fallback.replicas 0 falls through to the
    # scale-in case: 0 after the cooldown since last active (60); with replicas 2 it holds.
    pytest.param(
        _failing(fallback=Fallback(failure_threshold=100, replicas=0)),
        lambda t: 5.0 if t <= 60 else None, 3, 400, [(360, 0, DEACT)],
        id="error-with-fallback-zero-scales-in",
    ),
    pytest.param(
        _failing(fallback=Fallback(failure_threshold=100, replicas=2)),
        lambda t: 5.0 if t <= 60 else None, 3, 400, [],
        id="error-with-fallback-holds",
    ),
    # idleReplicaCount 0 with minReplicaCount 2: inactive -> 0 after the cooldown, active
    # again -> minReplicaCount.
    pytest.param(
        _keda(min_replicas=2, idle_replica_count=0),
        lambda t: 5.0 if t <= 60 or t >= 420 else 0.0, 2, 450, [(360, 0, DEACT), (420, 2, ACT)],
        id="idle-replica-count",
    ),
    pytest.param(
        _keda(min_replicas=2), lambda t: 5.0 if t <= 60 else 0.0, 2, 450, [],
        id="no-idle-replica-count-keeps-min",
    ),
    # Value: the whole queue against the target, times the ready pods. 45/10 = 4.5 ->
    # ceil(4.5 x 1) = 5, cap 4; ceil(4.5 x 4) = 18, cap 8; ... the queue never divides by
    # the replicas, so a standing queue keeps growing the count (AverageValue stops at 5).
    pytest.param(
        _keda(min_replicas=1, metric_type=MetricType.VALUE), lambda t: 45.0, 1, 30,
        [(0, 4, Reason.RATE_LIMITED), (15, 8, Reason.RATE_LIMITED), (30, 16, Reason.RATE_LIMITED)],
        id="value-metric-type",
    ),
    # Value: 5/10 = 0.5 -> ceil(0.5 x 4) = 2, after the 300 s downscale window.
    pytest.param(
        _keda(min_replicas=1, metric_type=MetricType.VALUE), lambda t: 5.0, 4, 330,
        [(300, 2, Reason.SCALE_DOWN)],
        id="value-metric-type-scale-down",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("policy", "queue_at", "start", "until", "expected"), KEDA_SPEC)
def test_fallback_idle_and_value(policy, queue_at, start, until, expected):
    assert _drive(policy, queue_at, start=start, until=until) == expected


def test_fallback_activation_is_explained():
    policy = _failing(fallback=Fallback(failure_threshold=0, replicas=3))
    decision = policy.decide(_obs(0, None, 0))
    assert (decision.desired, decision.reason) == (1, ACT)
    assert decision.message == "queue_depth failing, fallback active: 0 -> 1"


@pytest.mark.parametrize(
    ("min_replicas", "idle", "message"),
    [
        (0, 1, "IdleReplicaCount=1 must be less than MinReplicaCount=1"),
        (2, 2, "IdleReplicaCount=2 must be less than MinReplicaCount=2"),
    ],
    ids=["idle-at-hpa-min", "idle-equal-to-min"],
)
def test_idle_replica_count_below_min(min_replicas, idle, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        _keda(min_replicas=min_replicas, idle_replica_count=idle)


def test_trigger_error_is_reported_as_missing_metrics():
    decision = _keda(ignore_null_values=False).decide(_obs(0, None, 3))
    assert (decision.desired, decision.reason) == (3, Reason.MISSING_METRICS)
    assert "queue_depth unavailable (no sample)" in decision.message


def test_cooling_down_is_explained():
    policy = _keda()
    policy.decide(_obs(0, 5.0, 1))
    decision = policy.decide(_obs(30, 0.0, 1))
    assert decision.desired == 1
    assert decision.message.endswith("; KEDA inactive, 1 -> 0 from 300s")


def test_field_keda():
    policy = field_keda(WorkloadConfig(name="llm", min_replicas=0), queue_target=5)
    assert (policy.name, policy.interval_seconds) == ("keda", 15.0)
    # 1 replica, queue 12: ceil(12/5) = 3 (legacy cap 4): the target really is 5.
    assert policy.decide(_obs(0, 12.0, 1)).desired == 3


def test_polling_interval_must_be_positive():
    with pytest.raises(ValueError):
        _keda(polling_interval_seconds=0)
