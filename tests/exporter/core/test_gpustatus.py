"""DCGM_EXP_GPU_HEALTH_STATUS and DCGM_EXP_P2P_STATUS through a collection on the simulated
NVML: dcgm-exporter's labels and values, per physical GPU (issue 15)."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import wait_for
from helpers.clock import ManualClock

from gpufleet.exporter.collector import Collector, CollectorConfig
from gpufleet.exporter.core.counters import parse_counters, select_fields
from gpufleet.exporter.core.fields import CATALOG, HEALTH_FIELD, P2P_FIELD
from gpufleet.exporter.core.health import WATCHES
from gpufleet.exporter.core.selection import parse_devices
from gpufleet.exporter.core.series import SeriesOptions
from gpufleet.exporter.http.store import ExpositionStore
from gpufleet.exporter.nvml.reader import NvmlReader
from gpufleet.lab.nvml.api import SimulatedNvml

# dcgm-exporter's own rows for them (etc/default-counters.csv).
CSV = f"""{HEALTH_FIELD}, counter, DCGM reported health status
{P2P_FIELD}, counter, P2P NvLink status
"""
# GPUs 0-1 H100 SXM, 2 an L4 (no NVLink), 3 an H100 in MIG mode.
FLEET = "2xH100+1xL4+1xH100:mig=2x1g.10gb"
Series = dict[tuple[str, ...], float]


@pytest.fixture
def run(tmp_path: Path) -> Iterator:
    clock = ManualClock()
    built = []

    def start(devices: str = "f") -> tuple[Collector, SimulatedNvml, ManualClock]:
        selection, warnings = select_fields(parse_counters(CSV, source="t"), CATALOG, source="t")
        assert warnings == ()
        sim = SimulatedNvml(FLEET, proc_root=tmp_path / "proc", clock=clock)
        sim.nvmlInit()
        collector = Collector(
            lib=sim,
            reader=NvmlReader(sim, (f.spec for f in selection.fields)),
            config=CollectorConfig(
                selection=selection,
                options=SeriesOptions(hostname="node-a"),
                devices=parse_devices(devices),
                self_metrics=False,
            ),
            store=ExpositionStore(),
            clock=clock,
            wall_clock=lambda: 1.7e9,
        )
        built.append((collector, sim))
        return collector, sim, clock

    yield start
    for collector, sim in built:
        collector.close()
        sim.close()


def _series(collector: Collector, name: str) -> list[str]:
    text = collector.collect_once().text.decode()
    return [line for line in text.splitlines() if line.startswith(name + "{")]


def _health(collector: Collector) -> Series:
    """(gpu, health_watch, health_error_code) -> value."""
    found = {}
    for line in _series(collector, HEALTH_FIELD):
        labels = dict(
            p.split("=", 1) for p in line[line.index("{") + 1 : line.index("}")].split(",")
        )
        key = (labels["gpu"], labels["health_watch"], labels["health_error_code"])
        found[tuple(v.strip('"') for v in key)] = float(line.rsplit(" ", 1)[1])
    return found


def test_health_series_have_dcgm_exporters_labels_exactly(run) -> None:
    collector, sim, _ = run()
    lines = _series(collector, HEALTH_FIELD)
    assert len(lines) == 4 * len(WATCHES)  # every GPU, the MIG one too, as whole GPUs
    uuid = sim.devices[0].uuid
    assert lines[0] == (
        f'{HEALTH_FIELD}{{gpu="0",UUID="{uuid}",pci_bus_id="{sim.devices[0].pci_bus_id}",'
        'device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",'
        'health_error_code="DCGM_FR_OK",health_watch="PCIE"} 0'
    )
    assert not [line for line in lines if "GPU_I_ID" in line]


def test_health_reports_xids_lost_gpus_and_memory_errors(run) -> None:
    collector, sim, clock = run()
    # The simulated GPUs hit their power cap now and then: DCGM warns while the power
    # violation counter moves. Everything else is healthy.
    assert {v for (_, watch, _), v in _health(collector).items() if watch != "POWER"} == {0}
    sim.inject_xid(1, 95)
    sim.inject_uncorrectable_ecc(3)
    sim.fail_gpu(2)  # XID 79, then NVML answers GpuIsLost
    wait_for(lambda: _health(collector).get(("1", "ALL", "DCGM_FR_UNCONTAINED_ERROR")) == 20)
    clock.now += 1
    health = _health(collector)
    unhealthy = {key: value for key, value in health.items() if value and key[1] != "POWER"}
    assert unhealthy == {
        ("1", "ALL", "DCGM_FR_UNCONTAINED_ERROR"): 20,
        ("2", "ALL", "DCGM_FR_FALLEN_OFF_BUS"): 20,
        ("3", "MEM", "DCGM_FR_VOLATILE_DBE_DETECTED"): 20,
    }
    assert len(health) == 4 * len(WATCHES)  # the lost GPU keeps its series


def test_p2p_status_per_ordered_pair_with_dcgm_link_status(run) -> None:
    collector, _, _ = run(devices="g:0")  # per GPU whatever -d selects, as dcgm-exporter
    p2p = {}
    for line in _series(collector, P2P_FIELD):
        labels = dict(
            p.split("=", 1) for p in line[line.index("{") + 1 : line.index("}")].split(",")
        )
        key = (labels["gpu"], labels["peer_gpu"], labels["link_status"])
        p2p[tuple(v.strip('"') for v in key)] = float(line.rsplit(" ", 1)[1])
    nvlink = {("0", "1"), ("1", "0"), ("0", "3"), ("3", "0"), ("1", "3"), ("3", "1")}
    expected = {
        (a, b, "OK" if (a, b) in nvlink else "NotSupported"): 0 if (a, b) in nvlink else 5
        for a in "0123"
        for b in "0123"
        if a != b
    }
    assert p2p == expected
