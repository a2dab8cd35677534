"""dcgm-exporter's windowed counts: the pure counting, the series it yields, and the path
through a real collection on the simulated NVML (XIDs via its event sets, clock event
reasons via its load model), with a hand-advanced monotonic clock."""

from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest
from helpers import wait_for
from helpers.clock import ManualClock
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.exporter.collector import Collector, CollectorConfig
from gpufleet.exporter.core.counters import parse_counters, select_fields
from gpufleet.exporter.core.fields import CATALOG, CLOCK_EVENTS_COUNT_FIELD, XID_COUNT_FIELD
from gpufleet.exporter.core.samples import Entity, EntitySample, MigInstance, NodeSample, XidState
from gpufleet.exporter.core.series import SeriesOptions, build_families
from gpufleet.exporter.core.windows import CLOCK_EVENTS, count_clock_events, count_xids
from gpufleet.exporter.http.store import ExpositionStore
from gpufleet.exporter.nvml.reader import NvmlReader
from gpufleet.lab.nvml.api import SimulatedNvml

IDLE, POWER_CAP, HW_SLOWDOWN = 0x1, 0x4, 0x8


# --- pure counting ------------------------------------------------------------------------------

XID_ROWS = [
    pytest.param((), 100.0, 1000, {}, id="no-history"),
    pytest.param(((99.5, 13), (99.9, 13), (99.9, 48)), 100.0, 1000, {13: 2, 48: 1}, id="per-xid"),
    pytest.param(((99.0, 13),), 100.0, 1000, {}, id="exactly-one-window-old-is-out"),
    pytest.param(((99.001, 13),), 100.0, 1000, {13: 1}, id="just-inside-the-window"),
    pytest.param(((100.0, 13),), 100.0, 1000, {13: 1}, id="at-now-is-in"),
    pytest.param(((100.5, 13),), 100.0, 1000, {}, id="after-now-is-out"),
    pytest.param(((-200.0, 31), (0.0, 31), (1.0, 94)), 1.0, 300_000, {31: 2, 94: 1}, id="5-min"),
]


@pytest.mark.parametrize(("history", "now", "window_ms", "expected"), XID_ROWS)
def test_count_xids(history, now: float, window_ms: int, expected: dict[int, int]) -> None:
    assert count_xids(history, now=now, window_ms=window_ms) == expected


CLOCK_ROWS = [
    pytest.param((), {}, id="no-history"),
    pytest.param(((9.0, IDLE), (10.0, IDLE)), {"gpu_idle": 2}, id="each-collection-counts"),
    pytest.param(((10.0, 0),), {}, id="no-reason-counts-nothing"),
    pytest.param(
        ((9.5, POWER_CAP | HW_SLOWDOWN), (10.0, POWER_CAP)),
        {"power_cap": 2, "hw_slowdown": 1},
        id="several-bits-in-one-collection",
    ),
    pytest.param(((5.0, IDLE), (5.001, POWER_CAP)), {"power_cap": 1}, id="window-edge"),
    pytest.param(((10.0, 0x200 | 0x8000_0000),), {}, id="unknown-bits-ignored"),
]


@pytest.mark.parametrize(("history", "expected"), CLOCK_ROWS)
def test_count_clock_events(history, expected: dict[str, int]) -> None:
    assert count_clock_events(history, now=10.0, window_ms=5000) == expected


def test_clock_event_bits_are_nvmls() -> None:
    names = [
        "GpuIdle",
        "ApplicationsClocksSetting",
        "SwPowerCap",
        "HwSlowdown",
        "SyncBoost",
        "SwThermalSlowdown",
        "HwThermalSlowdown",
        "HwPowerBrakeSlowdown",
        "DisplayClockSetting",
    ]
    assert [bit for _, bit in CLOCK_EVENTS] == [
        getattr(pynvml, f"nvmlClocksEventReason{n}") for n in names
    ]
    assert [bit for _, bit in CLOCK_EVENTS] == [
        getattr(pynvml, f"nvmlClocksThrottleReason{n}") for n in names
    ]


# --- series -------------------------------------------------------------------------------------

