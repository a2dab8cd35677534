"""The pure health decisions: NVIDIA's XID policy, the per-GPU state machine, group marking."""

from dataclasses import replace

import pytest

from gpufleet.plugin.health import (
    DEFAULT_IGNORED_XIDS,
    GpuCondition,
    HealthPolicy,
    HealthState,
    IllegalTransition,
    Reason,
    XidEvent,
    _move,
    device_health,
    is_critical,
    on_event,
    on_probe,
    parse_health_policy,
)
from gpufleet.plugin.model import Health

H, U, R = GpuCondition.HEALTHY, GpuCondition.UNHEALTHY, GpuCondition.RECOVERING

# --- policy ------------------------------------------------------------------------

POLICY_ROWS = [
    # (id, DP_DISABLE_HEALTHCHECKS, DP_ENABLE_HEALTHCHECKS, xid, critical)
    ("default-79-critical", "", "", 79, True),
    ("default-48-critical", "", "", 48, True),
    *[(f"default-ignores-{x}", "", "", x, False) for x in sorted(DEFAULT_IGNORED_XIDS)],
    ("disable-all", "all", "", 79, False),
    ("disable-xids", "xids", "", 79, False),
    ("disable-case-insensitive", "ALL", "", 79, False),
    ("disable-list-adds", "79, 48", "", 79, False),
    ("disable-list-keeps-others", "79,48", "", 94, True),
    ("disable-list-keeps-defaults", "79", "", 13, False),
    ("enable-list-overrides-default", "", "13", 13, True),
    ("enable-list-overrides-disable-list", "79", "79", 79, True),
    ("enable-list-overrides-disable-all", "all", "79", 79, True),
    ("enable-list-only-listed", "all", "79", 48, False),
    ("enable-all", "", "all", 31, True),
    ("enable-all-over-disable-all", "all", "all", 43, True),
    ("empty-items-skipped", ",, ,", " ,", 13, False),
]


@pytest.mark.parametrize(
    ("disable", "enable", "xid", "critical"),
    [row[1:] for row in POLICY_ROWS],
    ids=[row[0] for row in POLICY_ROWS],
)
def test_is_critical(disable: str, enable: str, xid: int, critical: bool) -> None:
    assert is_critical(parse_health_policy(disable, enable), xid) is critical


@pytest.mark.parametrize(
    ("disable", "enable", "xids", "probe", "disabled"),
    [
        ("", "", True, True, False),
        ("xids", "", False, True, False),
        ("all", "", False, False, True),
        ("all", "79", False, False, False),
    ],
    ids=["default", "xids-keeps-lost-gpu-probe", "all-disables-everything", "all-with-forced"],
)
def test_which_checks_run(disable: str, enable: str, xids: bool, probe: bool, disabled: bool):
    policy = parse_health_policy(disable, enable)
    assert (policy.xids_checked, policy.probe_checked, policy.disabled) == (xids, probe, disabled)


@pytest.mark.parametrize(
    ("disable", "enable", "env"),
    [
        ("79,x", "", "DP_DISABLE_HEALTHCHECKS"),
        ("", "xids", "DP_ENABLE_HEALTHCHECKS"),  # "xids" means nothing when enabling
        ("", "-3", "DP_ENABLE_HEALTHCHECKS"),
    ],
    ids=["disable-junk", "enable-xids-keyword", "enable-negative"],
)
def test_bad_values_name_the_env_var(disable: str, enable: str, env: str) -> None:
    with pytest.raises(ValueError, match=env):
        parse_health_policy(disable, enable)


# --- state machine -----------------------------------------------------------------

POLICY = HealthPolicy()
RECOVERY = 30.0


def state(condition: GpuCondition, since: float = 0.0) -> HealthState:
    return HealthState(uuid="GPU-a", condition=condition, since=since)


EVENT_ROWS = [
    # (id, before, xid, after, reason)
    ("healthy-critical-xid", H, 79, U, Reason.CRITICAL_XID),
    ("healthy-ignored-xid", H, 13, H, Reason.IGNORED_XID),
    ("unhealthy-critical-xid-stays", U, 48, U, Reason.UNCHANGED),
    ("recovering-critical-xid-restarts", R, 79, U, Reason.CRITICAL_XID),
    ("recovering-ignored-xid-goes-on", R, 31, R, Reason.IGNORED_XID),
]


@pytest.mark.parametrize(
    ("before", "xid", "after", "reason"),
    [row[1:] for row in EVENT_ROWS],
    ids=[row[0] for row in EVENT_ROWS],
)
def test_on_event(before: GpuCondition, xid: int, after: GpuCondition, reason: Reason) -> None:
    decision = on_event(state(before), XidEvent(xid=xid), now=100.0, policy=POLICY)
    assert (decision.state.condition, decision.reason) == (after, reason)
    if reason is Reason.CRITICAL_XID:
        assert (decision.state.since, decision.state.last_xid) == (100.0, xid)


