"""The health watcher thread against the simulated NVML: XIDs, lost GPUs, recovery, failures.

Time for probes and quiet periods is a manual clock the tests advance; NVML event waits are
real (short) waits. Every check polls with a deadline; none asserts timing.
"""

import threading
from collections.abc import Callable, Iterator, Mapping

import pytest
from helpers import wait_for
from helpers.clock import ManualClock

from gpufleet.lab.nvml.api import SimulatedNvml
from gpufleet.plugin.core.health import parse_health_policy
from gpufleet.plugin.core.model import Health
from gpufleet.plugin.nvml.health_watch import HealthWatcher

FLEET = "6xH100+2xH100:mig=7x1g.10gb"
RECOVERY_SECONDS = 5.0
DEADLINE = 5.0  # the target is 1 s; generous here so a loaded CI box never flakes
RECOVERABLE_XID = 8  # critical by default, and needs no GPU reset


class Reports:
    """What `on_change` was called with."""

    def __init__(self) -> None:
        self.calls: list[Mapping[str, Health]] = []
        self._lock = threading.Lock()

    def __call__(self, health: Mapping[str, Health]) -> None:
        with self._lock:
            self.calls.append(health)

    @property
    def latest(self) -> Mapping[str, Health]:
        with self._lock:
            return self.calls[-1] if self.calls else {}

    def unhealthy(self) -> set[str]:
        return {d for d, h in self.latest.items() if h is Health.UNHEALTHY}


@pytest.fixture
def sim(tmp_path) -> Iterator[SimulatedNvml]:
    with SimulatedNvml(FLEET, proc_root=tmp_path / "proc") as lib:
        yield lib


def groups_of(sim: SimulatedNvml) -> dict[str, tuple[str, ...]]:
    """Whole GPUs advertised as 2 time-slicing replicas each; MIG GPUs as their slices."""
    return {
        gpu.uuid: tuple(m.uuid for m in gpu.mig) or (f"{gpu.uuid}::0", f"{gpu.uuid}::1")
        for gpu in sim.devices
    }


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def watch(
    sim: SimulatedNvml, clock: ManualClock
) -> Iterator[Callable[..., tuple[HealthWatcher, Reports]]]:
    started: list[HealthWatcher] = []

    def start(
        lib=sim, disable: str = "", enable: str = "", recovery_seconds=RECOVERY_SECONDS, **opts
    ) -> tuple[HealthWatcher, Reports]:
        reports = Reports()
        options = {"wait_ms": 50, "probe_interval_seconds": 1.0, "max_backoff_seconds": 0.2}
        watcher = HealthWatcher(
            lib,
            groups_of(sim),
            policy=parse_health_policy(disable, enable),
            on_change=reports,
            recovery_seconds=recovery_seconds,
            clock=clock,
            **(options | opts),
        )
        watcher.start()
        started.append(watcher)
        return watcher, reports

    yield start
    for watcher in started:
        watcher.stop()


def all_devices(sim: SimulatedNvml) -> set[str]:
    return {d for ids in groups_of(sim).values() for d in ids}


def devices_of(sim: SimulatedNvml, index: int) -> set[str]:
    return set(groups_of(sim)[sim.devices[index].uuid])


def wait_started(reports: Reports) -> None:
    wait_for(lambda: reports.calls, timeout=DEADLINE, what="the first health report")


def test_starts_all_healthy(sim: SimulatedNvml, watch) -> None:
    watcher, reports = watch()
    wait_started(reports)
    assert set(reports.latest) == all_devices(sim)
    assert reports.unhealthy() == set()
    assert watcher.health == reports.latest


def test_xid_79_marks_every_replica_of_its_gpu(sim: SimulatedNvml, watch) -> None:
    _, reports = watch()
    wait_started(reports)
    sim.inject_xid(0, 79)
    wait_for(lambda: reports.unhealthy(), timeout=DEADLINE, what="GPU 0 unhealthy")
    assert reports.unhealthy() == devices_of(sim, 0)


def test_mig_scoped_xid_marks_every_slice_of_its_gpu(sim: SimulatedNvml, watch) -> None:
    _, reports = watch()
    wait_started(reports)
    sim.inject_xid(6, 79, gi_id=sim.devices[6].mig[0].gi_id)
    wait_for(lambda: reports.unhealthy(), timeout=DEADLINE, what="GPU 6 unhealthy")
    assert reports.unhealthy() == devices_of(sim, 6)
    assert len(reports.unhealthy()) == 7


def test_ignored_xid_13_changes_nothing(sim: SimulatedNvml, watch) -> None:
    _, reports = watch()
    wait_started(reports)
    sim.inject_xid(0, 13)
    sim.inject_xid(1, 79)  # a marker: events arrive in order, so 13 has been handled
    wait_for(lambda: reports.unhealthy(), timeout=DEADLINE, what="the marker XID")
    assert reports.unhealthy() == devices_of(sim, 1)


