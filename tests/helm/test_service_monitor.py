"""The exporter's ServiceMonitor as the Prometheus Operator runs it, through real Prometheus:
the operator labels every target with the scraped pod's namespace, pod and container, and
with honorLabels those fill every label a series does not set. A GPU no pod holds then
took the exporter pod's name, and a namespace of its own in every per-namespace sum."""

import re
from collections.abc import Iterator

import pytest
from helpers import wait_for
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
    """A ServiceMonitor endpoint's honorLabels and relabelings, as Prometheus config."""
    snake = re.compile(r"(?<!^)(?=[A-Z])")
    relabel = [
        {snake.sub("_", key).lower(): value for key, value in rule.items()}
        for rule in endpoint.get("relabelings", ())
    ]
    return {"honor_labels": endpoint.get("honorLabels", False), "relabel_configs": relabel}


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