def test_mig_scoped_xid_marks_the_whole_gpu() -> None:
    decision = on_event(state(H), XidEvent(xid=79, gi_id=7), now=1.0, policy=POLICY)
    assert decision.state.condition is U


PROBE_ROWS = [
    # (id, before, since, usable, now, recovery_seconds, after, reason)
    ("healthy-usable", H, 0.0, True, 5.0, RECOVERY, H, Reason.UNCHANGED),
    ("healthy-lost", H, 0.0, False, 5.0, RECOVERY, U, Reason.GPU_UNUSABLE),
    ("unhealthy-lost-stays", U, 0.0, False, 5.0, RECOVERY, U, Reason.UNCHANGED),
    ("unhealthy-usable-starts-quiet-period", U, 0.0, True, 5.0, RECOVERY, R, Reason.USABLE),
    ("recovering-within-period", R, 5.0, True, 34.9, RECOVERY, R, Reason.QUIET_PERIOD),
    ("recovering-period-over", R, 5.0, True, 35.0, RECOVERY, H, Reason.RECOVERED),
    ("recovering-lost-again", R, 5.0, False, 20.0, RECOVERY, U, Reason.GPU_UNUSABLE),
    ("no-recovery-like-nvidia", U, 0.0, True, 1e9, None, U, Reason.RECOVERY_DISABLED),
    ("zero-period-still-passes-recovering", U, 0.0, True, 5.0, 0.0, R, Reason.USABLE),
]


@pytest.mark.parametrize(
    ("before", "since", "usable", "now", "recovery_seconds", "after", "reason"),
    [row[1:] for row in PROBE_ROWS],
    ids=[row[0] for row in PROBE_ROWS],
)
def test_on_probe(
    before: GpuCondition,
    since: float,
    usable: bool,
    now: float,
    recovery_seconds: float | None,
    after: GpuCondition,
    reason: Reason,
) -> None:
    decision = on_probe(state(before, since), usable, now=now, recovery_seconds=recovery_seconds)
    assert (decision.state.condition, decision.reason) == (after, reason)


@pytest.mark.parametrize(
    ("before", "after"),
    [(H, R), (H, H), (U, H), (U, U), (R, R)],
    ids=["healthy-to-recovering", "healthy-self", "unhealthy-to-healthy", "unhealthy-self",
         "recovering-self"],
)  # fmt: skip
def test_illegal_moves_raise(before: GpuCondition, after: GpuCondition) -> None:
    with pytest.raises(IllegalTransition, match="GPU-a"):
        _move(state(before), after, now=1.0)


def test_full_cycle_fail_then_recover() -> None:
    s = state(H)
    s = on_event(s, XidEvent(xid=79), now=10.0, policy=POLICY).state
    s = on_probe(s, False, now=11.0, recovery_seconds=5.0).state
    s = on_probe(s, True, now=12.0, recovery_seconds=5.0).state
    s = on_event(s, XidEvent(xid=48), now=13.0, policy=POLICY).state  # period restarts
    s = on_probe(s, True, now=14.0, recovery_seconds=5.0).state
    assert on_probe(s, True, now=18.9, recovery_seconds=5.0).state.condition is R
    assert on_probe(s, True, now=19.0, recovery_seconds=5.0).state.condition is H


# --- group marking -----------------------------------------------------------------

GROUPS = {
    "GPU-a": ("GPU-a::0", "GPU-a::1", "GPU-a::2"),
    "GPU-b": ("MIG-b1", "MIG-b2"),
    "GPU-c": ("GPU-c",),
}


@pytest.mark.parametrize(
    ("conditions", "unhealthy"),
    [
        ({"GPU-a": H, "GPU-b": H, "GPU-c": H}, set()),
        ({"GPU-a": U, "GPU-b": H, "GPU-c": H}, {"GPU-a::0", "GPU-a::1", "GPU-a::2"}),  # #1929
        ({"GPU-a": H, "GPU-b": R, "GPU-c": H}, {"MIG-b1", "MIG-b2"}),
        ({"GPU-a": H, "GPU-b": H}, {"GPU-c"}),
    ],
    ids=["all-healthy", "replicas-go-together-1929", "recovering-is-unhealthy",
         "unwatched-gpu-is-unhealthy"],
)  # fmt: skip
def test_device_health(conditions: dict[str, GpuCondition], unhealthy: set[str]) -> None:
    states = {uuid: replace(state(c), uuid=uuid) for uuid, c in conditions.items()}
    health = device_health(states, GROUPS)
    assert set(health) == {d for ids in GROUPS.values() for d in ids}
    assert {d for d, h in health.items() if h is Health.UNHEALTHY} == unhealthy
