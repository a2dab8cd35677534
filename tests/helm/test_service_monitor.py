"""The exporter's ServiceMonitor as the Prometheus Operator runs it, through real Prometheus:
the operator labels every target with the scraped pod's namespace, pod and container, and
with honorLabels those fill every label a series does not set. A GPU no pod holds then
took the exporter pod's name, and a namespace of its own in every per-namespace sum."""

import re
from collections.abc import Iterator

import pytest
from helpers import REPO, wait_for
from helpers.e2e import Prometheus
from helpers.helm import find, render
from helpers.serving import MetricsServer
from helpers.tools import require

pytestmark = pytest.mark.prometheus

EXPOSITION = (
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",Hostname="n1"} 40\n'
    'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-b",Hostname="n1",'
    'namespace="ml",pod="train",container="main"} 41\n'
)
# What the operator's generated scrape config gives each target of a ServiceMonitor.
OPERATOR_TARGET_LABELS = {
    "namespace": "gpu-system",
    "pod": "gf-gpufleet-exporter-7x2kq",
    "container": "exporter",
    "service": "gf-gpufleet-exporter",
    "endpoint": "metrics",
}


def scrape_config(endpoint: dict) -> dict:
    """A ServiceMonitor endpoint's honorLabels, relabelings and metricRelabelings, as
    Prometheus config."""
    snake = re.compile(r"(?<!^)(?=[A-Z])")

    def rules(key: str) -> list[dict]:
        return [
            {snake.sub("_", k).lower(): value for k, value in rule.items()}
            for rule in endpoint.get(key, ())
        ]

    return {
        "honor_labels": endpoint.get("honorLabels", False),
        "relabel_configs": rules("relabelings"),
        "metric_relabel_configs": rules("metricRelabelings"),
    }


@pytest.fixture
def exporter() -> Iterator[str]:
    server = MetricsServer(lambda: EXPOSITION)
    yield server.address
    server.stop()


def test_a_gpu_no_pod_holds_takes_no_pod_or_namespace_from_the_scrape(exporter, tmp_path):
    require("prometheus")
    objects = render({}, tmp_path=tmp_path)
    (endpoint,) = find(objects, "ServiceMonitor", "-exporter")["spec"]["endpoints"]
    prometheus = Prometheus(
        tmp_path / "prom",
        exporter,
        labels=OPERATOR_TARGET_LABELS,
        scrape=scrape_config(endpoint),
    )
    try:
        wait_for(lambda: len(prometheus.query("DCGM_FI_DEV_GPU_TEMP")) == 2, what="scraped")
        series = {
            r["metric"]["UUID"]: r["metric"] for r in prometheus.query("DCGM_FI_DEV_GPU_TEMP")
        }
    finally:
        prometheus.stop()
    unheld, held = series["GPU-a"], series["GPU-b"]
    assert not {"pod", "namespace", "container"} & set(unheld), unheld
    assert (held["namespace"], held["pod"], held["container"]) == ("ml", "train", "main")
    assert unheld["service"] == "gf-gpufleet-exporter"  # the operator's other labels stay


LOWERCASE = (
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",hostname="n1"} 40\n'
    'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-b",hostname="n1"} 41\n'
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-c",hostname="n2"} 42\n'
)


def test_the_rules_see_each_node_under_the_lowercase_hostname_key(tmp_path):
    """Under --hostname-label hostname (newer dcgm-exporters' key) the rules' `by
    (Hostname)` put every node in one group: GPUMissingFromNode counted the fleet's GPUs,
    and GPUNvlinkStalled averaged every node's. The chart copies the key to Hostname."""
    require("prometheus")
    objects = render({}, tmp_path=tmp_path)
    (endpoint,) = find(objects, "ServiceMonitor", "-exporter")["spec"]["endpoints"]
    server = MetricsServer(lambda: LOWERCASE)
    prometheus = Prometheus(
        tmp_path / "prom",
        server.address,
        labels=OPERATOR_TARGET_LABELS,
        scrape=scrape_config(endpoint),
        rule_files=(REPO / "rules" / "gpu-health.rules.yml",),
    )
    try:
        counts = wait_for(
            lambda: prometheus.query("gpufleet:node_gpus:count"), what="the nodes' GPU counts"
        )
        (series, *_) = prometheus.query('DCGM_FI_DEV_GPU_TEMP{UUID="GPU-c"}')
    finally:
        prometheus.stop()
        server.stop()
    assert {r["metric"]["Hostname"]: r["value"][1] for r in counts} == {"n1": "2", "n2": "1"}
    assert series["metric"]["hostname"] == series["metric"]["Hostname"] == "n2"  # both kept
