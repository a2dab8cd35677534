"""Reaction on the closed loop: first scraped sample of a burst -> the scale PATCH.

Two identical workloads run side by side in the lab (fake API server, lab cluster,
simulated vLLM pods, real Prometheus scraping every second): one under the gpufleet
policy, one under an HPA on the same signal (the keda policy: HPA's AverageValue on the
queue, its 15 s sync). Both get the same burst at the same moment; for each, the reaction
is from the timestamp of the first scraped sample showing queued requests to the first
scale PATCH the API server answered. prometheus-adapter's relist (up to 60 s for a series
it has not listed yet) would come on top of the HPA's delay and is not modeled.

    python3 -m bench.live_reaction_bench [--bursts 3]
"""

import argparse
import asyncio
import json
import shutil
import sys
import time
import urllib.parse
import urllib.request

from kubernetes import client

from bench.entry import exit_with
from bench.live_stack import live_stack
from gpufleet.autoscaler.controller import Controller, ControllerConfig
from gpufleet.autoscaler.kube.cluster import Cluster
from gpufleet.autoscaler.prom.client import PromClient
from gpufleet.kube.events import EventRecorder
from gpufleet.lab.kubeapi.cluster import ClusterTiming
from gpufleet.lab.kubeapi.server import FakeApiServer
from gpufleet.lab.workload import create_deployment

POLICIES = ("gpufleet", "keda")  # keda: an HPA on the queue, 15 s sync
GPA = ("autoscaling.gpufleet.dev", "v1alpha1")
GPA_PLURAL = "gpuautoscalers"


def first_queued_sample(port: int, namespace: str, since: float) -> float | None:
    query = f'sum(vllm:num_requests_waiting{{namespace="{namespace}"}}) > 0'
    params = urllib.parse.urlencode(
        {"query": query, "start": since, "end": time.time(), "step": "1"}
    )
    url = f"http://127.0.0.1:{port}/api/v1/query_range?{params}"
    with urllib.request.urlopen(url, timeout=10) as r:
        result = json.load(r)["data"]["result"]
    return min((float(t) for s in result for t, _ in s["values"]), default=None)


def create_workload(api: client.ApiClient, namespace: str, policy: str) -> None:
    """A namespace with a one-replica vLLM Deployment and its GPUAutoscaler."""
    create_deployment(api, namespace, replicas=1, gpus=None)
    spec = {
        "scaleTargetRef": {"kind": "Deployment", "name": "vllm"},
        "maxReplicas": 8,
        "policy": policy,
        "batchSlots": 8,
        "coldStartSeconds": 5,
        "keda": {"queueTarget": 5, "pollingIntervalSeconds": 1},
    }
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        *GPA,
        namespace,
        GPA_PLURAL,
        {
            "apiVersion": "autoscaling.gpufleet.dev/v1alpha1",
            "kind": "GPUAutoscaler",
            "metadata": {"name": "chat"},
            "spec": spec,
        },
    )


def scale_patches(server: FakeApiServer, namespace: str, *, since: float = 0.0) -> list[float]:
    """When the API server answered a PATCH of the workload's scale, from `since` on."""
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/vllm/scale"
    return [
        r.at
        for r in server.requests
        if r.method == "PATCH" and r.status == 200 and r.path == path and r.at >= since
    ]


def run_burst(
    server: FakeApiServer,
    api: client.ApiClient,
    fleets,
    port: int,
    burst_index: int,
    *,
    calm: float,
    window: float,
) -> dict:
    """One burst on fresh workloads (a namespace per policy), so no burst starts from the
    replicas or the history a previous one left."""
    names = {policy: f"{policy}-{burst_index}" for policy in POLICIES}
    for policy, namespace in names.items():
        create_workload(api, namespace, policy)
        fleets[namespace].rate_rps = 1.0

    async def loop() -> dict:
        prom = PromClient(f"http://127.0.0.1:{port}")
        config = client.Configuration()
        config.host = server.url
        own = client.ApiClient(config)  # the controller's own client and User-Agent
        events = EventRecorder(own, controller="gpufleet.dev/autoscaler", instance="bench")
        ctl = Controller(
            Cluster(own),
            prom,
            events,
            config=ControllerConfig(scrape_interval_seconds=1.0, rate_window="5s"),
        )
        try:
            calm_until = time.time() + calm
            while time.time() < calm_until:
                await ctl.tick()
                await asyncio.sleep(0.5)
            burst = time.time()
            for namespace in names.values():
                fleets[namespace].rate_rps = 14.0  # a pod serves 4/s
            # Until both have scaled: the reaction is the first PATCH, later ones change nothing.
            while time.time() < burst + window and not all(
                scale_patches(server, ns, since=burst) for ns in names.values()
            ):
                await ctl.tick()
                await asyncio.sleep(0.25)
        finally:
            await prom.close()
            own.close()
        out = {}
        for policy, namespace in names.items():
            fleets[namespace].rate_rps = 0.0
            client.CustomObjectsApi(api).delete_namespaced_custom_object(
                *GPA, namespace, GPA_PLURAL, "chat"
            )
            sample = first_queued_sample(port, namespace, burst)
            patches = scale_patches(server, namespace)
            out[policy] = (min(patches) - sample) if sample and patches else None
        return out

    return asyncio.run(loop())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--calm-seconds", type=float, default=20.0, help="load before a burst")
    parser.add_argument(
        "--window-seconds", type=float, default=45.0, help="watched after one, at most"
    )
    args = parser.parse_args()
    if not shutil.which("prometheus"):
        sys.exit("prometheus is not installed (./dev test installs it)")
    namespaces = [f"{p}-{i}" for i in range(args.bursts) for p in POLICIES]
    with live_stack(
        prefix="gpufleet-reaction-",
        timing=ClusterTiming(cold_start_seconds=5, node_provision_seconds=10),
        fleets={ns: {"labels": {"app": "vllm"}, "seed": i} for i, ns in enumerate(namespaces)},
        scrape_seconds=1.0,
    ) as stack:
        rows = [
            run_burst(
                stack.server,
                stack.api,
                stack.fleets,
                stack.prometheus_port,
                i,
                calm=args.calm_seconds,
                window=args.window_seconds,
            )
            for i in range(args.bursts)
        ]
    print("# gpufleet live reaction benchmark\n")
    print(
        "| burst | gpufleet: sample -> PATCH (s) "
        "| HPA on the queue (keda policy): sample -> PATCH (s) |"
    )
    print("|---:|---:|---:|")
    for i, row in enumerate(rows, 1):
        cells = [f"{row[p]:.1f}" if row[p] is not None else "no PATCH" for p in POLICIES]
        print(f"| {i} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    exit_with(main)
