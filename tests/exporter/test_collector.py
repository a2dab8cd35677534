"""The collection pipeline, driven one `collect_once` at a time against the simulated NVML
(and the fake kubelet on a real unix socket), with a hand-advanced monotonic clock."""

import gzip
import logging
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import wait_for
from helpers.clock import ManualClock
from helpers.dcgm_exporter import (
    DCP_COUNTERS,
    DEFAULT_COUNTERS,
    NOT_ON_H100,
    V1_COUNTERS,
    every_row_on,
    field_rows,
)
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.exporter.collector import Collector, CollectorConfig, CollectorLoop
from gpufleet.exporter.core.render import Exposition
from gpufleet.exporter.core.selection import parse_devices
from gpufleet.exporter.daemon import load_selection, series_options
from gpufleet.exporter.http.store import TEXT_GZIP_DEMAND_SECONDS, ExpositionStore
from gpufleet.exporter.nvml.reader import ERROR_KINDS, NvmlReader
from gpufleet.exporter.pods.podresources import PodResourcesWatcher
from gpufleet.exporter.pods.procfs import PidPodMap
from gpufleet.exporter.settings import EMBEDDED_COLLECTORS, ExporterSettings
from gpufleet.lab.node import NodeLayout, SimNode

DEADLINE_S = 5.0
REDISCOVER_S = 60.0
# GPUs 0-1 whole (0 to one pod, 1 time-sliced 2 ways), GPU 2 split into 2 MIG slices.
LAYOUT = NodeLayout(fleet="2xH100+1xH100:mig=2x1g.10gb", whole_gpus=1, replicas=2)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[SimNode]:
    with SimNode(LAYOUT, root=tmp_path / "n") as n:
        n.sim.nvmlInit()
        yield n


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def make(
    node: SimNode, clock: ManualClock
) -> Iterator[Callable[..., tuple[Collector, ExpositionStore]]]:
    """Build a collector on `node`; `kubelet=True` attributes pods through the fake kubelet;
    `reader_lib` is the NVML library its reader calls (the node's by default)."""
    built: list[tuple[Collector, PodResourcesWatcher | None]] = []

    def build(
        *,
        devices: str = "f",
        kubelet: bool = False,
        csv: Path = EMBEDDED_COLLECTORS,
        reader_lib: object = None,
    ) -> tuple[Collector, ExpositionStore]:
        selection = load_selection(csv)
        watcher = None
        if kubelet:
            watcher = PodResourcesWatcher(
                socket_path=node.kubelet.pod_resources_socket,
                checkpoint_path=node.kubelet.checkpoint_path,
            )
            watcher.refresh_now()
        store = ExpositionStore()
        collector = Collector(
            lib=node.sim,
            reader=NvmlReader(reader_lib or node.sim, (f.spec for f in selection.fields)),
            config=CollectorConfig(
                selection=selection,
                options=series_options(ExporterSettings(node_name="node-a")),
                devices=parse_devices(devices),
                rediscover_seconds=REDISCOVER_S,
            ),
            store=store,
            kubelet=watcher,
            pid_pods=PidPodMap(proc_root=node.sim.proc_root) if kubelet else None,
            clock=clock,
            wall_clock=lambda: 1.7e9,
        )
        built.append((collector, watcher))
        return collector, store

    yield build
    for collector, watcher in built:
        collector.close()
        if watcher:
            watcher.stop()


def samples(exposition: Exposition, name: str, **labels: str) -> list:
    return [
        s
        for f in text_string_to_metric_families(exposition.text.decode())
        for s in f.samples
        if s.name == name and labels.items() <= s.labels.items()
    ]


def value(exposition: Exposition, name: str, **labels: str) -> float:
    """The one sample's value, 0 when there is none (counters not yet incremented)."""
    found = samples(exposition, name, **labels)
    assert len(found) <= 1, found
    return found[0].value if found else 0.0