GPU0 = Entity(gpu=0, uuid="GPU-a", pci_bus_id="00000000:01:00.0", model_name="NVIDIA H100")
MIG = MigInstance(profile="1g.10gb", gi_id=9, ci_id=0, uuid="MIG-b", dcgm_id=9)
GPU1 = Entity(gpu=1, uuid="GPU-c", pci_bus_id="00000000:02:00.0", model_name="NVIDIA H100")
GPU1_MIG = Entity(
    gpu=1, uuid="GPU-c", pci_bus_id="00000000:02:00.0", model_name="NVIDIA H100", mig=MIG
)
CSV = f"""DCGM_FI_DEV_SERIAL, label, Device Serial Number
{XID_COUNT_FIELD}, gauge, xid help
{CLOCK_EVENTS_COUNT_FIELD}, gauge, clock help
"""


def _families(sample: NodeSample) -> dict[str, list[tuple[tuple[tuple[str, str], ...], float]]]:
    selection, warnings = select_fields(parse_counters(CSV, source="t"), CATALOG, source="t")
    assert warnings == ()
    options = SeriesOptions(hostname="node-a", xid_window_ms=60_000, clock_events_window_ms=10_000)
    families = build_families(sample, selection=selection, pods={}, options=options)
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in families}


def _identity(entity: Entity) -> tuple[tuple[str, str], ...]:
    labels = [
        ("gpu", str(entity.gpu)),
        ("UUID", entity.uuid),
        ("pci_bus_id", entity.pci_bus_id),
        ("device", f"nvidia{entity.gpu}"),
        ("modelName", entity.model_name),
    ]
    if entity.mig:
        labels += [("GPU_I_PROFILE", "1g.10gb"), ("GPU_I_ID", "9")]
    return (*labels, ("Hostname", "node-a"))


def test_windowed_series_have_dcgm_labels_exactly() -> None:
    sample = NodeSample(
        entities=(
            EntitySample(entity=GPU0, values={}, labels={"DCGM_FI_DEV_SERIAL": "s0"}),
            EntitySample(entity=GPU1, values={}, labels={"DCGM_FI_DEV_SERIAL": "s1"}),
            EntitySample(entity=GPU1_MIG, values={}, labels={"DCGM_FI_DEV_SERIAL": "s1"}),
        ),
        xid={
            0: XidState(last=48, counts={13: 5, 48: 1}, recent=((1.0, 13), (50.0, 48), (70.0, 13))),
            1: XidState(last=0, counts={}),
        },
        collected_monotonic=100.0,
        clock_events={0: ((89.0, IDLE), (95.0, IDLE | POWER_CAP), (100.0, POWER_CAP))},
    )
    families = _families(sample)
    window = ("window_size_in_ms", "60000")
    serial = ("DCGM_FI_DEV_SERIAL", "s0")
    # 13 at 1.0 is outside the 60 s window. GPU 1 is watched but saw no XID: dcgm-exporter's
    # zero, without an xid label, once on the GPU (issue 15: was no series).
    serial1 = ("DCGM_FI_DEV_SERIAL", "s1")
    assert families[XID_COUNT_FIELD] == [
        ((*_identity(GPU0), serial, window, ("xid", "13")), 1),
        ((*_identity(GPU0), serial, window, ("xid", "48")), 1),
        ((*_identity(GPU1), serial1, window), 0),
    ]
    # GPU 1 has no clock event history (reasons unreadable): no series, not a false 0.
    clock_window = ("window_size_in_ms", "10000")
    assert families[CLOCK_EVENTS_COUNT_FIELD] == [
        ((*_identity(GPU0), serial, ("clock_event", "gpu_idle"), clock_window), 1),
        ((*_identity(GPU0), serial, ("clock_event", "power_cap"), clock_window), 2),
    ]


def test_empty_windows_give_dcgm_exporters_zero_per_gpu() -> None:
    # Issue 15: an empty window served nothing, not even HELP and TYPE.
    sample = NodeSample(
        entities=(EntitySample(entity=GPU0, values={}),),
        xid={0: XidState(last=13, counts={13: 1}, recent=((1.0, 13),))},
        collected_monotonic=100.0,
        clock_events={0: ((100.0, 0),)},
    )
    assert _families(sample) == {
        XID_COUNT_FIELD: [((*_identity(GPU0), ("window_size_in_ms", "60000")), 0)],
        CLOCK_EVENTS_COUNT_FIELD: [((*_identity(GPU0), ("window_size_in_ms", "10000")), 0)],
    }


