"""KEDA's fallback value, row by row from KEDA's `pkg/fallback/fallback_test.go` (ported
as facts: inputs and the value KEDA serves) and `doFallback`'s arithmetic."""

import pytest

from gpufleet.autoscaler.core.keda_fallback import Fallback, FallbackBehavior, fallback_value

B = FallbackBehavior

# (behavior, fallback replicas, current, target, per_replica, ready, served value)
VALUES = [
    # "should return a normalised metric when number of failures are beyond threshold":
    # replicas 10 x target 10.
    pytest.param(B.STATIC, 10, 5, 10, True, 5, 100.0, id="static-normalised"),
    # "should ignore current replicas when behavior is 'static'" (current 15).
    pytest.param(B.STATIC, 10, 15, 10, True, 15, 100.0, id="static-ignores-current"),
    # "should use current replicas when behavior is 'currentReplicas'": 6 x 10.
    pytest.param(B.CURRENT_REPLICAS, 10, 6, 10, True, 6, 60.0, id="current-replicas"),
    # "should use fallback replicas when current replicas is lower when behavior is
    # 'currentReplicasIfHigher'": current 4 < 10 -> 10 x 10.
    pytest.param(B.CURRENT_REPLICAS_IF_HIGHER, 10, 4, 10, True, 4, 100.0, id="if-higher-low"),
    pytest.param(B.CURRENT_REPLICAS_IF_HIGHER, 10, 12, 10, True, 12, 120.0, id="if-higher-high"),
    pytest.param(B.CURRENT_REPLICAS_IF_LOWER, 10, 4, 10, True, 4, 40.0, id="if-lower-low"),
    pytest.param(B.CURRENT_REPLICAS_IF_LOWER, 10, 12, 10, True, 12, 100.0, id="if-lower-high"),
    # Value: replicas / ready pods x target, so that the HPA's ceil(ratio x ready) = 10.
    pytest.param(B.STATIC, 10, 4, 10, False, 4, 25.0, id="value-divides-by-ready"),
    pytest.param(B.STATIC, 10, 4, 10, False, 0, None, id="value-no-ready-pods-fails"),
    # A milli-quantity truncated toward zero: 1000 x 1/3 = 333.33 -> 333 milli.
    pytest.param(B.STATIC, 1, 3, 1, False, 3, 0.333, id="milli-truncated"),
]


@pytest.mark.parametrize(
    ("behavior", "replicas", "current", "target", "per_replica", "ready", "expected"), VALUES
)
def test_fallback_value(behavior, replicas, current, target, per_replica, ready, expected):
    fallback = Fallback(failure_threshold=3, replicas=replicas, behavior=behavior)
    served = fallback_value(
        fallback,
        target=target,
        per_replica=per_replica,
        current_replicas=current,
        ready_replicas=ready,
    )
    assert served == expected


def test_the_default_behavior_is_static():
    assert Fallback(failure_threshold=3, replicas=10).behavior is B.STATIC


@pytest.mark.parametrize(
    ("failures", "exceeded"),
    # "should bump the number of failures": 0 -> 1 still propagates the error;
    # "beyond threshold": 3 -> 4 > 3 serves the fallback.
    [(1, False), (3, False), (4, True)],
    ids=["first-failure", "at-threshold", "beyond-threshold"],
)
def test_exceeded(failures, exceeded):
    assert Fallback(failure_threshold=3, replicas=10).exceeded(failures) is exceeded


def test_negative_numbers_are_rejected_with_kedas_text():
    # "should return error when fallback is enabled but scaledobject has invalid parameter"
    with pytest.raises(ValueError, match=r"^FailureThreshold=-3 & Replicas=10 must both be"):
        Fallback(failure_threshold=-3, replicas=10)
