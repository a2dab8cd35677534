"""Health decisions: which XIDs matter, and when a physical GPU is (again) fit to advertise.

Exists so the NVML watcher (`nvml.health_watch`) only gathers events and probe results while
every judgement lives here, table-tested. The XID policy is NVIDIA's, env vars and default
ignore list included; what we add is recovery (NVIDIA never recovers without a restart,
issues #189/#234) and group marking (NVIDIA #1929 marks one replica or MIG device of a
failing GPU, we mark all of them).

Health is kept per physical GPU, never per MIG device: NVIDIA matches a MIG-scoped XID to
its GPU/compute instance, we deliberately mark the whole GPU. That is conservative, and
right for the GPU-level faults that matter most (XID 79 "fallen off the bus", 48 DBE, 94/95
contained/uncontained ECC) which take every slice down with them.

Recovery is by time only for faults that leave the GPU sound. After an XID in
`RESET_REQUIRED_XIDS` the GPU may still answer NVML but is not fit until it has been reset,
so it never recovers by time alone: only once a probe has seen it stop answering (it fell
off the bus or was being reset: whatever brings it back re-initialises it) or when the
plugin restarts. NVML offers no reset counter, and the pending-retirement/remapping flags
cover ECC only, so "seen gone, then back" is the one reset evidence common to all of them.

Pure: no I/O, no clock (`now` is an argument), no logging (decisions return reasons).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from gpufleet.core.numbers import ascii_int
from gpufleet.plugin.core.model import Health

DISABLE_ENV = "DP_DISABLE_HEALTHCHECKS"
ENABLE_ENV = "DP_ENABLE_HEALTHCHECKS"
# Application faults (13 graphics engine exception, 31 MMU fault, 43 channel reset, 45
# preemptive cleanup, 68 video decoder exception, 109 context switch timeout): NVIDIA's
# hard-coded list of XIDs a misbehaving workload causes without the GPU being at fault.
DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
# Ours, from NVIDIA's XID catalog where the immediate action is a GPU reset (or worse): 48
# double-bit ECC, 79 fallen off the bus, 94/95 contained/uncontained ECC (the row remap is
# only applied by a reset), 119/120 GSP RPC timeout / GSP error.
RESET_REQUIRED_XIDS = frozenset({48, 79, 94, 95, 119, 120})


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthPolicy:
    """Which checks run and which XIDs count, from NVIDIA's two env vars."""

    xids_checked: bool = True  # False: DP_DISABLE_HEALTHCHECKS has "all" or "xids"
    probe_checked: bool = True  # False: "all" also stops the lost-GPU probe
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS
    forced_xids: frozenset[int] = frozenset()  # DP_ENABLE_HEALTHCHECKS list
    force_all_xids: bool = False  # DP_ENABLE_HEALTHCHECKS=all (or xids)
    warnings: tuple[str, ...] = ()  # one per skipped item, for the caller to log

    @property
    def watches_xids(self) -> bool:
        """Whether any XID can be critical, i.e. whether XID events need registering."""
        return self.xids_checked or self.force_all_xids or bool(self.forced_xids)

    @property
    def disabled(self) -> bool:
        """Nothing is checked: every device stays Healthy (NVIDIA's behaviour for "all")."""
        return not (self.watches_xids or self.probe_checked)