def test_counts_are_per_gpu_not_repeated_on_mig_instances() -> None:
    sample = NodeSample(
        entities=(EntitySample(entity=GPU1, values={}), EntitySample(entity=GPU1_MIG, values={})),
        xid={1: XidState(last=79, counts={79: 1}, recent=((99.0, 79),))},
        collected_monotonic=100.0,
    )
    window = ("window_size_in_ms", "60000")
    assert _families(sample) == {
        XID_COUNT_FIELD: [
            ((*_identity(GPU1), window, ("xid", "79")), 1),
        ]
    }


# --- through a collection -----------------------------------------------------------------------

WINDOW_MS = 30_000


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[tuple[Collector, SimulatedNvml, ManualClock]]:
    # Only the windowed counts: the clock event reasons are read although not selected.
    csv = f"{XID_COUNT_FIELD}, gauge, x\n{CLOCK_EVENTS_COUNT_FIELD}, gauge, c\n"
    selection, warnings = select_fields(parse_counters(csv, source="t"), CATALOG, source="t")
    assert warnings == ()
    clock = ManualClock()
    with SimulatedNvml("2xH100", proc_root=tmp_path / "proc", clock=clock) as sim:
        sim.nvmlInit()
        options = SeriesOptions(xid_window_ms=WINDOW_MS, clock_events_window_ms=WINDOW_MS)
        built = Collector(
            lib=sim,
            reader=NvmlReader(sim, (f.spec for f in selection.fields)),
            config=CollectorConfig(selection=selection, options=options, self_metrics=False),
            store=ExpositionStore(),
            clock=clock,
            wall_clock=lambda: 1.7e9,
        )
        yield built, sim, clock
        built.close()


def _counts(collector: Collector, name: str, key: str) -> dict[tuple[str, str | None], float]:
    """(gpu, xid or clock_event) -> count; the key is None on the zero of an empty window."""
    text = collector.collect_once().text.decode()
    return {
        (s.labels["gpu"], s.labels.get(key)): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and s.labels["window_size_in_ms"] == str(WINDOW_MS)
    }


def test_injected_xids_are_counted_then_fall_out_of_the_window(collector) -> None:
    collector, sim, clock = collector
    zeros = {("0", None): 0, ("1", None): 0}
    assert _counts(collector, XID_COUNT_FIELD, "xid") == zeros
    sim.inject_xid(1, 48)
    sim.inject_xid(1, 48)
    wait_for(lambda: _counts(collector, XID_COUNT_FIELD, "xid") == {("0", None): 0, ("1", "48"): 2})
    clock.now += 20.0
    sim.inject_xid(1, 13)
    wait_for(lambda: ("1", "13") in _counts(collector, XID_COUNT_FIELD, "xid"))
    clock.now += 10.0  # the two 48s are exactly one window old now
    assert _counts(collector, XID_COUNT_FIELD, "xid") == {("0", None): 0, ("1", "13"): 1}
    clock.now += 20.0
    assert _counts(collector, XID_COUNT_FIELD, "xid") == zeros


def test_clock_events_count_collections_in_the_window(collector) -> None:
    collector, sim, clock = collector
    # Two full-share processes keep GPU 0 above 90 % busy: NVML reports a power cap at
    # every collection. GPU 1's reasons are unreadable: no history, no series.
    gpu0 = sim.devices[0].uuid
    for _ in range(2):
        sim.spawn_process(gpu0, pod_uid=None, used_memory_bytes=1 << 30, sm_share=1.0)
    sim.set_not_supported("nvmlDeviceGetCurrentClocksEventReasons", index=1)
    for _ in range(3):
        counts = _counts(collector, CLOCK_EVENTS_COUNT_FIELD, "clock_event")
        clock.now += 10.0
    assert counts == {("0", "power_cap"): 3}
    # The collection at +0 s is exactly one window old now and has left it.
    assert _counts(collector, CLOCK_EVENTS_COUNT_FIELD, "clock_event") == {("0", "power_cap"): 3}
    clock.now += 60.0
    assert _counts(collector, CLOCK_EVENTS_COUNT_FIELD, "clock_event") == {("0", "power_cap"): 1}
