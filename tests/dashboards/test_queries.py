"""Every panel's query returns data from a real Prometheus scraping the lab, with the
dashboard's template variables substituted by the values Prometheus holds, as Grafana
would: a panel that stays empty on a healthy fleet fails here.

One lab for all four dashboards, once per metric profile: the exporter on a simulated
node (whole, time-sliced and MIG GPUs, with the fields the detail dashboard needs and one
XID injected), simulated vLLM pods of a Deployment on the fake API server, the real
`gpufleet autoscaler` daemon scaling it, and Prometheus with rules/ scraping all three.
"""

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REPO, free_port, wait_for
from helpers.e2e import Prometheus, RunningExporter, node_settings
from helpers.grafana import PromApi, dashboards, expand, panels, resolve, targets
from helpers.kube import api_client, create_autoscaler, create_vllm
from helpers.tools import require

from gpufleet.lab.kubeapi.cluster import ClusterTiming
from gpufleet.lab.kubeapi.server import FakeApiServer
from gpufleet.lab.node import NodeLayout, SimNode
from gpufleet.lab.workload import NAMESPACE as NS
from gpufleet.lab.workload import ServingWorkload

pytestmark = pytest.mark.prometheus
# Fields outside dcgm-exporter's default CSV that the node dashboard shows (README,
# "Dashboards": users add them with -f).
EXTRA_FIELDS = (
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, Single-bit volatile ECC errors.",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Double-bit volatile ECC errors.",
    "DCGM_FI_DEV_ROW_REMAP_PENDING, gauge, Row remapping pending.",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT, gauge, Power management limit (W).",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, counter, NVLink flow-control CRC errors.",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, counter, NVLink data CRC errors.",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, counter, NVLink replay errors.",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, counter, NVLink recovery errors.",
    "DCGM_EXP_CLOCK_EVENTS_COUNT, gauge, Clock events in the window.",
    "DCGM_EXP_XID_ERRORS_COUNT, gauge, XID events in the window.",
)
ALL = dashboards()
QUERIES = [
    pytest.param(name, panel["title"], target["expr"], id=f"{name}:{panel['id']}{target['refId']}")
    for name, d in ALL.items()
    for panel, target in targets(d)
]


@pytest.fixture(scope="module", params=["legacy", "4.9"])
def prom(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[PromApi]:
    """The lab, its exporter serving each profile in turn: under `--compat 4.9` (DCGM
    4.7's names and units) the panels reading renamed fields were empty."""
    require("prometheus")
    tmp = tmp_path_factory.mktemp("lab")
    sd = tmp / "sd"
    sd.mkdir()
    counters = tmp / "counters.csv"
    default = (REPO / "gpufleet" / "exporter" / "default-counters.csv").read_text()
    counters.write_text(default + "\n" + "\n".join(EXTRA_FIELDS) + "\n")
    layout = NodeLayout(fleet="4xH100+1xH100:mig=7x1g.10gb", whole_gpus=2, replicas=4)
    with SimNode(layout, root=tmp / "n") as node, FakeApiServer() as server:
        node.sim.nvmlInit()
        # The exporter's default labels (no vgpu): the time-slicing row read only `vgpu`
        # and stayed empty wherever --kubernetes-virtual-gpus was off, as in the lab.
        settings = node_settings(
            node,
            collectors=counters,
            collect_interval_ms=500,
            kubernetes_virtual_gpus=False,
            compat=request.param,
        )
        exporter = RunningExporter(settings, node.sim).start()
        _targets(sd / "exporter.json", f"127.0.0.1:{exporter.port}")
        wait_for(lambda: exporter.get("/health")[0] == 200, what="first collection")

        def xid_seen() -> bool:
            # The XID panels show events, not only zeros. The exporter's XID watch starts
            # with its first collection; an event before that is not its to see.
            node.sim.inject_xid(0, 13)
            return "gpufleet_xid_errors_total{" in exporter.metrics()

        wait_for(xid_seen, poll_seconds=0.5, what="the XID on the exporter")
        timing = ClusterTiming(
            cold_start_seconds=1, node_provision_seconds=1, termination_seconds=1, gpus_per_node=8
        )
        workload = ServingWorkload(
            server, timing=timing, targets_file=sd / "serving.json", rate_rps=6.0, seed=1
        )
        api = api_client(server.url)
        create_vllm(api, NS, gpus=1)
        spec = {
            "scaleTargetRef": {"kind": "Deployment", "name": "vllm"},
            "maxReplicas": 3,
            "policy": "keda",
            "keda": {"queueTarget": 5, "pollingIntervalSeconds": 1},
        }
        create_autoscaler(api, NS, spec)
        prometheus = Prometheus(
            tmp / "prom",
            file_sd=sd / "*.json",
            rule_files=tuple(sorted((REPO / "rules").glob("*.rules.yml"))),
        )
        metrics_port = free_port()
        autoscaler = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from gpufleet.cli import main; sys.exit(main())",
                "autoscaler",
                f"--kube-url={server.url}",
                f"--prometheus-url=http://127.0.0.1:{prometheus.port}",
                "--leader-elect=false",
                f"--metrics-address=127.0.0.1:{metrics_port}",
                "--scrape-interval-seconds=1",
                "--rate-window=5s",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(tmp / "autoscaler.log").open("w"),  # for a failure's post-mortem
        )
        _targets(sd / "autoscaler.json", f"127.0.0.1:{metrics_port}")
        try:
            yield PromApi(prometheus.port)
        finally:
            autoscaler.terminate()
            autoscaler.wait(15)
            prometheus.stop()
            api.close()
            workload.stop()
            exporter.stop()


