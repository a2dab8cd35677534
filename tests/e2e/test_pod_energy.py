"""The README's energy-per-namespace query, through a real Prometheus, on a GPU that changed
hands: its old and new pod are each charged for their own time, and no more than the GPUs
drew in all."""

import re

import pytest
from helpers import REPO, wait_for
from helpers.e2e import scraped_node

from gpufleet.lab.node import NodeLayout

pytestmark = pytest.mark.prometheus
README = (REPO / "README.md").read_text()
# The README's query, over a window and step the test's minutes of data fill.
ENERGY = re.search(r"Energy over a window, in joules.*?`(sum by \(namespace\).*?)`", README, re.S)
WINDOW, SHORT = "[1h:15s])) * 15", "[5m:1s])) * 1"


def test_energy_per_namespace_charges_each_holder_of_a_gpu_for_its_own_time(tmp_path) -> None:
    assert ENERGY and WINDOW in ENERGY[1], "the README's energy query changed: update this test"
    energy = ENERGY[1].replace(WINDOW, SHORT)
    with scraped_node(tmp_path, NodeLayout(fleet="2xH100", whole_gpus=2)) as (node, _, prom):
        old = node.pods[next(k for k in node.pods if k[1] == "train-0")]
        wait_for(lambda: prom.query(f'gpufleet_pod_power_usage{{pod="{old.name}"}}'), timeout=30)
        node.remove_pod(old.namespace, old.name)
        node.add_pod(old.namespace, "train-0-next", old.resource_name, old.device_ids)
        wait_for(lambda: prom.query('gpufleet_pod_power_usage{pod="train-0-next"}'), timeout=30)
        # The GPU's energy counter now has a series per holder: a join on UUID would fail.
        gpu = f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{UUID="{old.device_ids[0]}"}}[1m]'
        assert len(prom.query(gpu)) >= 2
        at = prom.pinned()  # the charges and the draw over the same samples
        charged = {r["metric"]["namespace"]: float(r["value"][1]) for r in at.query(energy)}
        drawn = at.query("sum(sum_over_time(DCGM_FI_DEV_POWER_USAGE[5m:1s]))")
    assert set(charged) == {p.namespace for p in node.pods.values()}
    assert all(joules > 0 for joules in charged.values())
    assert sum(charged.values()) <= float(drawn[0]["value"][1]) + 1e-6