def test_enable_list_makes_xid_13_critical(sim: SimulatedNvml, watch) -> None:
    _, reports = watch(enable="13")
    wait_started(reports)
    sim.inject_xid(0, 13)
    wait_for(lambda: reports.unhealthy(), timeout=DEADLINE, what="GPU 0 unhealthy")
    assert reports.unhealthy() == devices_of(sim, 0)


def advance_until_healthy(clock: ManualClock, reports: Reports, sim: SimulatedNvml, index: int):
    def healthy() -> bool:
        clock.advance(1.0)  # probes run each 1 s of clock time
        return not devices_of(sim, index) & reports.unhealthy()

    wait_for(healthy, timeout=DEADLINE, what=f"GPU {index} healthy again")


def test_lost_gpu_recovers_after_quiet_period_once_restored(
    sim: SimulatedNvml, clock: ManualClock, watch
) -> None:
    _, reports = watch()
    wait_started(reports)
    sim.fail_gpu(2)  # XID 79 needs a reset: only a probe seeing the GPU gone counts as one
    sim.inject_xid(3, RECOVERABLE_XID)  # its recovery proves probes saw GPU 2 gone
    wait_for(lambda: len(reports.unhealthy()) == 4, timeout=DEADLINE, what="GPUs 2, 3 down")
    advance_until_healthy(clock, reports, sim, 3)
    assert reports.unhealthy() == devices_of(sim, 2)
    sim.restore_gpu(2)
    advance_until_healthy(clock, reports, sim, 2)


def test_an_unprivileged_probe_of_a_mig_gpu_finds_it_there(
    sim: SimulatedNvml, clock: ManualClock, watch
) -> None:
    """The probe reads the GPU's memory; a MIG-enabled GPU refuses it to a caller without
    CAP_SYS_ADMIN (NoPermission, nvml.h). That read as a GPU gone, and it never recovered."""
    sim.set_privileged(False)
    _, reports = watch()
    wait_started(reports)
    sim.inject_xid(6, RECOVERABLE_XID)
    wait_for(lambda: reports.unhealthy(), timeout=DEADLINE, what="GPU 6 unhealthy")
    advance_until_healthy(clock, reports, sim, 6)


def test_reset_xid_outlasts_the_quiet_period(sim: SimulatedNvml, clock: ManualClock, watch):
    _, reports = watch()
    wait_started(reports)
    sim.inject_xid(0, 48)  # double-bit ECC: the GPU still answers, but needs a reset
    sim.inject_xid(1, RECOVERABLE_XID)
    wait_for(lambda: len(reports.unhealthy()) == 4, timeout=DEADLINE, what="GPUs 0, 1 down")
    advance_until_healthy(clock, reports, sim, 1)
    assert reports.unhealthy() == devices_of(sim, 0)


def test_nvml_init_failure_marks_every_device_unhealthy(
    sim: SimulatedNvml, watch, caplog: pytest.LogCaptureFixture
) -> None:
    sim.close()  # nvmlInit now fails
    watcher, reports = watch()
    wait_started(reports)
    assert reports.unhealthy() == all_devices(sim)
    assert "marking all 26 devices Unhealthy" in caplog.text
    wait_for(lambda: watcher.errors.get("init", 0) >= 2, timeout=DEADLINE, what="retries")
    assert len(reports.calls) == 1  # retrying does not re-report the same thing


def test_event_set_failure_marks_all_unhealthy_then_recovers(sim: SimulatedNvml, watch):
    sim.set_not_supported("nvmlEventSetCreate")
    _, reports = watch()
    wait_started(reports)
    assert reports.unhealthy() == all_devices(sim)
    sim.clear_injections()
    wait_for(lambda: not reports.unhealthy(), timeout=DEADLINE, what="setup retried")


def test_gpu_whose_registration_fails_stays_unhealthy(sim: SimulatedNvml, watch) -> None:
    sim.set_not_supported("nvmlDeviceRegisterEvents", index=3)
    _, reports = watch()
    wait_started(reports)
    assert reports.unhealthy() == devices_of(sim, 3)


def test_persistent_wait_errors_mark_every_device_unhealthy(
    sim: SimulatedNvml, watch, caplog: pytest.LogCaptureFixture
) -> None:
    sim.set_not_supported("nvmlEventSetWait_v2")
    watcher, reports = watch()
    wait_for(
        lambda: reports.unhealthy() == all_devices(sim), timeout=DEADLINE, what="all unhealthy"
    )
    assert watcher.errors["wait"] >= 3
    assert "waiting for XID events failed 3 times" in caplog.text
    wait_for(lambda: watcher.errors["wait"] >= 6, timeout=DEADLINE, what="rebuilt, failing on")