def parse_health_policy(disable: str, enable: str) -> HealthPolicy:
    """The policy for `DP_DISABLE_HEALTHCHECKS=disable` and `DP_ENABLE_HEALTHCHECKS=enable`.

    Both are case-insensitive comma lists; empty items are skipped as NVIDIA does. In
    `disable`, "all" turns every check off and "xids" the XID checks only (NVIDIA treats
    both as "all", with a TODO to tell them apart: we keep lost-GPU detection for "xids").
    Numbers add XIDs to ignore. In `enable`, "all" or "xids" (NVIDIA's same keyword pair) or
    numbers force XIDs critical, over the ignore lists and over "all"/"xids" in `disable`,
    as NVIDIA documents.

    An item that is neither a keyword nor an XID (`not-an-int`, `-68`) is skipped, as
    NVIDIA's tests expect, with a warning in `HealthPolicy.warnings` naming the env var.
    """
    off = _items(DISABLE_ENV, disable)
    on = _items(ENABLE_ENV, enable)
    return HealthPolicy(
        xids_checked=not ({"all", "xids"} & off.keywords),
        probe_checked="all" not in off.keywords,
        ignored_xids=DEFAULT_IGNORED_XIDS | off.xids,
        forced_xids=on.xids,
        force_all_xids=bool(on.keywords),
        warnings=off.warnings + on.warnings,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Items:
    keywords: frozenset[str]
    xids: frozenset[int]
    warnings: tuple[str, ...]


_XID_DIGITS = 9  # XIDs are small; int() refuses thousands of digits with a ValueError


def _items(env: str, value: str) -> _Items:
    words, xids, warnings = set(), set(), []
    for raw in value.lower().split(","):
        item = raw.strip()
        if not item:
            continue
        if item in ("all", "xids"):
            words.add(item)
        elif (xid := ascii_int(item, max_digits=_XID_DIGITS)) == 0:
            # NVIDIA's keeps "all" as XID 0 (health.go's allXIDs), so its 0 is "all" by
            # accident: a DP_DISABLE_HEALTHCHECKS=0 meant as "off" turned every check off.
            warnings.append(
                f'{env}: ignoring 0: no XID is 0; NVIDIA\'s plugin reads it as "all", so '
                'write "all" where that is meant'
            )
        elif xid is not None:
            xids.add(xid)
        else:
            warnings.append(f'{env}: ignoring {item[:40]!r}: not an XID number, "all" or "xids"')
    return _Items(keywords=frozenset(words), xids=frozenset(xids), warnings=tuple(warnings))


def is_critical(policy: HealthPolicy, xid: int) -> bool:
    """Whether XID `xid` makes its GPU unhealthy under `policy` (force-enable wins)."""
    if policy.force_all_xids or xid in policy.forced_xids:
        return True
    return policy.xids_checked and xid not in policy.ignored_xids


class GpuCondition(StrEnum):
    """Health of one physical GPU as the state machine sees it."""

    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"  # faulted and not yet seen usable since
    RECOVERING = "recovering"  # usable since `HealthState.since`; still advertised Unhealthy


# state -> states it may move to, each edge with its cause. Anything else raises.
_TRANSITIONS: Mapping[GpuCondition, frozenset[GpuCondition]] = {
    GpuCondition.HEALTHY: frozenset(
        {
            GpuCondition.UNHEALTHY,  # critical XID, unusable probe, or it cannot be watched
        }
    ),
    GpuCondition.UNHEALTHY: frozenset(
        {
            GpuCondition.RECOVERING,  # the probe finds it usable: the quiet period starts
        }
    ),
    GpuCondition.RECOVERING: frozenset(
        {
            GpuCondition.UNHEALTHY,  # critical XID, unusable probe, unwatched: period resets
            GpuCondition.HEALTHY,  # usable throughout `recovery_seconds`
        }
    ),
}


class Reason(StrEnum):
    """Why a decision came out as it did (logged and counted by the watcher)."""

    CRITICAL_XID = "critical_xid"
    IGNORED_XID = "ignored_xid"
    GPU_UNUSABLE = "gpu_unusable"
    USABLE = "usable"  # unhealthy GPU answers again: quiet period started
    QUIET_PERIOD = "quiet_period"  # recovering, period not yet over
    RECOVERED = "recovered"
    RECOVERY_DISABLED = "recovery_disabled"  # recovery_seconds None: NVIDIA's behaviour
    RESET_REQUIRED = "reset_required"  # usable, but a reset-requiring XID awaits a reset
    UNWATCHED = "unwatched"  # XID events cannot be received for the GPU
    UNCHANGED = "unchanged"


class IllegalTransition(ValueError):
    """A move the transition table does not allow: a bug in the decision code."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthState:
    """One physical GPU's health; `since` is monotonic seconds when `condition` began."""

    uuid: str
    condition: GpuCondition = GpuCondition.HEALTHY
    since: float = 0.0
    last_xid: int | None = None  # the last critical XID seen
    reset_xid: int | None = None  # a RESET_REQUIRED_XIDS XID not yet followed by a reset


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """The state after an input, and why."""

    state: HealthState
    reason: Reason
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class XidEvent:
    """An XID critical-error event on a GPU; `gi_id` is set for MIG-scoped XIDs (unused:
    the whole GPU is marked, see the module docstring)."""

    xid: int
    gi_id: int | None = None


def on_event(state: HealthState, event: XidEvent, *, now: float, policy: HealthPolicy) -> Decision:
    """The GPU's state after XID `event` at `now`: a critical XID makes it unhealthy (and
    restarts any quiet period), and one of `RESET_REQUIRED_XIDS` also holds it unhealthy
    until a reset is seen; an ignored one changes nothing."""
    if not is_critical(policy, event.xid):
        return Decision(state=state, reason=Reason.IGNORED_XID, message=f"XID {event.xid} ignored")
    message = f"critical XID {event.xid}"
    reset_xid = event.xid if event.xid in RESET_REQUIRED_XIDS else state.reset_xid
    if state.condition is GpuCondition.UNHEALTHY:
        marked = replace(state, last_xid=event.xid, reset_xid=reset_xid)
        return Decision(state=marked, reason=Reason.UNCHANGED, message=message)
    moved = _move(state, GpuCondition.UNHEALTHY, now=now)
    marked = replace(moved, last_xid=event.xid, reset_xid=reset_xid)
    return Decision(state=marked, reason=Reason.CRITICAL_XID, message=message)


def on_unwatched(state: HealthState, *, now: float) -> Decision:
    """The GPU's state at `now` once its XID events cannot be received (event set broken,
    registration failed): unhealthy, as a GPU that cannot be watched is never reported
    healthy; once watched again it recovers like any other unhealthy GPU."""
    if state.condition is GpuCondition.UNHEALTHY:
        return Decision(state=state, reason=Reason.UNCHANGED, message="still unhealthy")
    moved = _move(state, GpuCondition.UNHEALTHY, now=now)
    return Decision(state=moved, reason=Reason.UNWATCHED, message="XID events not watched")


def on_probe(
    state: HealthState, usable: bool, *, now: float, recovery_seconds: float | None
) -> Decision:
    """The GPU's state after a usability probe at `now`.

    An unusable GPU (lost, not answering) becomes unhealthy, and counts as reset when it
    answers again (see the module docstring). An unhealthy GPU that answers starts a quiet
    period and is Healthy again once it has answered every probe, with no critical XID, for
    `recovery_seconds`; None never recovers (NVIDIA's behaviour), nor does a GPU awaiting a
    reset.
    """
    condition = state.condition
    if not usable:
        gone = replace(state, reset_xid=None)
        if condition is GpuCondition.UNHEALTHY:
            return Decision(state=gone, reason=Reason.UNCHANGED, message="still unusable")
        moved = _move(gone, GpuCondition.UNHEALTHY, now=now)
        return Decision(state=moved, reason=Reason.GPU_UNUSABLE, message="GPU not usable")
    if condition is GpuCondition.HEALTHY:
        return Decision(state=state, reason=Reason.UNCHANGED, message="usable")
    if recovery_seconds is None:
        return Decision(state=state, reason=Reason.RECOVERY_DISABLED, message="recovery disabled")
    if state.reset_xid is not None:
        return Decision(
            state=state,
            reason=Reason.RESET_REQUIRED,
            message=f"XID {state.reset_xid} needs a GPU reset; restart the plugin after it",
        )
    if condition is GpuCondition.UNHEALTHY:
        moved = _move(state, GpuCondition.RECOVERING, now=now)
        return Decision(
            state=moved, reason=Reason.USABLE, message=f"usable; healthy in {recovery_seconds} s"
        )
    quiet_seconds = now - state.since
    if quiet_seconds < recovery_seconds:
        return Decision(
            state=state,
            reason=Reason.QUIET_PERIOD,
            message=f"usable for {quiet_seconds:.1f} of {recovery_seconds} s",
        )
    moved = _move(state, GpuCondition.HEALTHY, now=now)
    return Decision(
        state=moved, reason=Reason.RECOVERED, message=f"usable for {quiet_seconds:.1f} s"
    )


def _move(state: HealthState, to: GpuCondition, *, now: float) -> HealthState:
    if to not in _TRANSITIONS[state.condition]:
        raise IllegalTransition(f"GPU {state.uuid}: {state.condition} -> {to} is not allowed")
    return replace(state, condition=to, since=now)


def advertised(state: HealthState | None) -> Health:
    """The v1beta1 health of a GPU's devices: only HEALTHY advertises Healthy; a GPU with no
    state (not watched, e.g. NVML failed) is Unhealthy, so pods are not admitted blind
    (NVIDIA PRs #1641/#2037)."""
    if state is not None and state.condition is GpuCondition.HEALTHY:
        return Health.HEALTHY
    return Health.UNHEALTHY


def device_health(
    states: Mapping[str, HealthState], groups: Mapping[str, Sequence[str]]
) -> Mapping[str, Health]:
    """Health of every advertised device ID, from the states of the physical GPUs.

    `groups` maps a GPU UUID to all the IDs it is advertised under (the GPU, its replicas,
    its MIG devices and their replicas), so they all go together (NVIDIA #1929).
    """
    return {
        device_id: advertised(states.get(uuid))
        for uuid, device_ids in groups.items()
        for device_id in device_ids
    }
