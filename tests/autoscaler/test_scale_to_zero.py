"""Scale to zero and back, end to end (issue 18 §3): the real `gpufleet autoscaler` process
against the fake API server with the lab cluster, simulated vLLM pods behind a gateway, and
real Prometheus.

The timeline is asserted through the API, as a user would read it: the Deployment idles
down to zero replicas and its pods go; a request arrives and waits at the gateway (the
only thing that can report it: there is no pod); the Deployment goes 0 -> 1 with an
`Activate` Event; a pod is Ready and serves the request that waited.

The daemon keeps ticking while the test reads, so each step asserts what stays true once it
happened (Events, the scale, the daemon's decision counters) and never a value one later
tick may rewrite: status.reason is the latest tick's (Deactivate turns Steady at zero,
Activate turns Steady or ScaleUp once a replica runs).
"""

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import free_port, wait_for
from helpers.kube import api_client, create_autoscaler, create_vllm
from helpers.lab import NS, closed_loop
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.prometheus
GPA = ("autoscaling.gpufleet.dev", "v1alpha1", NS, "gpuautoscalers", "chat")
GATEWAY_QUEUE = 'sum(lab_gateway_requests_waiting{namespace="llm"})'


def ready_pods(core: client.CoreV1Api) -> list:
    return [
        p
        for p in core.list_namespaced_pod(NS, label_selector="app=vllm").items
        if not p.metadata.deletion_timestamp
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or ())
    ]


def events(api: client.ApiClient) -> list:
    """The GPUAutoscaler's Events (events.k8s.io/v1, as the controller records them), oldest
    first."""
    items = client.EventsV1Api(api).list_namespaced_event(NS).items
    return sorted((e for e in items if e.regarding.name == "chat"), key=lambda e: e.event_time or 0)


def scale_event(api: client.ApiClient, reason: str):
    """The first Event of a scale for `reason` ("1 -> 0 replicas: ..."), or None: it stays
    whatever later ticks decide."""
    scales = (e for e in events(api) if e.reason == reason and " replicas: " in (e.note or ""))
    return next(scales, None)


def decisions(port: int, reason: str) -> float:
    """The daemon's gpufleet_autoscaler_decisions_total for llm/chat and `reason` (0 before
    the first): a counter, so a later tick's decision never takes it back."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gpufleet_autoscaler_decisions_total" and sample.labels == {
                "workload": f"{NS}/chat",
                "reason": reason,
            }:
                return sample.value
    return 0.0


def test_idle_to_zero_then_a_queued_request_activates_it(tmp_path: Path) -> None:
    with closed_loop(tmp_path, gateway=True) as (server, fleet, prometheus):
        api = api_client(server.url)
        apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
        create_vllm(api, NS, gpus=1)
        create_autoscaler(
            api,
            NS,
            {
                "scaleTargetRef": {"kind": "Deployment", "name": "vllm"},
                "minReplicas": 0,
                "maxReplicas": 4,
                "idleSecondsToZero": 5,
                "coldStartSeconds": 2,
                "batchSlots": 8,
                "nodePool": {"gpusPerNode": 8, "provisionSeconds": 3},
                "signals": {"gatewayQueueDepth": GATEWAY_QUEUE},
            },
        )
        metrics = free_port()
        daemon = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpufleet.cli",
                "autoscaler",
                f"--kube-url={server.url}",
                f"--prometheus-url=http://127.0.0.1:{prometheus.port}",
                "--leader-elect=false",
                "--tick-seconds=0.5",
                "--scrape-interval-seconds=1",
                "--rate-window=5s",
                f"--metrics-address=127.0.0.1:{metrics}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "autoscaler.log").open("w"),
        )
        try:

            def scale() -> int:
                return apps.read_namespaced_deployment_scale("vllm", NS).spec.replicas

            # 1. Idle: one replica serves nothing; after 5 s idle it goes to zero.
            wait_for(lambda: ready_pods(core), timeout=60, poll_seconds=0.5, what="a first pod")
            wait_for(lambda: scale() == 0, timeout=90, poll_seconds=0.5, what="scale to zero")
            deactivate = wait_for(
                lambda: scale_event(api, "Deactivate"), timeout=10, what="a Deactivate Event"
            )
            assert deactivate.note.startswith("1 -> 0 replicas: ")
            assert decisions(metrics, "Deactivate") >= 1
            wait_for(lambda: not ready_pods(core), timeout=30, poll_seconds=0.5, what="no pod")
            # ... and none left in the fleet: it marks a pod draining on its next sync with
            # the API, and a request sent before that went to the draining pod, which served
            # it, so nothing ever waited at the gateway (a CI run under load).
            wait_for(lambda: not fleet.pods, timeout=30, poll_seconds=0.2, what="no pod served")
            assert not fleet.held

            # 2. At zero, one request arrives: it waits at the gateway.
            sent = time.time()
            server.run_async(_send_one(fleet, sent))
            wait_for(lambda: scale() >= 1, timeout=60, poll_seconds=0.2, what="activation")
            activate = wait_for(
                lambda: scale_event(api, "Activate"), timeout=10, what="an Activate Event"
            )
            assert activate.note.startswith("0 -> 1 replicas: ")
            assert activate.event_time > deactivate.event_time
            assert decisions(metrics, "Activate") >= 1

            # 3. A pod turns Ready and serves the request that waited.
            wait_for(lambda: ready_pods(core), timeout=60, poll_seconds=0.2, what="a Ready pod")
            wait_for(
                lambda: sum(p.engine.success for p in fleet.pods.values()) >= 1,
                timeout=30,
                poll_seconds=0.2,
                what="the waiting request served",
            )
            assert not fleet.held and fleet.unserved == 0
            # The scales up to the activation, whatever later ticks add (the served request
            # leaves it idle again): one Activate, right after the one Deactivate.
            scales = [e.reason for e in events(api) if e.note and " replicas: " in e.note]
            assert scales[: scales.index("Activate") + 1][-2:] == ["Deactivate", "Activate"]
            assert scales.count("Activate") == 1
        finally:
            daemon.terminate()
            daemon.wait(15)
            api.close()


async def _send_one(fleet, at: float) -> None:
    fleet.send(at, 500, 20)
