"""The loop closed: load on simulated vLLM pods, real Prometheus scraping them, the controller
scaling their Deployment on the fake API server, new pods turning Ready and draining the queue.

Each step is asserted through the APIs a user would look at: the Deployment's scale and
status, the pods' Ready condition, and Prometheus' own answers.
"""

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.e2e import Prometheus
from helpers.kube import api_client, create_autoscaler, create_vllm
from helpers.lab import NS, closed_loop
from kubernetes import client

from gpufleet.autoscaler.controller import Controller, ControllerConfig
from gpufleet.autoscaler.kube.cluster import Cluster
from gpufleet.autoscaler.prom.client import PromClient
from gpufleet.kube.events import EventRecorder
from gpufleet.lab.kubeapi.server import FakeApiServer
from gpufleet.lab.serving import ServingFleet

pytestmark = pytest.mark.prometheus


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[FakeApiServer, ServingFleet, Prometheus]]:
    with closed_loop(tmp_path) as world:
        yield world


def test_load_scales_the_deployment_and_the_new_pods_drain_the_queue(lab) -> None:
    server, fleet, prometheus = lab
    api = api_client(server.url)
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    create_vllm(api, NS, gpus=1)
    create_autoscaler(
        api,
        NS,
        {
            "scaleTargetRef": {"kind": "Deployment", "name": "vllm"},
            "maxReplicas": 6,
            "policy": "keda",
            "keda": {"queueTarget": 5, "pollingIntervalSeconds": 1},
        },
    )

    def waiting() -> float | None:
        answer = prometheus.query("sum(vllm:num_requests_waiting)")
        return float(answer[0]["value"][1]) if answer else None

    def serving_pods() -> int:
        return len(prometheus.query("sum by (pod) (vllm:request_success_total) > 0"))

    async def run() -> list[tuple[str, float]]:
        prom = PromClient(f"http://127.0.0.1:{prometheus.port}")
        events = EventRecorder(api, controller="gpufleet.dev/autoscaler", instance="test")
        cluster = Cluster(api, watch=True)  # as the daemon reads
        ctl = Controller(
            cluster,
            prom,
            events,
            config=ControllerConfig(scrape_interval_seconds=1.0, rate_window="5s"),
        )
        steps: list[tuple[str, float]] = []
        started = time.monotonic()
        try:
            while time.monotonic() - started < 90:
                await ctl.tick()
                scale = apps.read_namespaced_deployment_scale("vllm", NS).spec.replicas
                assert 1 <= scale <= 6  # minReplicas and maxReplicas hold at every tick
                status = apps.read_namespaced_deployment("vllm", NS).status
                ready = (status.ready_replicas if status else 0) or 0
                if ready and not fleet.rate_rps:
                    fleet.rate_rps = 6.0
                queue = await asyncio.to_thread(waiting)
                seen = {name for name, _ in steps}
                if queue and queue >= 5 and "queue built" not in seen:
                    steps.append(("queue built", time.monotonic() - started))
                if scale > 1 and "scaled" not in seen:
                    steps.append(("scaled", time.monotonic() - started))
                if ready > 1 and "ready" not in seen:
                    steps.append(("ready", time.monotonic() - started))
                if (
                    "ready" in seen
                    and await asyncio.to_thread(serving_pods) > 1
                    and ("serving" not in seen)
                ):
                    steps.append(("serving", time.monotonic() - started))
                if "serving" in seen and queue is not None and queue < 2:
                    steps.append(("drained", time.monotonic() - started))
                    return steps
                await asyncio.sleep(0.5)
        finally:
            cluster.close()
            await prom.close()
        return steps

    steps = asyncio.run(run())
    names = [name for name, _ in steps]
    assert names == ["queue built", "scaled", "ready", "serving", "drained"], steps
    pods = core.list_namespaced_pod(NS, label_selector="app=vllm").items
    ready = [
        p
        for p in pods
        if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or ())
    ]
    assert len(ready) >= 2 and all(p.spec.node_name for p in ready)
    assert fleet.unserved == 0
    api.close()
