"""The XID watcher against the simulated NVML's event sets (real threads, real waits)."""

import logging
import time
from collections.abc import Callable, Iterator

import pytest
from helpers import wait_for
from helpers.clock import ManualClock

from gpufleet.exporter.core.samples import XidState
from gpufleet.exporter.core.windows import HISTORY_MAX_ENTRIES
from gpufleet.exporter.nvml.reader import NvmlReader
from gpufleet.exporter.nvml.xid import XidWatcher
from gpufleet.lab.nvml.api import SimulatedNvml
from gpufleet.logs import LOG_BURST


@pytest.fixture
def sim(tmp_path) -> Iterator[SimulatedNvml]:
    with SimulatedNvml("3xH100+1xH100:mig=7x1g.10gb", proc_root=tmp_path / "proc") as lib:
        lib.nvmlInit()
        yield lib


@pytest.fixture
def watch(sim: SimulatedNvml) -> Iterator[Callable[..., XidWatcher]]:
    watchers = []

    def start(entities=None, **kw) -> XidWatcher:
        entities = NvmlReader(sim, []).discover() if entities is None else entities
        watcher = XidWatcher(sim, entities, wait_ms=50, max_backoff_s=0.2, **kw)
        watcher.start()
        watchers.append(watcher)
        return watcher

    yield start
    for watcher in watchers:
        watcher.stop()


def state(watcher: XidWatcher, gpu: int) -> XidState | None:
    return watcher.snapshot().get(gpu)


def test_xids_show_up_and_counts_accumulate(sim: SimulatedNvml, watch) -> None:
    watcher = watch(clock=lambda: 7.5)
    assert watcher.watched == (0, 1, 2, 3)
    for xid in (48, 48, 13):
        sim.inject_xid(1, xid)
    wait_for(lambda: sum(getattr(state(watcher, 1), "counts", {}).values()) == 3)
    expected = XidState(last=13, counts={48: 2, 13: 1}, recent=((7.5, 48), (7.5, 48), (7.5, 13)))
    assert state(watcher, 1) == expected
    assert watcher.snapshot() == {
        **dict.fromkeys((0, 2, 3), XidState(last=0, counts={})),
        1: expected,
    }
    assert watcher.errors == 0


def test_xid_on_a_mig_instance_counts_for_its_gpu(sim: SimulatedNvml, watch) -> None:
    watcher = watch()
    sim.inject_xid(3, 43, gi_id=sim.devices[3].mig[0].gi_id)
    wait_for(lambda: bool(state(watcher, 3).counts))
    assert state(watcher, 3).last == 43


def test_snapshot_is_a_copy(sim: SimulatedNvml, watch) -> None:
    watcher = watch(clock=lambda: 1.0)
    sim.inject_xid(0, 31)
    wait_for(lambda: bool(state(watcher, 0).counts))
    before = watcher.snapshot()
    sim.inject_xid(0, 94)
    wait_for(lambda: state(watcher, 0).last == 94)
    assert before[0] == XidState(last=31, counts={31: 1}, recent=((1.0, 31),))


def test_recent_xids_carry_the_clock_time_they_arrived(sim: SimulatedNvml, watch) -> None:
    clock = ManualClock(500.0)
    watcher = watch(clock=clock)
    sim.inject_xid(2, 13)
    wait_for(lambda: state(watcher, 2).recent == ((500.0, 13),))
    clock.now = 530.25
    sim.inject_xid(2, 48)
    wait_for(lambda: len(state(watcher, 2).recent) == 2)
    assert state(watcher, 2).recent == ((500.0, 13), (530.25, 48))


def test_recent_history_is_bounded_and_survives_a_replacement(sim: SimulatedNvml, watch) -> None:
    full = tuple((float(i), 13) for i in range(HISTORY_MAX_ENTRIES))
    initial = {0: XidState(last=13, counts={13: HISTORY_MAX_ENTRIES}, recent=full)}
    watcher = watch(clock=lambda: 99_999.0, initial=initial)
    assert state(watcher, 0).recent == full
    sim.inject_xid(0, 31)
    wait_for(lambda: state(watcher, 0).last == 31)
    recent = state(watcher, 0).recent
    assert len(recent) == HISTORY_MAX_ENTRIES  # the oldest entry made room
    assert (recent[0], recent[-1]) == ((1.0, 13), (99_999.0, 31))
    assert watcher.history()[0].recent == recent


def test_stop_ends_the_thread_promptly(sim: SimulatedNvml, watch) -> None:
    watcher = watch()
    assert watcher.running
    assert watcher.stop() is True
    assert not watcher.running
    assert watcher.stop() is True  # idempotent


def test_stop_says_when_a_hung_wait_keeps_nvml_in_use(sim: SimulatedNvml, watch) -> None:
    """It said so only in a log line: the daemon shut NVML down under the hung
    nvmlEventSetWait_v2, which the event set's own freeing avoided as undefined."""
    watcher = watch()
    sim.set_hang("nvmlEventSetWait_v2", 1.0)
    time.sleep(0.3)  # its 50-ms wait ends, and the next one hangs for a second
    assert watcher.stop(timeout_s=0.05) is False
    sim.set_hang("nvmlEventSetWait_v2", 0)
    assert watcher.stop() is True  # the wait returned: now it is freed


