"""HPA normalization, row by row: stabilization windows, rate policies with their rounding,
selectPolicy, the legacy cap without behavior, and the min/max bounds.

Each row's comment derives the expected count by hand from `horizontal.go`'s rules.
"""

import pytest

from gpufleet.autoscaler.core.behavior import (
    Bounds,
    History,
    Stamped,
    limit_legacy,
    limit_with_behavior,
    rate_limit,
    record_initial,
    record_scale,
    stabilize,
    stabilize_legacy,
)
from gpufleet.autoscaler.core.workload import (
    Behavior,
    RateKind,
    RatePolicy,
    ScalingRules,
    SelectPolicy,
    default_scale_down,
    default_scale_up,
)

PODS, PERCENT = RateKind.PODS, RateKind.PERCENT


def _rules(*policies, select=SelectPolicy.MAX, window=0.0):
    return ScalingRules(
        stabilization_window_seconds=window, policies=tuple(policies), select_policy=select
    )


def _behavior(up_window=0.0, down_window=300.0):
    return Behavior(
        scale_up=_rules(RatePolicy(PODS, 4, 15), RatePolicy(PERCENT, 100, 15), window=up_window),
        scale_down=_rules(RatePolicy(PERCENT, 100, 15), window=down_window),
    )


def _recs(*pairs):
    return History(recommendations=tuple(Stamped(t, r) for t, r in pairs))


# (history (t, replicas), now, current, desired, up window, down window, expected)
STABILIZE = [
    # Down window: max(4, 10, 6, 5) = 10 -> stays at the current 10.
    pytest.param([(0, 10), (100, 6), (200, 5)], 250, 10, 4, 0, 300, 10, id="down-window-max"),
    # At 301 the 10 (age 301) has left the window: max(4, 6, 5) = 6.
    pytest.param([(0, 10), (100, 6), (200, 5)], 301, 10, 4, 0, 300, 6, id="down-window-expiry"),
    # Age exactly 300 is outside (`After(cutoff)` is strict): max(4, 6, 5) = 6.
    pytest.param([(0, 10), (100, 6), (200, 5)], 300, 10, 4, 0, 300, 6, id="down-window-edge"),
    # A down window of 0 applies the raw recommendation.
    pytest.param([(0, 10)], 15, 10, 4, 0, 0, 4, id="down-window-zero"),
    # Up window: min(10, 4, 6, 8) = 4 -> the current 4, no scale-up yet.
    pytest.param([(0, 4), (15, 6), (30, 8)], 45, 4, 10, 60, 300, 4, id="up-window-min"),
    # At 60 the 4 is exactly 60 s old and out: min(10, 6, 8) = 6.
    pytest.param([(0, 4), (15, 6), (30, 8)], 60, 4, 10, 60, 300, 6, id="up-window-expiry"),
    # Default up window 0: the raw 10 is applied at once, past recommendations aside.
    pytest.param([(0, 4), (15, 6)], 30, 4, 10, 0, 300, 10, id="up-window-zero"),
    # Between the windows' limits the current count wins: up min 3, down max 7, current 5.
    pytest.param([(0, 3), (10, 7)], 20, 5, 5, 60, 300, 5, id="current-between-limits"),
]


@pytest.mark.parametrize(
    ("history", "now", "current", "desired", "up", "down", "expected"), STABILIZE
)
def test_stabilize(history, now, current, desired, up, down, expected):
    behavior = _behavior(up_window=up, down_window=down)
    got, after = stabilize(
        _recs(*history), now=now, current=current, desired=desired, behavior=behavior
    )
    assert got == expected
    assert after.recommendations[-1] == Stamped(now, desired)  # the raw value is recorded


def test_stabilize_forgets_what_no_window_can_reach():
    history = _recs((0, 10), (100, 6))
    _, after = stabilize(history, now=350, current=6, desired=6, behavior=_behavior(0, 300))
    assert after.recommendations == (Stamped(100, 6), Stamped(350, 6))


def test_initial_recommendation_is_the_current_count_once():
    seeded = record_initial(History(), now=0, current=7)
    assert seeded.recommendations == (Stamped(0, 7),)
    assert record_initial(seeded, now=15, current=3) is seeded


# (history, now, desired, expected) with the flag's 300 s window
STABILIZE_LEGACY = [
    pytest.param([(0, 8)], 100, 3, 8, id="max-in-window"),
    pytest.param([(0, 8)], 300, 3, 3, id="expired-at-window"),
    pytest.param([(0, 2)], 100, 5, 5, id="scale-up-not-delayed"),
]


@pytest.mark.parametrize(("history", "now", "desired", "expected"), STABILIZE_LEGACY)
def test_stabilize_legacy(history, now, desired, expected):
    got, _ = stabilize_legacy(_recs(*history), now=now, desired=desired, window_seconds=300)
    assert got == expected


def _events(ups=(), downs=()):
    return History(
        scale_ups=tuple(Stamped(t, n) for t, n in ups),
        scale_downs=tuple(Stamped(t, n) for t, n in downs),
    )


