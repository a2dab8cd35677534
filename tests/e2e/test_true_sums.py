"""The README's invariant, through a real Prometheus scraping the lab's own node (8 H100s:
2 whole, 2 in MIG 7 x 1g.10gb, 4 time-sliced 22 ways; 104 pods) with dcgm-exporter's own
counters file, every optional row turned on (its whole catalog):

- every device field has exactly one series per GPU or MIG instance, so `sum` over it
  equals the sum over unique GPUs and instances, and whole-GPU quantities (temperature,
  power, energy, ...) count each physical GPU once; dcgm-exporter's own families
  (`DCGM_EXP_*`) have one series per GPU and key (health watch, peer, XID, clock event),
  never one per pod or MIG instance;
- per-pod values on shared GPUs (GPU_UTIL, FB_USED) add up, with the device series' rest,
  to the GPU's own value as NVML reports it;
- pod GPU shares never exceed the GPU, and pod power never exceeds the node's.
"""

from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest
from helpers import wait_for
from helpers.dcgm_exporter import DEFAULT_COUNTERS, NOT_ON_H100, every_row_on, field_rows
from helpers.e2e import PinnedPrometheus, scraped_node

from gpufleet.exporter.core.fields import BYTES_PER_MIB
from gpufleet.lab.node import NodeLayout, SimNode

SPLIT = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED")
ENTITY = "UUID, GPU_I_ID"
# dcgm-exporter's own families: per GPU, one series per key.
EXP_KEYS = {
    "DCGM_EXP_GPU_HEALTH_STATUS": "health_watch",
    "DCGM_EXP_P2P_STATUS": "peer_gpu",
    "DCGM_EXP_XID_ERRORS_COUNT": "xid",
    "DCGM_EXP_CLOCK_EVENTS_COUNT": "clock_event",
}


def _value(prom, expr: str) -> float:
    (result,) = prom.query(expr)
    return float(result["value"][1])


def _by(prom, expr: str, *labels: str) -> dict[tuple[str, ...], float]:
    return {
        tuple(r["metric"].get(label, "") for label in labels): float(r["value"][1])
        for r in prom.query(expr)
    }


def _memory(node: SimNode, uuid: str):
    """NVML's own memory info of a GPU or MIG device, independent of the exporter."""
    handle = node.sim.nvmlDeviceGetHandleByUUID(uuid)
    return node.sim.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return every_row_on(DEFAULT_COUNTERS, tmp_path_factory.mktemp("csv") / "all.csv")


@pytest.fixture(scope="module")
def scraped(
    tmp_path_factory: pytest.TempPathFactory, catalog: Path
) -> Iterator[tuple[SimNode, PinnedPrometheus]]:
    """The lab's node scraped by Prometheus, once for the module, and read at one scrape:
    the tests only read, and compare sums taken by separate queries."""
    root = tmp_path_factory.mktemp("true-sums")
    with scraped_node(root, NodeLayout(), collectors=catalog) as (node, _, prom):
        wait_for(lambda: prom.query("DCGM_FI_PROF_GR_ENGINE_ACTIVE"), timeout=30, what="GPM fields")
        wait_for(lambda: prom.query("gpufleet_pod_gpu_share"), timeout=30, what="pod shares")
        yield node, prom.pinned()


def test_every_row_of_the_whole_catalog_is_served(scraped, catalog: Path) -> None:
    _, prom = scraped
    rows = field_rows(catalog)
    served = {r["metric"]["__name__"] for r in prom.query('{__name__=~"DCGM_.*"}')}
    labels = {k for r in prom.query("DCGM_FI_DEV_GPU_TEMP") for k in r["metric"]}
    assert rows - NOT_ON_H100 == (served | labels) & rows


