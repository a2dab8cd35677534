"""A real Prometheus scrapes the real exporter on a simulated node with the fake kubelet.

Asserted through Prometheus' HTTP API: series exist with the right pod labels for whole
GPUs, MIG slices and time-sliced shares, and shared GPUs carry per-pod values.
"""

import subprocess
from collections.abc import Iterator

import pynvml
import pytest
from helpers import wait_for
from helpers.e2e import SMALL_NODE, Prometheus, RunningExporter, scraped_node
from helpers.tools import require

from gpufleet.exporter.core.fields import BYTES_PER_MIB
from gpufleet.lab.node import SimNode


def _labels(result: list[dict]) -> list[dict]:
    return [r["metric"] for r in result]


@pytest.fixture(scope="module")
def scraped(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SimNode, RunningExporter, Prometheus]]:
    """The small node, its exporter and Prometheus scraping it, once for the tests that
    only read them."""
    with scraped_node(tmp_path_factory.mktemp("scraped"), SMALL_NODE) as world:
        yield world


def test_prometheus_sees_every_allocation_with_its_pod(scraped) -> None:
    node, _, prom = scraped
    wait_for(lambda: prom.query('up{job="gpu"} == 1'), timeout=30, what="first scrape")
    # PROF fields appear from the second collection; wait until Prometheus has them too.
    wait_for(lambda: prom.query("DCGM_FI_PROF_GR_ENGINE_ACTIVE"), timeout=30, what="GPM fields")

    for pod in node.pods.values():
        series = _labels(prom.query(f'DCGM_FI_DEV_FB_USED{{pod="{pod.name}"}}'))
        assert len(series) == 1, (pod.name, series)
        labels = series[0]
        assert labels["namespace"] == pod.namespace
        assert labels["container"] == "main"
        assert labels["pod_uid"] == pod.uid
        assert labels["Hostname"] == "node-a"
        device = pod.device_ids[0]
        if device.startswith("MIG-"):
            mig = next(m for g in node.sim.devices for m in g.mig if m.uuid == device)
            assert (labels["GPU_I_PROFILE"], labels["GPU_I_ID"]) == ("1g.10gb", str(mig.gi_id))
        else:
            assert labels["UUID"] == device.split("::")[0]
            assert "GPU_I_ID" not in labels
        if "::" in device:
            assert labels["vgpu"] == device.split("::")[1]


def test_time_sliced_pods_get_their_own_values(scraped) -> None:
    """Each sharing pod's FB_USED is its own process's memory as NVML reports it; the
    device row (no pod labels) keeps the rest, so the GPU's series add up to its FB_USED."""
    node, _, prom = scraped
    shared_gpu = next(p for p in node.pods.values() if "::" in p.device_ids[0]).device_ids[0]
    uuid = shared_gpu.split("::")[0]
    holders = {p.uid: p for p in node.pods.values() if p.device_ids[0].startswith(uuid + "::")}
    fb_used = f'DCGM_FI_DEV_FB_USED{{UUID="{uuid}"}}'
    wait_for(lambda: len(prom.query(fb_used)) == len(holders) + 1, timeout=30, what="shares")

    # NVML's own per-process numbers, independent of the exporter.
    memory_mib = {
        p.pod_uid: p.used_memory_bytes // BYTES_PER_MIB
        for p in node.sim.processes()
        if p.pod_uid in holders
    }
    assert set(memory_mib) == set(holders)
    handle = node.sim.nvmlDeviceGetHandleByUUID(uuid)
    device_used_mib = (
        node.sim.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2).used // BYTES_PER_MIB
    )

    rows = prom.query(fb_used)
    per_pod = {r["metric"]["pod_uid"]: float(r["value"][1]) for r in rows if "pod" in r["metric"]}
    assert per_pod == {uid: float(mib) for uid, mib in memory_mib.items()}
    (device,) = [r for r in rows if "pod" not in r["metric"]]
    assert float(device["value"][1]) + sum(per_pod.values()) == device_used_mib

    util = prom.query(f'DCGM_FI_DEV_GPU_UTIL{{UUID="{uuid}"}}')  # one scrape: one collection
    (rest,) = [float(r["value"][1]) for r in util if "pod" not in r["metric"]]
    pod_util = [float(r["value"][1]) for r in util if "pod" in r["metric"]]
    assert len(pod_util) == len(holders)
    assert all(value >= 0 for value in (rest, *pod_util)) and rest + sum(pod_util) <= 100


def test_exposition_passes_promtool(node, exporter_for):
    require("promtool")
    exporter = exporter_for(node)
    wait_for(lambda: "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in exporter.metrics(), what="GPM fields")
    text = exporter.metrics()
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    # Exit 3 is lint only. dcgm's names are compatibility facts: counters without _total,
    # PCIE_REPLAY_COUNTER naming its type, camelCase labels (modelName, UUID). Nothing else.
    assert "error while linting" not in result.stderr
    assert result.returncode in (0, 3), result.stderr
    allowed = (
        'should have "_total" suffix',
        "should not include type 'counter'",
        "should be written in 'snake_case' not 'camelCase'",
    )
    assert [line for line in result.stderr.splitlines() if not line.endswith(allowed)] == []


def test_prometheus_keeps_every_dcgm_counter_a_counter(scraped) -> None:
    # Issue 15: Prometheus asks for OpenMetrics first; served that, the counters without
    # _total came back `unknown` in /api/v1/metadata. dcgm-exporter serves text only.
    _, exporter, prom = scraped
    counters = [
        line.split()[2]
        for line in exporter.metrics().splitlines()
        if line.startswith("# TYPE DCGM_") and line.endswith(" counter")
    ]
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in counters
    for name in counters:
        stored = wait_for(lambda name=name: prom.metadata(name), timeout=30, what=name)
        assert {entry["type"] for entry in stored} == {"counter"}, (name, stored)


def test_histogram_and_summary_rows_scrape_as_declared(tmp_path) -> None:
    """dcgm-exporter accepts `histogram` and `summary` rows and declares the field's one
    sample so (issue 15): a real Prometheus takes that scrape and keeps the declared type."""
    counters = tmp_path / "counters.csv"
    counters.write_text(
        "DCGM_FI_DEV_GPU_TEMP, histogram, GPU temperature (in C).\n"
        "DCGM_FI_DEV_POWER_USAGE, summary, Power draw (in W).\n"
    )
    with scraped_node(tmp_path, SMALL_NODE, collectors=counters) as (_, _, prom):
        wait_for(lambda: prom.query('up{job="gpu"} == 1'), timeout=30, what="a good scrape")
        for name, kind in (
            ("DCGM_FI_DEV_GPU_TEMP", "histogram"),
            ("DCGM_FI_DEV_POWER_USAGE", "summary"),
        ):
            assert wait_for(lambda name=name: prom.query(name), timeout=30, what=name)
            stored = wait_for(lambda name=name: prom.metadata(name), timeout=30, what=name)
            assert {entry["type"] for entry in stored} == {kind}, (name, stored)