# (rules, current, history, up?, expected limit, policy named)
RATE = [
    # Defaults up: Pods 3+4 = 7 vs Percent ceil(3 x 2) = 6; Max picks 7.
    pytest.param(default_scale_up(), 3, _events(), True, 7, "Pods 4/15s", id="up-default-pods"),
    # 10+4 = 14 vs ceil(10 x 2) = 20; Max picks 20.
    pytest.param(
        default_scale_up(), 10, _events(), True, 20, "Percent 100%/15s", id="up-default-percent"
    ),
    # Equal (4+4 = 8 = 4 x 2): the first listed policy is named.
    pytest.param(default_scale_up(), 4, _events(), True, 8, "Pods 4/15s", id="up-tie-first"),
    # selectPolicy Min: min(14, 20) = 14.
    pytest.param(
        _rules(RatePolicy(PODS, 4, 15), RatePolicy(PERCENT, 100, 15), select=SelectPolicy.MIN),
        10,
        _events(),
        True,
        14,
        "Pods 4/15s",
        id="up-select-min",
    ),
    pytest.param(
        _rules(RatePolicy(PODS, 4, 15), select=SelectPolicy.DISABLED),
        10,
        _events(),
        True,
        10,
        "selectPolicy Disabled",
        id="up-disabled",
    ),
    # +4 added 10 s ago, inside the 15 s period: period start 8-4 = 4 -> max(4+4, 4 x 2) = 8.
    pytest.param(
        default_scale_up(), 8, _events(ups=[(90, 4)]), True, 8, "Pods 4/15s", id="up-period-start"
    ),
    # The same event 15 s old is out of the period: start 8 -> max(12, 16) = 16.
    pytest.param(
        default_scale_up(),
        8,
        _events(ups=[(85, 4)]),
        True,
        16,
        "Percent 100%/15s",
        id="up-event-expired",
    ),
    # Removed pods raise the period start: 6 + 2 removed = 8 -> Pods 1 gives 9.
    pytest.param(
        _rules(RatePolicy(PODS, 1, 60)),
        6,
        _events(downs=[(50, 2)]),
        True,
        9,
        "Pods 1/60s",
        id="up-after-down",
    ),
    # Percent up rounds up: ceil(5 x 1.1 = 5.5) = 6; from 1, ceil(1.1) = 2 always adds one.
    pytest.param(
        _rules(RatePolicy(PERCENT, 10, 60)),
        5,
        _events(),
        True,
        6,
        "Percent 10%/60s",
        id="up-percent-ceil",
    ),
    pytest.param(
        _rules(RatePolicy(PERCENT, 10, 60)),
        1,
        _events(),
        True,
        2,
        "Percent 10%/60s",
        id="up-percent-min-one",
    ),
    # The controller's float64: 50 x (1 + 10/100) = 55.00000000000001 -> ceil 56, not 55.
    pytest.param(
        _rules(RatePolicy(PERCENT, 10, 60)),
        50,
        _events(),
        True,
        56,
        "Percent 10%/60s",
        id="up-percent-float64",
    ),
    # Defaults down: Percent 100 -> int(10 x 0) = 0.
    pytest.param(
        default_scale_down(), 10, _events(), False, 0, "Percent 100%/15s", id="down-default"
    ),
    # Percent down truncates: int(5 x 0.9 = 4.5) = 4; int(1 x 0.9) = 0; int(5 x 0.5) = 2.
    pytest.param(
        _rules(RatePolicy(PERCENT, 10, 60)),
        5,
        _events(),
        False,
        4,
        "Percent 10%/60s",
        id="down-percent-trunc",
    ),
    pytest.param(
        _rules(RatePolicy(PERCENT, 10, 60)),
        1,
        _events(),
        False,
        0,
        "Percent 10%/60s",
        id="down-percent-to-zero",
    ),
    # float64 again: 90 x (1 - 30/100) = 62.99999999999999 -> 62.
    pytest.param(
        _rules(RatePolicy(PERCENT, 30, 60)),
        90,
        _events(),
        False,
        62,
        "Percent 30%/60s",
        id="down-percent-float64",
    ),
    # Pods 1 -> 4 vs Percent 50 -> int(2.5) = 2: Max (biggest change) picks 2, Min picks 4.
    pytest.param(
        _rules(RatePolicy(PODS, 1, 60), RatePolicy(PERCENT, 50, 60)),
        5,
        _events(),
        False,
        2,
        "Percent 50%/60s",
        id="down-select-max",
    ),
    pytest.param(
        _rules(RatePolicy(PODS, 1, 60), RatePolicy(PERCENT, 50, 60), select=SelectPolicy.MIN),
        5,
        _events(),
        False,
        4,
        "Pods 1/60s",
        id="down-select-min",
    ),
    # 2 removed within 60 s: start 4 + 2 = 6 -> Pods 1 gives 5, above current: no removal yet.
    pytest.param(
        _rules(RatePolicy(PODS, 1, 60)),
        4,
        _events(downs=[(70, 2)]),
        False,
        5,
        "Pods 1/60s",
        id="down-period-start",
    ),
]