def entities(exposition: Exposition) -> set[tuple[str, str | None]]:
    """(gpu, GPU_I_ID or None) of every entity with an FB_USED series."""
    return {
        (s.labels["gpu"], s.labels.get("GPU_I_ID"))
        for s in samples(exposition, "DCGM_FI_DEV_FB_USED")
    }


def gpus(exposition: Exposition) -> set[str]:
    return {gpu for gpu, _ in entities(exposition)}


def errors(exposition: Exposition) -> dict[str, float]:
    """Nonzero gpufleet_exporter_errors_total by kind."""
    found = {
        s.labels["kind"]: s.value for s in samples(exposition, "gpufleet_exporter_errors_total")
    }
    return {kind: count for kind, count in found.items() if count}


def test_each_collection_is_published_and_counted(make, clock: ManualClock) -> None:
    collector, store = make()
    assert store.latest() is None
    first = collector.collect_once()
    assert store.latest() is first
    assert gpus(first) == {"0", "1", "2"}
    assert value(first, "gpufleet_exporter_collections_total") == 1
    assert value(first, "gpufleet_exporter_series") > 0
    assert value(first, "gpufleet_exporter_last_success_timestamp_seconds") == 1.7e9
    clock.now += 1
    second = collector.collect_once()
    assert store.latest() is second
    assert value(second, "gpufleet_exporter_collections_total") == 2
    assert second.collected_monotonic == clock.now


def test_every_error_kind_is_served_from_zero(make) -> None:
    """increase() over a counter born at 1 sees nothing: GPUFallenOffBus fired a collection
    late, and a single nvml_error or timeout was never seen."""
    collector, _ = make()
    first = collector.collect_once()
    served = {s.labels["kind"]: s.value for s in samples(first, "gpufleet_exporter_errors_total")}
    assert served == dict.fromkeys((*ERROR_KINDS, "xid_watch"), 0.0)


def test_text_gzip_is_built_while_scrapes_ask_for_it(make, clock: ManualClock) -> None:
    collector, store = make()
    first = collector.collect_once()
    assert first.text_gzip is None
    assert first.openmetrics is None and first.openmetrics_gzip is None  # not --openmetrics
    store.want_text_gzip(clock.now)
    second = collector.collect_once()
    assert gzip.decompress(second.text_gzip) == second.text
    clock.now += TEXT_GZIP_DEMAND_SECONDS + 1
    assert collector.collect_once().text_gzip is None


@pytest.mark.parametrize(
    "lost_before_first_collection",
    [True, False],
    ids=["lost-at-discovery", "lost-mid-run"],
)
def test_lost_gpu_is_left_out_then_found_again_soon_after_restore(
    make, node: SimNode, clock: ManualClock, lost_before_first_collection: bool
) -> None:
    collector, _ = make()
    if not lost_before_first_collection:
        assert gpus(collector.collect_once()) == {"0", "1", "2"}
    node.sim.fail_gpu(1)
    clock.now += 1
    lost = collector.collect_once()
    assert gpus(lost) == {"0", "2"}
    assert errors(lost).get("gpu_lost", 0) >= 1
    node.sim.restore_gpu(1)
    # A lost GPU brings the next discovery forward to 5 s, well before REDISCOVER_S.
    clock.now += 5
    assert gpus(collector.collect_once()) == {"0", "1", "2"}


SLICES = {("2", "7"), ("2", "8")}  # the simulator's GPU instance ids for 2 x 1g.10gb


@pytest.mark.parametrize(
    ("devices", "expected"),
    [
        ("f", {("0", None), ("1", None), *SLICES}),
        ("g", {("0", None), ("1", None), ("2", None)}),
        ("i", SLICES),
        ("g:1", {("1", None)}),
    ],
    ids=["flex-drops-mig-parent", "whole-gpus-with-mig-parent", "mig-instances", "gpu-range"],
)
def test_devices_selector_picks_the_entities(make, node, devices, expected) -> None:
    assert {("2", str(m.gi_id)) for m in node.sim.devices[2].mig} == SLICES
    assert entities(make(devices=devices)[0].collect_once()) == expected


