"""The whole alerting chain, for real: the exporter on the lab's simulated node, Prometheus
evaluating rules/, Alertmanager, and a webhook receiver that gets the alert after a fault
is injected into the simulated GPUs (a GPU falls off the bus; a critical XID)."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REPO, wait_for
from helpers.e2e import Alertmanager, Prometheus, RunningExporter, node_settings
from helpers.tools import require

from gpufleet.lab.node import NodeLayout, SimNode


@pytest.fixture
def chain(tmp_path: Path) -> Iterator[tuple[SimNode, Prometheus, Alertmanager]]:
    require("prometheus")
    require("prometheus-alertmanager")
    layout = NodeLayout(fleet="3xH100", whole_gpus=3)
    with SimNode(layout, root=tmp_path / "n") as node:
        node.sim.nvmlInit()
        exporter = RunningExporter(node_settings(node), node.sim).start()
        alertmanager = Alertmanager(tmp_path / "am")
        prom = Prometheus(
            tmp_path / "prom",
            f"127.0.0.1:{exporter.port}",
            rule_files=tuple(sorted((REPO / "rules").glob("*.rules.yml"))),
            alertmanager=alertmanager.address,
        )
        try:
            wait_for(lambda: prom.query('up{job="gpu"} == 1'), timeout=30, what="first scrape")
            yield node, prom, alertmanager
        finally:
            prom.stop()
            alertmanager.stop()
            exporter.stop()


def test_injected_faults_reach_the_webhook(chain) -> None:
    node, prom, alertmanager = chain
    wait_for(lambda: prom.query("gpufleet:node_gpus:count == 3"), timeout=30, what="rules")
    assert alertmanager.names() == set()  # a healthy node pages nobody

    node.sim.inject_xid(0, 79)
    wait_for(lambda: "GPUCriticalXid" in alertmanager.names(), timeout=60, what="XID alert")
    (xid,) = [a for a in alertmanager.received if a["labels"]["alertname"] == "GPUCriticalXid"]
    assert (xid["labels"]["xid"], xid["labels"]["severity"]) == ("79", "critical")
    assert xid["annotations"]["runbook_url"].endswith("#gpucriticalxid")

    node.sim.fail_gpu(1)
    wait_for(lambda: "GPUFallenOffBus" in alertmanager.names(), timeout=60, what="lost GPU alert")
