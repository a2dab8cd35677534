"""The pure health decisions: NVIDIA's XID policy, the per-GPU state machine, group marking."""

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.plugin.core.health import (
    DEFAULT_IGNORED_XIDS,
    RESET_REQUIRED_XIDS,
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
    on_unwatched,
    parse_health_policy,
)
from gpufleet.plugin.core.model import Health

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
    ("disable", "enable", "ignored", "forced", "warnings"),
    [
        # NVIDIA's TestNewHealthCheckXIDs rows: malformed items are skipped.
        (
            "not-an-int",
            "",
            DEFAULT_IGNORED_XIDS,
            set(),
            ["DP_DISABLE_HEALTHCHECKS: ignoring 'not-an-int'"],
        ),
        ("-68", "", DEFAULT_IGNORED_XIDS, set(), ["DP_DISABLE_HEALTHCHECKS: ignoring '-68'"]),
        (
            "68,not-an-int,67",
            "",
            DEFAULT_IGNORED_XIDS | {67, 68},
            set(),
            ["DP_DISABLE_HEALTHCHECKS: ignoring 'not-an-int'"],
        ),
        ("68  ", "", DEFAULT_IGNORED_XIDS | {68}, set(), []),
        ("", "-3,79", DEFAULT_IGNORED_XIDS, {79}, ["DP_ENABLE_HEALTHCHECKS: ignoring '-3'"]),
        # health.go keeps "all" as XID 0: its 0 turns every check off (or forces every XID
        # critical). Not followed, said: DP_DISABLE_HEALTHCHECKS=0 is more likely "off".
        ("0", "", DEFAULT_IGNORED_XIDS, set(), ["DP_DISABLE_HEALTHCHECKS: ignoring 0: no XID"]),
        ("", "0,79", DEFAULT_IGNORED_XIDS, {79}, ["DP_ENABLE_HEALTHCHECKS: ignoring 0: no XID"]),
    ],
    ids=[
        "not-an-int",
        "negative",
        "junk-between-xids",
        "trailing-space",
        "enable-negative",
        "disable-zero",
        "enable-zero",
    ],
)
def test_malformed_items_are_skipped_with_a_warning(disable, enable, ignored, forced, warnings):
    """Issue 16: NVIDIA's tests skip a malformed item; it no longer stops startup."""
    policy = parse_health_policy(disable, enable)
    assert policy.ignored_xids == ignored
    assert policy.forced_xids == forced
    assert len(policy.warnings) == len(warnings)
    for got, want in zip(policy.warnings, warnings, strict=True):
        assert got.startswith(want)


def test_enable_xids_means_all() -> None:
    """Issue 16: NVIDIA reads DP_ENABLE_HEALTHCHECKS=xids as "all" (one keyword pair)."""
    policy = parse_health_policy("", "xids")
    assert policy.force_all_xids and policy.warnings == ()
    assert all(is_critical(policy, x) for x in (*DEFAULT_IGNORED_XIDS, 555))


# --- state machine -----------------------------------------------------------------

POLICY = HealthPolicy()
RECOVERY = 30.0
RECOVERABLE_XID = 8  # GPU stopped processing: the catalog says restart the application


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
    s = on_event(s, XidEvent(xid=RECOVERABLE_XID), now=13.0, policy=POLICY).state  # restarts
    s = on_probe(s, True, now=14.0, recovery_seconds=5.0).state
    assert on_probe(s, True, now=18.9, recovery_seconds=5.0).state.condition is R
    assert on_probe(s, True, now=19.0, recovery_seconds=5.0).state.condition is H


RESET_ROWS = [
    # (id, xid, probes as (usable, now), after, reason of the last probe); the XID comes at
    # now=10, before the first probe later than that
    ("recoverable-xid-recovers-after-quiet-period", RECOVERABLE_XID,
     [(True, 11.0), (True, 41.0)], H, Reason.RECOVERED),
    *[(f"reset-xid-{x}-never-recovers-by-time", x, [(True, 11.0), (True, 1e9)], U,
       Reason.RESET_REQUIRED) for x in sorted(RESET_REQUIRED_XIDS)],
    ("reset-xid-recovers-once-seen-gone", 48,
     [(True, 11.0), (False, 12.0), (True, 13.0), (True, 43.0)], H, Reason.RECOVERED),
    ("seen-gone-before-the-xid-is-no-reset", 79,
     [(False, 9.0), (True, 11.0), (True, 1e9)], U, Reason.RESET_REQUIRED),
]  # fmt: skip


@pytest.mark.parametrize(
    ("xid", "probes", "after", "reason"),
    [row[1:] for row in RESET_ROWS],
    ids=[row[0] for row in RESET_ROWS],
)
def test_recovery_after_xid(
    xid: int, probes: list[tuple[bool, float]], after: GpuCondition, reason: Reason
) -> None:
    s = state(H)
    for usable, now in probes:
        if now > 10.0 and s.last_xid is None:
            s = on_event(s, XidEvent(xid=xid), now=10.0, policy=POLICY).state
        decision = on_probe(s, usable, now=now, recovery_seconds=RECOVERY)
        s = decision.state
    assert (s.condition, decision.reason) == (after, reason)


@pytest.mark.parametrize(
    ("before", "after", "reason"),
    [(H, U, Reason.UNWATCHED), (R, U, Reason.UNWATCHED), (U, U, Reason.UNCHANGED)],
    ids=["healthy", "recovering-restarts", "unhealthy-stays"],
)
def test_on_unwatched(before: GpuCondition, after: GpuCondition, reason: Reason) -> None:
    decision = on_unwatched(state(before), now=7.0)
    assert (decision.state.condition, decision.reason) == (after, reason)


def test_unwatched_keeps_a_pending_reset() -> None:
    s = on_event(state(H), XidEvent(xid=95), now=1.0, policy=POLICY).state
    s = on_unwatched(s, now=2.0).state
    assert on_probe(s, True, now=1e9, recovery_seconds=RECOVERY).reason is Reason.RESET_REQUIRED


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


_ITEMS = st.text(max_size=12) | st.integers(0, 6000).map(lambda n: "9" * n) | st.just("all")


@given(st.lists(_ITEMS, max_size=4).map(",".join), st.lists(_ITEMS, max_size=4).map(",".join))
def test_any_health_env_values_give_a_policy(disable: str, enable: str) -> None:
    """Bad items are skipped with a warning, as documented; a 5,000-digit XID raised
    int()'s ValueError and stopped the plugin."""
    policy = parse_health_policy(disable, enable)
    assert all(0 <= xid < 10**9 for xid in policy.forced_xids | policy.ignored_xids)