@pytest.mark.parametrize(("rules", "current", "history", "up", "limit", "named"), RATE)
def test_rate_limit(rules, current, history, up, limit, named):
    assert rate_limit(history, now=100, current=current, rules=rules, up=up) == (limit, named)


# (behavior, current, stabilized, bounds, history, expected replicas, limited_by)
LIMIT = [
    # Up 3 -> 10 under defaults: max(3+4, 6) = 7, below max 20: rate.
    pytest.param(Behavior(), 3, 10, Bounds(1, 20), _events(), 7, "rate", id="up-rate-limited"),
    # Same, max 5 below the rate limit: bounds.
    pytest.param(Behavior(), 3, 10, Bounds(1, 5), _events(), 5, "bounds", id="up-bounded-by-max"),
    # Limit 7 equals max 7: the controller reports TooManyReplicas, i.e. bounds.
    pytest.param(Behavior(), 3, 10, Bounds(1, 7), _events(), 7, "bounds", id="up-limit-equals-max"),
    pytest.param(Behavior(), 3, 6, Bounds(1, 20), _events(), 6, "", id="up-within-limits"),
    # Down 10 -> 0 under defaults (limit 0): floored at min 2.
    pytest.param(
        Behavior(), 10, 0, Bounds(2, 20), _events(), 2, "bounds", id="down-bounded-by-min"
    ),
    # Pods 1/60 down: 10 -> 9 at most.
    pytest.param(
        Behavior(scale_down=_rules(RatePolicy(PODS, 1, 60))),
        10,
        3,
        Bounds(1, 20),
        _events(),
        9,
        "rate",
        id="down-rate-limited",
    ),
    # Events push the limit below current (start 4 -> Pods 2 gives 6 < 8): hold at 8.
    pytest.param(
        Behavior(scale_up=_rules(RatePolicy(PODS, 2, 15))),
        8,
        12,
        Bounds(1, 20),
        _events(ups=[(95, 4)]),
        8,
        "rate",
        id="up-limit-below-current",
    ),
    # Disabled scale-down pins the count.
    pytest.param(
        Behavior(scale_down=_rules(RatePolicy(PODS, 1, 60), select=SelectPolicy.DISABLED)),
        10,
        3,
        Bounds(1, 20),
        _events(),
        10,
        "rate",
        id="down-disabled",
    ),
    pytest.param(Behavior(), 5, 5, Bounds(1, 20), _events(), 5, "", id="no-change"),
]


@pytest.mark.parametrize(
    ("behavior", "current", "stabilized", "bounds", "history", "expected", "by"), LIMIT
)
def test_limit_with_behavior(behavior, current, stabilized, bounds, history, expected, by):
    got = limit_with_behavior(
        history, now=100, current=current, stabilized=stabilized, behavior=behavior, bounds=bounds
    )
    assert (got.replicas, got.limited_by) == (expected, by)


# (current, stabilized, bounds, expected, limited_by): no behavior, cap max(2 x current, 4)
LEGACY = [
    pytest.param(1, 10, Bounds(1, 100), 4, "rate", id="cap-minimum-4"),
    pytest.param(3, 10, Bounds(1, 100), 6, "rate", id="cap-double"),
    pytest.param(10, 30, Bounds(1, 100), 20, "rate", id="cap-double-large"),
    pytest.param(3, 10, Bounds(1, 5), 5, "bounds", id="max-below-cap"),
    pytest.param(5, 0, Bounds(2, 100), 2, "bounds", id="floored-at-min"),
    # No rate limit on the way down without behavior: 10 -> 1 in one sync.
    pytest.param(10, 1, Bounds(1, 100), 1, "", id="down-unlimited"),
]


@pytest.mark.parametrize(("current", "stabilized", "bounds", "expected", "by"), LEGACY)
def test_limit_legacy(current, stabilized, bounds, expected, by):
    got = limit_legacy(current=current, stabilized=stabilized, bounds=bounds)
    assert (got.replicas, got.limited_by) == (expected, by)


def test_record_scale_keeps_events_within_the_longest_period():
    behavior = Behavior(scale_up=_rules(RatePolicy(PODS, 4, 15), RatePolicy(PODS, 8, 60)))
    history = _events(ups=[(0, 2), (50, 3)])
    after = record_scale(history, now=100, previous=5, new=9, behavior=behavior)
    # The event at 0 is 100 s old, past the longest period (60 s): forgotten.
    assert after.scale_ups == (Stamped(50, 3), Stamped(100, 4))
    after = record_scale(after, now=115, previous=9, new=6, behavior=behavior)
    assert after.scale_downs == (Stamped(115, 3),)
    assert record_scale(after, now=130, previous=6, new=6, behavior=behavior) is after