def _lose_gpu(node: SimNode, collector: Collector) -> None:
    node.sim.fail_gpu(1)


def _failing_xid_waits(node: SimNode, collector: Collector) -> None:
    node.sim.set_not_supported("nvmlEventSetWait_v2")


@pytest.mark.parametrize(
    ("inject", "kind"),
    [
        (_lose_gpu, "gpu_lost"),
        (_failing_xid_waits, "xid_watch"),
        (lambda node, collector: collector.count_error("timeout"), "timeout"),
        (lambda node, collector: collector.count_error("unexpected"), "unexpected"),
    ],
    ids=["lost-gpu", "xid-wait-errors", "loop-timeout", "loop-unexpected"],
)
def test_errors_are_counted_under_their_kind(make, node, clock, inject, kind) -> None:
    collector, _ = make()
    assert errors(collector.collect_once()) == {}
    inject(node, collector)

    def counted_with_kind() -> dict[str, float] | None:
        counted = errors(collector.collect_once())
        return counted if kind in counted else None

    counted = wait_for(counted_with_kind, timeout=DEADLINE_S, what=f"{kind} counted")
    assert set(counted) == {kind}


def test_pods_are_attributed_from_the_fake_kubelet(make, node: SimNode) -> None:
    collector, _ = make(kubelet=True)
    exposition = collector.collect_once()
    labelled = {
        s.labels["pod"] for s in samples(exposition, "DCGM_FI_DEV_FB_USED") if "pod" in s.labels
    }
    assert labelled == {p.name for p in node.pods.values()}
    assert value(exposition, "gpufleet_exporter_kubelet_last_success_timestamp_seconds") > 0


class ProcessCalls:
    """An NVML library that records which GPU each per-process call asks about."""

    PER_PROCESS = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetProcessUtilization")

    def __init__(self, lib) -> None:
        self._lib = lib
        self.gpus: set[int] = set()

    def __getattr__(self, name: str):
        value = getattr(self._lib, name)
        if name not in self.PER_PROCESS:
            return value

        def recorded(handle, *args):
            self.gpus.add(self._lib.nvmlDeviceGetIndex(handle))
            return value(handle, *args)

        return recorded


def test_processes_are_read_only_on_gpus_several_pods_share(make, node: SimNode) -> None:
    """Attribution needs processes only where pods share an entity, and the per-process
    calls cost a real driver milliseconds per GPU: GPU 1, time-sliced, is the one asked."""
    calls = ProcessCalls(node.sim)
    collector, _ = make(kubelet=True, reader_lib=calls)
    exposition = collector.collect_once()
    assert calls.gpus == {1}
    shared = samples(exposition, "DCGM_FI_DEV_FB_USED", gpu="1")
    assert len({s.labels.get("pod") for s in shared} - {None}) == LAYOUT.replicas
    dropped = "gpufleet_exporter_attribution_dropped"
    assert value(exposition, dropped, reason="unsplit_entities") == 0


def test_loop_stop_reports_a_collection_still_in_flight(make, node: SimNode) -> None:
    collector, _ = make()
    node.sim.set_hang("nvmlDeviceGetPowerUsage", 1.0, index=0)
    loop = CollectorLoop(collector, interval_seconds=0.05, timeout_seconds=0.05)
    loop.start()

    def collecting() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "gpufleet-collect"]

    wait_for(collecting, timeout=DEADLINE_S, what="a collection started")
    assert all(t.daemon for t in collecting()), "a hung driver must not block exit"
    assert loop.stop(timeout_seconds=0) is False
    assert loop.stop(timeout_seconds=DEADLINE_S) is True  # the hang ended