def test_lost_gpu_reports_xid_79_and_the_watcher_goes_on(sim: SimulatedNvml, watch) -> None:
    watcher = watch()
    sim.fail_gpu(2)
    wait_for(lambda: bool(state(watcher, 2).counts))
    assert state(watcher, 2).last == 79
    sim.inject_xid(0, 62)
    wait_for(lambda: bool(state(watcher, 0).counts))
    assert watcher.running


def test_wait_errors_are_counted_and_retried(sim: SimulatedNvml, watch) -> None:
    watcher = watch()
    sim.set_not_supported("nvmlEventSetWait_v2")
    wait_for(lambda: watcher.errors >= 2)
    assert watcher.running
    sim.clear_injections()
    sim.inject_xid(1, 92)
    wait_for(lambda: bool(state(watcher, 1).counts))


def test_gpu_that_cannot_register_is_skipped(sim: SimulatedNvml, watch) -> None:
    sim.set_not_supported("nvmlDeviceRegisterEvents", index=1)
    watcher = watch()
    assert watcher.watched == (0, 2, 3)
    # No entry, not a zero one: a GPU without XID data must not read as "no XID".
    assert set(watcher.snapshot()) == {0, 2, 3}
    sim.inject_xid(0, 45)
    wait_for(lambda: bool(state(watcher, 0).counts))


def test_gpu_whose_registration_failed_is_registered_again(
    sim: SimulatedNvml, watch, caplog
) -> None:
    """It was skipped for the watcher's life: a GPU lost at the registration, and back
    since, kept its place in the topology (so no rediscovery replaced the watcher), and
    its XIDs went unwatched until the exporter restarted."""
    caplog.set_level(logging.INFO, logger="gpufleet.exporter.nvml.xid")
    entities = NvmlReader(sim, []).discover()
    sim.fail_gpu(1)
    watcher = watch(entities)
    assert watcher.watched == (0, 2, 3) and watcher.running
    wait_for(lambda: watcher.errors >= 3)  # tried again, and failing still: not logged again
    sim.restore_gpu(1)
    wait_for(lambda: watcher.watched == (0, 1, 2, 3))
    sim.inject_xid(1, 48)
    wait_for(lambda: state(watcher, 1).last == 48)
    said = [r.getMessage() for r in caplog.records if "GPU 1" in r.getMessage()]
    assert len(said) == 3, said  # not watched, watched now, the XID
    assert "retrying with backoff" in said[0] and "watched now" in said[1]


def test_no_gpu_registered_yet_means_a_thread_that_tries_again(sim: SimulatedNvml, watch) -> None:
    entities = NvmlReader(sim, []).discover()
    for gpu in range(4):
        sim.fail_gpu(gpu)
    watcher = watch(entities)
    assert watcher.running and watcher.watched == () and watcher.snapshot() == {}
    sim.restore_gpu(2)
    wait_for(lambda: watcher.watched == (2,))
    sim.inject_xid(2, 31)
    wait_for(lambda: state(watcher, 2).last == 31)
    assert watcher.stop() is True


def test_history_carries_over_to_a_replacement_watcher(sim: SimulatedNvml, watch) -> None:
    first = watch()
    sim.inject_xid(2, 74)
    wait_for(lambda: bool(state(first, 2).counts))
    first.stop()
    second = watch(initial=first.history())
    sim.inject_xid(2, 74)
    wait_for(lambda: state(second, 2).counts.get(74) == 2)


def test_no_gpu_registered_means_no_thread(sim: SimulatedNvml, watch) -> None:
    sim.set_not_supported("nvmlDeviceRegisterEvents")
    watcher = watch()
    assert not watcher.running and watcher.watched == ()
    assert watcher.snapshot() == {}


def test_snapshot_covers_watched_gpus_only_history_keeps_the_rest(
    sim: SimulatedNvml, watch
) -> None:
    sim.set_not_supported("nvmlDeviceRegisterEvents", index=2)
    carried = {2: XidState(last=79, counts={79: 1}), 9: XidState(last=13, counts={13: 4})}
    watcher = watch(initial=carried)
    assert watcher.snapshot() == {g: XidState(last=0, counts={}) for g in (0, 1, 3)}
    assert watcher.history() == carried


def test_an_xid_storm_is_counted_in_full_and_logged_a_few_lines(
    sim: SimulatedNvml, watch, caplog
) -> None:
    """A crash-looping job's XIDs were a warning each (20,000 lines for 20,000 XIDs);
    now each GPU logs a burst, then one line per interval, while every XID counts."""
    caplog.set_level(logging.WARNING, logger="gpufleet.exporter.nvml.xid")
    watcher = watch(clock=lambda: 7.5)  # a frozen clock: no interval passes
    for _ in range(200):
        sim.inject_xid(1, 13)
    sim.inject_xid(2, 48)
    wait_for(lambda: state(watcher, 1).counts.get(13) == 200 and state(watcher, 2).last == 48)
    said = [r.getMessage() for r in caplog.records]
    assert said.count("XID 13 on GPU 1") == LOG_BURST
    assert "XID 48 on GPU 2" in said  # another GPU's first XID is not held back