def test_watching_again_recovers_through_the_quiet_period(
    sim: SimulatedNvml, clock: ManualClock, watch
) -> None:
    watcher, reports = watch()
    wait_started(reports)
    sim.inject_xid(4, 48)  # needs a reset: the rebuild must not forget it
    wait_for(lambda: reports.unhealthy(), timeout=DEADLINE, what="GPU 4 unhealthy")
    sim.set_not_supported("nvmlEventSetWait_v2")
    wait_for(
        lambda: reports.unhealthy() == all_devices(sim), timeout=DEADLINE, what="all unhealthy"
    )
    sim.clear_injections()
    advance_until_healthy(clock, reports, sim, 0)
    wait_for(
        lambda: reports.unhealthy() == devices_of(sim, 4),
        timeout=DEADLINE,
        what="all but GPU 4 healthy",
    )
    sim.inject_xid(5, 79)  # the rebuilt event set delivers XIDs
    wait_for(lambda: devices_of(sim, 5) <= reports.unhealthy(), timeout=DEADLINE, what="XID")
    assert watcher.errors["wait"] >= 3


def test_lost_gpu_found_while_waits_fail(sim: SimulatedNvml, clock: ManualClock, watch):
    sim.set_not_supported("nvmlEventSetWait_v2")
    # Backoff far beyond the deadline, and no rebuild: only probes on their own schedule
    # can find the lost GPU in time.
    watcher, reports = watch(max_backoff_seconds=60.0, max_wait_errors=1000)
    wait_started(reports)
    wait_for(lambda: watcher.errors.get("wait", 0) >= 3, timeout=DEADLINE, what="wait errors")
    sim.fail_gpu(2)  # its XID 79 is never read: waits fail

    def gpu_2_down() -> bool:
        clock.advance(1.0)
        return reports.unhealthy() == devices_of(sim, 2)

    wait_for(gpu_2_down, timeout=DEADLINE, what="lost GPU 2 found by probing")


def test_all_checks_disabled_reports_healthy_without_a_thread(sim: SimulatedNvml, watch):
    watcher, reports = watch(disable="all")
    assert reports.calls == [watcher.health]
    assert reports.unhealthy() == set()
    assert all(t.name != "health-watcher" for t in threading.enumerate())


def test_stop_joins_the_thread(sim: SimulatedNvml, watch) -> None:
    watcher, reports = watch()
    wait_started(reports)
    watcher.stop()
    assert all(t.name != "health-watcher" for t in threading.enumerate())


def test_no_probe_recovers_a_gpu_while_event_waits_fail(
    sim: SimulatedNvml, clock: ManualClock, watch
) -> None:
    """Probes ran on through the waits' backoff and finished the quiet period: a GPU came
    back Healthy while the XIDs that would show it failing could not be read."""
    watcher, reports = watch(max_wait_errors=1000)
    wait_started(reports)
    sim.inject_xid(0, RECOVERABLE_XID)
    wait_for(lambda: reports.unhealthy() == devices_of(sim, 0), timeout=DEADLINE, what="down")
    sim.set_not_supported("nvmlEventSetWait_v2")
    wait_for(lambda: watcher.errors.get("wait"), timeout=DEADLINE, what="a wait failed")
    for _ in range(3):  # well past the quiet period, with probes run after each step
        clock.advance(2 * RECOVERY_SECONDS)
        seen = watcher.errors.get("wait", 0)
        wait_for(
            lambda seen=seen: watcher.errors.get("wait", 0) >= seen + 2,
            timeout=DEADLINE,
            what="waits",
        )
    assert reports.unhealthy() == devices_of(sim, 0)
    sim.clear_injections()  # events readable again: the quiet period may end it
    advance_until_healthy(clock, reports, sim, 0)


def test_retarget_keeps_each_gpus_state_and_tells_the_new_callback(
    sim: SimulatedNvml, watch
) -> None:
    """A config reload: the GPUs still watched keep their state (XID 48 awaits a reset),
    a GPU no longer advertised leaves the map, and XIDs go on arriving."""
    watcher, _ = watch()
    sim.inject_xid(0, 48)
    wait_for(
        lambda: (
            {d for d, h in watcher.health.items() if h is Health.UNHEALTHY} == devices_of(sim, 0)
        ),
        timeout=DEADLINE,
        what="GPU 0 down",
    )
    groups = groups_of(sim)
    del groups[sim.devices[7].uuid]
    reports = Reports()
    watcher.retarget(groups, reports)
    wait_started(reports)
    assert set(reports.latest) == {d for ids in groups.values() for d in ids}
    assert reports.unhealthy() == devices_of(sim, 0)
    sim.inject_xid(1, RECOVERABLE_XID)
    wait_for(
        lambda: reports.unhealthy() == devices_of(sim, 0) | devices_of(sim, 1),
        timeout=DEADLINE,
        what="GPU 1's XID reported to the new callback",
    )