def test_a_collection_thread_that_cannot_start_is_counted_and_tried_again(
    make, node: SimNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CPython raises "can't start new thread" at a pids limit. The loop's thread died with
    a bare traceback, nothing was in flight for good, and the daemon served its last
    snapshot on. Injected once: counted as unexpected, and the next tick collects."""
    collector, store = make()
    real_start = threading.Thread.start
    refusals = iter([True])

    def start(thread: threading.Thread) -> None:
        if thread.name == "gpufleet-collect" and next(refusals, False):
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    loop = CollectorLoop(collector, interval_seconds=0.05, timeout_seconds=DEADLINE_S)
    loop.start()
    try:
        wait_for(lambda: store.latest() is not None, timeout=DEADLINE_S, what="a collection")
    finally:
        assert loop.stop(timeout_seconds=DEADLINE_S) is True
    assert value(collector.collect_once(), "gpufleet_exporter_errors_total", kind="unexpected") == 1


# dcgm-exporter's 1.x compatibility file: 22 rows, two of which repeat the PCIe PROF fields.
V1_SERVED = {
    "dcgm_sm_clock",
    "dcgm_memory_clock",
    "dcgm_memory_temp",
    "dcgm_gpu_temp",
    "dcgm_power_usage",
    "dcgm_total_energy_consumption",
    "dcgm_fi_prof_pcie_tx_bytes",
    "dcgm_fi_prof_pcie_rx_bytes",
    "dcgm_pcie_replay_counter",
    "dcgm_gpu_utilization",
    "dcgm_mem_copy_utilization",
    "dcgm_enc_utilization",
    "dcgm_dec_utilization",
    "dcgm_xid_errors",
    "dcgm_fb_free",
    "dcgm_fb_used",
    "dcgm_nvlink_bandwidth_total",
    "dcgm_fi_prof_gr_engine_active",
    "dcgm_fi_prof_pipe_tensor_active",
    "dcgm_fi_prof_dram_active",
}


def test_dcgm_exporter_1x_file_serves_its_lowercase_names(make, clock: ManualClock) -> None:
    # Issue 15: every row of this file was "unknown field" and the exporter exited 1.
    collector, _ = make(csv=V1_COUNTERS)
    collector.collect_once()
    clock.now += 1  # GPM and NVLink rates need a second reading
    exposition = collector.collect_once()
    text = exposition.text.decode()
    types = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE dcgm_"))
    assert set(types) == V1_SERVED
    assert not [line for line in text.splitlines() if "DCGM_" in line.partition("{")[0]]
    assert types["dcgm_total_energy_consumption"] == "counter"
    assert types["dcgm_fi_prof_pcie_tx_bytes"] == "counter"  # the first of the two rows
    assert "# HELP dcgm_sm_clock SM clock frequency (in MHz).\n" in text
    # Same readings as under the DCGM name, in the same (legacy) units.
    assert 0 < value(exposition, "dcgm_sm_clock", gpu="0") <= 2000


@pytest.mark.parametrize(
    "counters", [DEFAULT_COUNTERS, DCP_COUNTERS, V1_COUNTERS], ids=lambda p: p.name
)
def test_every_row_of_dcgm_exporters_files_is_served_on_h100(
    make, clock: ManualClock, tmp_path: Path, counters: Path
) -> None:
    """dcgm-exporter's own counters files with every optional row turned on (README,
    "Compatible with dcgm-exporter"): each row is a metric or, for a label row, a label."""
    everything = every_row_on(counters, tmp_path / counters.name)
    rows = field_rows(everything)
    collector, _ = make(csv=everything)
    collector.collect_once()
    clock.now += 1  # GPM and NVLink rates need a second reading
    text = collector.collect_once().text.decode()
    # Names as declared (a parser would add _total to counters) and every label key.
    served = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    served |= set(re.findall(r'[{,](\w+)="', text))
    assert rows - served == NOT_ON_H100 & rows


def test_a_failing_re_scan_keeps_serving_the_last_topology(
    make, node: SimNode, clock: ManualClock, caplog
) -> None:
    """A driver reload failed nvmlDeviceGetCount at the periodic re-scan: no snapshot for
    any GPU, /health 503, and a traceback on every collection (252 in 30 s), counted as
    "unexpected". The last topology is served now, the re-scan retried every 5 s."""
    caplog.set_level(logging.INFO, logger="gpufleet.exporter.collector")
    collector, _ = make()
    assert gpus(collector.collect_once()) == {"0", "1", "2"}
    node.sim.set_not_supported("nvmlDeviceGetCount")
    clock.now += REDISCOVER_S
    for _ in range(10):
        served = collector.collect_once()
        clock.now += 1
    assert gpus(served) == {"0", "1", "2"}
    assert errors(served)["nvml_error"] == 2  # at the re-scan, and 5 s later
    node.sim.clear_injections()
    clock.now += 5
    collector.collect_once()
    said = [r.getMessage() for r in caplog.records if "re-scan" in r.getMessage()]
    assert len(said) == 2 and said[1].endswith("works again, after 2 failures"), said


def test_a_collection_slow_every_time_is_one_line_not_one_each(make, node: SimNode, caplog) -> None:
    """One slow GPU made every collection overrun the timeout: a warning each (8,640 a
    day at the defaults). Now one line when it starts; every overrun is still counted."""
    caplog.set_level(logging.WARNING, logger="gpufleet.exporter.collector")
    collector, _ = make()
    node.sim.set_hang("nvmlDeviceGetPowerUsage", 0.1, index=0)
    loop = CollectorLoop(collector, interval_seconds=0.01, timeout_seconds=0.02)
    loop.start()
    try:
        wait_for(
            lambda: collector._errors["timeout"] >= 5, timeout=30, what="five slow collections"
        )
    finally:
        node.sim.set_hang("nvmlDeviceGetPowerUsage", 0, index=0)
        assert loop.stop(timeout_seconds=DEADLINE_S)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith("collection: still running"), said


def test_a_label_read_failing_at_a_re_scan_keeps_its_last_value(
    make, node: SimNode, clock: ManualClock
) -> None:
    """One failed read of the driver version at a re-scan took its label off every series
    until the next re-scan a minute later: every series changed identity twice."""
    collector, _ = make()
    first = {
        s.labels["DCGM_FI_DRIVER_VERSION"]
        for s in samples(collector.collect_once(), "DCGM_FI_DEV_FB_USED")
    }
    node.sim.set_not_supported("nvmlSystemGetDriverVersion")
    clock.now += REDISCOVER_S
    after = samples(collector.collect_once(), "DCGM_FI_DEV_FB_USED")
    assert {s.labels.get("DCGM_FI_DRIVER_VERSION") for s in after} == first != {None}


def test_a_lost_gpu_keeps_its_xid_series_with_xid_79(make, node: SimNode, clock) -> None:
    """A GPU fallen off the bus took its XID series with it: XID 79, which it raises as
    it goes, was never served, so `DCGM_FI_DEV_XID_ERRORS == 79` alerts could not fire."""
    collector, _ = make()
    collector.collect_once()  # discovers the GPUs and starts watching their XIDs
    wait_for(lambda: collector._xid.watched == (0, 1, 2), what="XIDs watched")
    node.sim.inject_xid(1, 48)
    wait_for(lambda: value(collector.collect_once(), "DCGM_FI_DEV_XID_ERRORS", gpu="1") == 48)
    node.sim.fail_gpu(1)  # raises XID 79
    clock.now += 1

    def xid_79() -> Exposition | None:
        served = collector.collect_once()
        return served if value(served, "DCGM_FI_DEV_XID_ERRORS", gpu="1") == 79 else None

    served = wait_for(xid_79, what="XID 79 on the lost GPU")
    assert gpus(served) == {"0", "2"}  # its fields are gone, its XIDs are not
    assert value(served, "gpufleet_xid_errors_total", gpu="1", xid="79") == 1
    assert value(served, "gpufleet_xid_errors_total", gpu="1", xid="48") == 1
