"""Pods as the controller reads them, through the official client from the fake API server:
when a starting replica got its node, which tells one loading on its node (it serves a cold
start later) from one still waiting for a node."""

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from helpers.kube import api_client, create_vllm
from kubernetes import client

from gpufleet.autoscaler.kube.cluster import Cluster
from gpufleet.lab.kubeapi.server import FakeApiServer

NS = "llm"
SCHEDULED_AT = "2026-11-24T00:01:40Z"


@pytest.fixture
def api() -> Iterator[client.ApiClient]:
    with FakeApiServer() as server, api_client(server.url) as api:
        yield api


def _pod(api: client.ApiClient, name: str, *, node: str = "", condition: bool = False) -> None:
    core = client.CoreV1Api(api)
    spec = {"containers": [{"name": "vllm", "image": "vllm"}]} | (
        {"nodeName": node} if node else {}
    )
    core.create_namespaced_pod(NS, {"metadata": {"name": name}, "spec": spec})
    if condition:
        status = {"type": "PodScheduled", "status": "True", "lastTransitionTime": SCHEDULED_AT}
        core.patch_namespaced_pod_status(name, NS, {"status": {"conditions": [status]}})


def test_a_pod_on_a_node_says_since_when(api: client.ApiClient) -> None:
    create_vllm(api, NS, replicas=0)
    _pod(api, "waiting")
    _pod(api, "bound", node="gpu-node-0", condition=True)
    _pod(api, "bound-by-hand", node="gpu-node-0")  # nodeName set, no condition
    pods = {p.name: p for p in Cluster(api).view().pods}
    scheduled = datetime(2026, 11, 24, 0, 1, 40, tzinfo=UTC).timestamp()
    assert pods["waiting"].scheduled_since is None
    assert pods["bound"].scheduled_since == scheduled
    assert pods["bound-by-hand"].scheduled_since == pods["bound-by-hand"].created > 0


def test_a_pod_deletion_cost_that_is_no_int32_is_none(api: client.ApiClient) -> None:
    """ "²" is a digit to isdigit() and not to int(): the view raised, for every workload."""
    create_vllm(api, NS, replicas=0)
    for name, cost in (("sup", "\u00b2"), ("big", "9" * 5000), ("ok", "-3")):
        client.CoreV1Api(api).create_namespaced_pod(
            NS,
            {
                "metadata": {
                    "name": name,
                    "annotations": {"controller.kubernetes.io/pod-deletion-cost": cost},
                },
                "spec": {"containers": [{"name": "vllm", "image": "vllm"}]},
            },
        )
    pods = {p.name: p.deletion_cost for p in Cluster(api).view().pods}
    assert pods == {"sup": None, "big": None, "ok": -3}
