"""NVIDIA's own dashboard (grafana.com 12239: dcgm-exporter's
`grafana/dcgm-exporter-dashboard.json`, verbatim) over a real Prometheus scraping the
exporter with dcgm-exporter's own default counters file, as a user who swaps dcgm-exporter
for gpufleet keeps both unchanged:

- every panel draws on Hopper; on an A100 every panel but Tensor Core Utilization, which
  stays empty (README, "What each GPU generation gets": no GPM, nothing faked);
- the per-GPU panels draw one line per GPU, where dcgm-exporter drew one per pod (issue 15
  counted 23 lines labelled "GPU 2"), and the power total is the GPUs' own, within what
  they can draw;
- on a shared GPU, Utilization and Framebuffer draw each pod's own value and the device's
  rest, which add up to the GPU's.
"""

import json
from collections import defaultdict
from collections.abc import Iterator

import pynvml
import pytest
from helpers import wait_for
from helpers.dcgm_exporter import DASHBOARD, DEFAULT_COUNTERS
from helpers.e2e import scraped_node
from helpers.grafana import PromApi, expand, resolve, targets

from gpufleet.exporter.core.fields import BYTES_PER_MIB
from gpufleet.lab.node import NodeLayout, SimNode

pytestmark = pytest.mark.prometheus
NVIDIA = json.loads(DASHBOARD.read_text())
QUERIES = {panel["title"]: target["expr"] for panel, target in targets(NVIDIA)}
TENSOR = "Tensor Core Utilization"
PER_GPU = ("GPU Temperature", "GPU Power Usage", "GPU SM Clocks")
LAYOUTS = {
    # The lab's node: 2 whole GPUs, 2 in MIG 7 x 1g.10gb, 4 time-sliced 22 ways.
    "H100": NodeLayout(),
    "A100": NodeLayout(fleet="2xA100+1xA100:mig=7x1g.10gb", whole_gpus=1, replicas=4),
}


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, SimNode, PromApi, dict[str, str]]]:
    """A node of each model scraped by Prometheus, and the dashboard's variables resolved."""
    model = request.param
    root = tmp_path_factory.mktemp(f"nvidia-{model}")
    with scraped_node(root, LAYOUTS[model], collectors=DEFAULT_COUNTERS) as (node, _, prom):
        api = PromApi(prom.port)
        values = wait_for(lambda: resolve(NVIDIA, api), timeout=60, what="the variables")
        yield model, node, api, values


def _answer(world, title: str) -> list[dict]:
    """The panel's query, once it returns data."""
    _, _, prom, values = world
    query = expand(QUERIES[title], values)
    return wait_for(lambda: prom.query(query), timeout=60, poll_seconds=0.5, what=query)


def _gpus(node: SimNode) -> list[str]:
    return [str(gpu.index) for gpu in node.sim.devices]


@pytest.mark.parametrize("title", [t for t in QUERIES if t != TENSOR])
def test_every_panel_draws(world, title: str) -> None:
    assert _answer(world, title)


def test_tensor_cores_draw_per_gpu_or_instance_on_hopper_and_not_at_all_before(world) -> None:
    model, _, prom, values = world
    if model == "H100":
        # One line per GPU or MIG instance: 6 GPUs and 14 instances.
        assert len(_answer(world, TENSOR)) == 6 + 14
        return
    _answer(world, "GPU Temperature")  # the node is scraped ...
    assert prom.query(expand(QUERIES[TENSOR], values)) == []  # ... and nothing is faked


@pytest.mark.parametrize("title", PER_GPU)
def test_per_gpu_panels_draw_one_line_per_gpu(world, title: str) -> None:
    _, node, _, _ = world
    lines = _answer(world, title)
    assert sorted(s["metric"]["gpu"] for s in lines) == sorted(_gpus(node))


def test_power_total_is_the_gpus_own(world) -> None:
    _, node, _, _ = world
    (sample,) = _answer(world, "GPU Power Total")
    sim = node.sim
    limit_watts = sum(
        sim.nvmlDeviceGetEnforcedPowerLimit(sim.nvmlDeviceGetHandleByIndex(gpu.index)) / 1000
        for gpu in sim.devices
    )
    assert 0 < float(sample["value"][1]) <= limit_watts


def test_shared_gpus_draw_each_pods_own_share_of_the_gpu(world) -> None:
    _, node, _, _ = world
    util = defaultdict(list)
    for sample in _answer(world, "GPU Utilization"):
        util[sample["metric"]["gpu"]].append(float(sample["value"][1]))
    fb_used = defaultdict(float)
    for sample in _answer(world, "GPU Framebuffer Mem Used"):
        fb_used[sample["metric"]["gpu"]] += float(sample["value"][1])
    sim = node.sim
    for gpu in sim.devices:
        if gpu.mig_enabled:  # no GPU_UTIL on a MIG GPU; its memory is its instances'
            assert str(gpu.index) not in util
            continue
        lines = util[str(gpu.index)]
        pods = sum(1 for p in node.pods.values() if gpu.uuid in p.device_ids[0])
        # One pod's line, or each sharing pod's and the device's rest.
        assert len(lines) == (1 if pods == 1 else pods + 1), gpu.index
        assert 0 <= sum(lines) <= 100, gpu.index
        handle = sim.nvmlDeviceGetHandleByUUID(gpu.uuid)
        used = sim.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2).used
        assert fb_used[str(gpu.index)] == used // BYTES_PER_MIB, gpu.index