def _targets(path: Path, target: str) -> None:
    path.write_text(json.dumps([{"targets": [target]}]))


@pytest.fixture(scope="module")
def values(prom: PromApi) -> dict[str, dict[str, str]]:
    """Each dashboard's variables, once the lab has values for every one of them."""
    return {
        name: wait_for(lambda d=d: resolve(d, prom), timeout=60, what=f"{name}'s variables")
        for name, d in ALL.items()
    }


@pytest.mark.parametrize(("name", "title", "expr"), QUERIES)
def test_every_panel_query_returns_data(prom: PromApi, values, name, title, expr) -> None:
    query = expand(expr, values[name])
    wait_for(
        lambda: prom.query(query), timeout=60, poll_seconds=0.5, what=f"{name} {title!r}: {query}"
    )


def _answer(prom: PromApi, values, name: str, title: str, ref: str = "A") -> list[dict]:
    (panel,) = [p for p in panels(ALL[name]) if p["title"] == title]
    (target,) = [t for t in panel["targets"] if t["refId"] == ref]
    query = expand(target["expr"], values[name])
    return wait_for(lambda: prom.query(query), timeout=60, poll_seconds=0.5, what=query)


def _scalar(answer: list[dict]) -> float:
    (sample,) = answer
    return float(sample["value"][1])


def test_fleet_panels_count_each_physical_gpu_once(prom: PromApi, values) -> None:
    """The lab's node: 2 whole GPUs, 2 time-sliced 4 ways, 1 in 7 MIG slices; 17 pods."""
    fleet = "fleet-overview.json"
    assert _scalar(_answer(prom, values, fleet, "GPUs")) == 5
    assert _scalar(_answer(prom, values, fleet, "Pods on GPUs")) == 17
    assert _scalar(_answer(prom, values, fleet, "MIG instances")) == 7
    assert 0 < _scalar(_answer(prom, values, fleet, "GPUs allocated")) <= 5
    # 12239's per-GPU panels: one series per GPU although pods share them (MIG GPUs have
    # no GPU_UTIL), never one per pod.
    assert len(_answer(prom, values, fleet, "GPU Utilization")) == 4
    assert len(_answer(prom, values, fleet, "GPU Framebuffer Mem Used")) == 5
    assert len(_answer(prom, values, fleet, "GPU Power Usage")) == 5
    for sample in _answer(prom, values, fleet, "GPU Utilization"):
        assert 0 <= float(sample["value"][1]) <= 100
    by_profile = _answer(prom, values, fleet, "MIG instances by profile")
    assert {s["metric"]["GPU_I_PROFILE"]: s["value"][1] for s in by_profile} == {"1g.10gb": "7"}
    shared = _answer(prom, values, fleet, "Pods per shared GPU")
    assert sorted(float(s["value"][1]) for s in shared) == [4, 4]


def test_autoscaler_panels_show_the_workload_within_its_bounds(prom: PromApi, values) -> None:
    replicas = "Replicas: desired, current, ready, max"
    (top,) = _answer(prom, values, "autoscaler.json", replicas, "D")
    (desired,) = _answer(prom, values, "autoscaler.json", replicas, "A")
    assert top["metric"]["workload"] == f"{NS}/chat" and top["value"][1] == "3"
    assert 1 <= float(desired["value"][1]) <= 3
    # Held while no serving pod is scraped yet, then not: a 0/1 flag per workload.
    held = _answer(prom, values, "autoscaler.json", "Held on missing metrics")
    assert [s["metric"]["workload"] for s in held] == [f"{NS}/chat"]
    assert held[0]["value"][1] in ("0", "1")