def test_every_device_field_has_one_series_per_gpu_or_instance(scraped) -> None:
    node, prom = scraped
    fields = prom.query('group by (__name__) ({__name__=~"DCGM_FI_.*"})')
    names = [r["metric"]["__name__"] for r in fields]
    assert len(names) > 40, names
    for name in names:
        if name in SPLIT:
            continue
        series = _value(prom, f"count({name})")
        entities = _value(prom, f"count(count by ({ENTITY}) ({name}))")
        assert series == entities, name
        # ... so sum() is the sum over unique GPUs and instances.
        total, unique = (
            _value(prom, f"sum({name})"),
            _value(prom, f"sum(max by ({ENTITY}) ({name}))"),
        )
        assert total == pytest.approx(unique), name
    # Whole-GPU quantities count each of the 8 physical GPUs once, not per pod or slice.
    for name in (
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    ):
        assert _value(prom, f"count({name})") == len(node.sim.devices), name
        assert _value(prom, f'count({name}{{GPU_I_ID!=""}})' + " or vector(0)") == 0, name


@pytest.mark.parametrize("name", sorted(EXP_KEYS))
def test_dcgm_exporters_own_families_are_per_gpu_and_key(scraped, name: str) -> None:
    node, prom = scraped
    key = EXP_KEYS[name]
    series = _value(prom, f"count({name})")
    assert series == _value(prom, f"count(count by (UUID, {key}) ({name}))"), name
    assert _value(prom, f"count(count by (UUID) ({name}))") == len(node.sim.devices), name
    # (A GPU one pod holds carries that pod's labels, as dcgm-exporter's series do.)
    assert _value(prom, f'count({name}{{GPU_I_ID!=""}}) or vector(0)') == 0, name


def test_shared_gpu_series_add_up_to_the_gpus_own_value(scraped) -> None:
    node, prom = scraped
    fb_used = _by(prom, f"sum by ({ENTITY}) (DCGM_FI_DEV_FB_USED)", "UUID", "GPU_I_ID")
    assert len(fb_used) == 6 + 14  # 6 non-MIG GPUs and 14 MIG instances
    for gpu in node.sim.devices:
        targets = (
            [(gpu.uuid, "", gpu.uuid)]
            if not gpu.mig_enabled
            else [(gpu.uuid, str(m.gi_id), m.uuid) for m in gpu.mig]
        )
        for uuid, gi, handle_uuid in targets:
            used = _memory(node, handle_uuid).used
            assert fb_used[(uuid, gi)] == used // BYTES_PER_MIB, (uuid, gi)
    # A time-sliced GPU: 22 pods and the device's rest, never two copies of the device.
    per_gpu = _by(prom, "count by (UUID) (DCGM_FI_DEV_GPU_UTIL)", "UUID")
    assert sorted(per_gpu.values()) == [1, 1] + [23] * 4
    for util in _by(prom, "sum by (UUID) (DCGM_FI_DEV_GPU_UTIL)", "UUID").values():
        assert 0 <= util <= 100
    # dcgm-exporter's PromQL keeps true answers: per-namespace memory within the node's.
    node_mib = sum(_memory(node, g.uuid).total for g in node.sim.devices) / BYTES_PER_MIB
    per_namespace = _by(
        prom,
        "sum by (namespace) (DCGM_FI_DEV_FB_FREE + DCGM_FI_DEV_FB_USED)",
        "namespace",
    )
    assert sum(per_namespace.values()) <= node_mib


def test_pod_shares_and_power_stay_within_the_gpu(scraped) -> None:
    _, prom = scraped
    shares = _by(prom, "sum by (UUID) (gpufleet_pod_gpu_share)", "UUID")
    assert len(shares) == 8 and all(0 < s <= 1 + 1e-9 for s in shares.values()), shares
    whole = _by(prom, 'gpufleet_pod_gpu_share{pod=~"train-.*"}', "pod")
    assert list(whole.values()) == [1.0, 1.0]
    mig = _by(prom, 'gpufleet_pod_gpu_share{pod=~"mig-.*"}', "pod")
    assert len(mig) == 14 and all(v == pytest.approx(1 / 7) for v in mig.values())
    pod_watts = _value(prom, "sum(gpufleet_pod_power_usage)")
    node_watts = _value(prom, "sum(DCGM_FI_DEV_POWER_USAGE)")
    assert 0 < pod_watts <= node_watts + 1e-6
