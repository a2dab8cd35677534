"""Time to the first Ready replica from zero, in the lab, and where it goes.

Each round starts a Deployment at zero replicas with no GPU node left (the lab cluster
removes a node idle for `--node-idle-seconds`; `--min-nodes 1` keeps one warm), in a
namespace of its own; one request
arrives and waits at the lab's gateway, the only thing that can report it. Three ways to
activate, one after another in the same run (the lab cluster, Prometheus and the controller
are shared; each round waits until the idle nodes have gone):

- `gpufleet`: the controller's own policy on `signals.gatewayQueueDepth`, writing 0 -> 1;
- `keda-push`: KEDA's `external-push` trigger on gpufleet's external scaler: this script
  plays KEDA's operator, holding `StreamIsActive` open and writing 0 -> 1 the moment it
  pushes true (a ScaledObject owns the Deployment, so the controller never writes);
- `keda-poll`: KEDA's pull path as the `keda` policy models it (activation at the
  `pollingInterval`, 30 s by default), on the same signal.

For each: the request -> the first scraped sample holding it (the scrape), -> the scale
PATCH (query, tick, decision), -> the pod bound to a node (node provisioning), -> the pod
Ready (cold start), and the request's first token.

    python3 -m bench.zero_bench [--rounds 3] [--scrape-seconds 5] [--min-nodes 0]
"""

import argparse
import asyncio
import itertools
import json
import random
import shutil
import statistics
import sys
import time
import urllib.parse
import urllib.request

import grpc
from kubernetes import client

from bench.entry import exit_with
from bench.live_stack import live_stack
from gpufleet.autoscaler.controller import Controller, ControllerConfig
from gpufleet.autoscaler.core.extmetrics import SnapshotFeed
from gpufleet.autoscaler.core.placeholders import placeholder_name
from gpufleet.autoscaler.kedascaler.api import externalscaler_pb2 as pb
from gpufleet.autoscaler.kedascaler.api import externalscaler_pb2_grpc as pb_grpc
from gpufleet.autoscaler.kedascaler.server import serve
from gpufleet.autoscaler.kube.cluster import Cluster
from gpufleet.autoscaler.prom.client import PromClient
from gpufleet.kube.events import EventRecorder
from gpufleet.lab.kubeapi.cluster import ClusterTiming
from gpufleet.lab.kubeapi.server import FakeApiServer
from gpufleet.lab.serving import ServingFleet, gateway_queue_query
from gpufleet.lab.workload import LABELS, TIMING, create_deployment
from tests.helpers import free_port

METHODS = ("gpufleet", "keda-push", "keda-poll")
STEPS = ("scrape", "decision", "node", "cold start", "first Ready", "first token")
GPA = ("autoscaling.gpufleet.dev", "v1alpha1")
# The ScaledObject's external-push trigger (scalerAddress aside): active above 0 queued.
TRIGGER = {"autoscaler": "chat", "metric": "queue_depth", "targetValue": "5"}


def create(
    api: client.ApiClient, namespace: str, method: str, scaler: str, timing: ClusterTiming
) -> None:
    """A Deployment at zero replicas (one GPU a pod), its GPUAutoscaler (told the cluster's
    `timing`), and for keda-push the ScaledObject that makes KEDA its owner."""
    create_deployment(api, namespace, replicas=0)
    spec = {
        "scaleTargetRef": {"kind": "Deployment", "name": "vllm"},
        "minReplicas": 0,
        "maxReplicas": 4,
        "policy": "keda" if method == "keda-poll" else "gpufleet",
        "batchSlots": 8,
        "coldStartSeconds": timing.cold_start_seconds,
        "nodePool": {"gpusPerNode": 8, "provisionSeconds": timing.node_provision_seconds},
        "signals": {"gatewayQueueDepth": gateway_queue_query(namespace)},
        "keda": {"queueTarget": 5},  # pollingIntervalSeconds: KEDA's default, 30
    }
    crd = client.CustomObjectsApi(api)
    crd.create_namespaced_custom_object(
        *GPA,
        namespace,
        "gpuautoscalers",
        {
            "apiVersion": "/".join(GPA),
            "kind": "GPUAutoscaler",
            "metadata": {"name": "chat"},
            "spec": spec,
        },
    )
    if method == "keda-push":
        trigger = {"scalerAddress": scaler, **TRIGGER}
        crd.create_namespaced_custom_object(
            "keda.sh",
            "v1alpha1",
            namespace,
            "scaledobjects",
            {
                "apiVersion": "keda.sh/v1alpha1",
                "kind": "ScaledObject",
                "metadata": {"name": "chat"},
                "spec": {
                    "scaleTargetRef": {"name": "vllm"},
                    "triggers": [{"type": "external-push", "metadata": trigger}],
                },
            },
        )


async def keda_operator(api: client.ApiClient, stub, namespace: str, out: dict) -> None:
    """KEDA's part for an external-push trigger: 0 -> 1 the moment StreamIsActive says true."""
    metadata = TRIGGER
    ref = pb.ScaledObjectRef(name="chat", namespace=namespace, scalerMetadata=metadata)
    while True:
        try:
            async for answer in stub.StreamIsActive(ref):
                if answer.result:
                    await asyncio.to_thread(
                        client.AppsV1Api(api).patch_namespaced_deployment_scale,
                        "vllm",
                        namespace,
                        {"spec": {"replicas": 1}},
                    )
                    out["pushed"] = time.time()
                    return
        except grpc.aio.AioRpcError as err:  # KEDA reconnects, from 2 s, doubling
            if err.code() is grpc.StatusCode.INVALID_ARGUMENT:
                raise
            await asyncio.sleep(2.0)


def first_sample(port: int, namespace: str, since: float) -> float | None:
    """The timestamp of the first scrape that held the request at the gateway (raw
    samples, through a range selector: their own timestamps, not evaluation steps)."""
    seconds = int(time.time() - since) + 2
    query = f'lab_gateway_requests_waiting{{namespace="{namespace}"}}[{seconds}s]'
    params = urllib.parse.urlencode({"query": query})
    url = f"http://127.0.0.1:{port}/api/v1/query?{params}"
    with urllib.request.urlopen(url, timeout=10) as r:
        result = json.load(r)["data"]["result"]
    held = (float(t) for s in result for t, v in s["values"] if float(v) > 0)
    return min((t for t in held if t >= since), default=None)


def pod_times(core: client.CoreV1Api, namespace: str, seen: dict) -> None:
    """Note when a pod of the Deployment was first bound to a node and first Ready."""
    for pod in core.list_namespaced_pod(namespace, label_selector="app=vllm").items:
        if pod.spec.node_name:
            seen.setdefault("bound", time.time())
        if any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or ()):
            seen.setdefault("ready", time.time())


async def one_round(
    server: FakeApiServer,
    api: client.ApiClient,
    stub,
    fleet: ServingFleet,
    *,
    namespace: str,
    method: str,
    port: int,
    calm: float,
    window: float,
    keep: int,
    jitter: float,
) -> dict[str, float | None]:
    core = client.CoreV1Api(api)
    seen: dict[str, float] = {}
    operator = None
    if method == "keda-push":
        operator = asyncio.create_task(keda_operator(api, stub, namespace, seen))
    # The gateway's zero is scraped: the workload is idle at zero. The jitter spreads the
    # request's moment over the scrape interval, so no method always lands just after one.
    await asyncio.sleep(calm + jitter)
    sent = time.time()
    server.run_async(_send(fleet, sent))
    while time.time() < sent + window and "served" not in seen:
        await asyncio.to_thread(pod_times, core, namespace, seen)
        served = [p.engine for p in list(fleet.pods.values()) if p.engine.ttft.n]
        if served:
            seen["served"] = sent + served[0].ttft.total  # its TTFT counts from `sent`
        await asyncio.sleep(0.1)
    if operator is not None:
        operator.cancel()
    sample = await asyncio.to_thread(first_sample, port, namespace, sent)
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/vllm/scale"
    patches = [r.at for r in server.requests if r.method == "PATCH" and r.path == path]
    patched = min(patches, default=None)
    points = [sent, sample, patched, seen.get("bound"), seen.get("ready"), seen.get("served")]
    steps = {}
    for name, (a, b) in zip(STEPS[:4], itertools.pairwise(points), strict=False):
        steps[name] = b - a if a is not None and b is not None else None
    steps["first Ready"] = seen["ready"] - sent if "ready" in seen else None
    steps["first token"] = seen["served"] - sent if "served" in seen else None
    await _retire(api, namespace, method)
    await _no_nodes(core, keep)
    return steps


async def _send(fleet: ServingFleet, at: float) -> None:
    fleet.send(at)


async def _retire(api: client.ApiClient, namespace: str, method: str) -> None:
    """Back to zero for good: the autoscaler objects go, then the Deployment's replicas."""
    crd = client.CustomObjectsApi(api)
    await asyncio.to_thread(
        crd.delete_namespaced_custom_object, *GPA, namespace, "gpuautoscalers", "chat"
    )
    if method == "keda-push":
        await asyncio.to_thread(
            crd.delete_namespaced_custom_object,
            "keda.sh",
            "v1alpha1",
            namespace,
            "scaledobjects",
            "chat",
        )
    apps = client.AppsV1Api(api)
    await asyncio.to_thread(
        apps.patch_namespaced_deployment_scale, "vllm", namespace, {"spec": {"replicas": 0}}
    )
    try:  # placeholders the controller kept (the lab has no garbage collector)
        await asyncio.to_thread(
            apps.patch_namespaced_deployment_scale,
            placeholder_name("chat", kind="Deployment"),
            namespace,
            {"spec": {"replicas": 0}},
        )
    except client.ApiException as err:
        if err.status != 404:
            raise


async def _no_nodes(core: client.CoreV1Api, keep: int, timeout: float = 120.0) -> None:
    """Wait until the idle nodes have gone, but the `keep` the cluster never removes."""
    deadline = time.time() + timeout
    while len((await asyncio.to_thread(core.list_node)).items) > keep:
        if time.time() > deadline:
            names = [n.metadata.name for n in (await asyncio.to_thread(core.list_node)).items]
            pods = await asyncio.to_thread(core.list_pod_for_all_namespaces)
            held = [f"{p.metadata.namespace}/{p.metadata.name}" for p in pods.items]
            raise SystemExit(f"the lab cluster kept nodes {names} (pods: {held})")
        await asyncio.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per method")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma list of METHODS")
    parser.add_argument("--scrape-seconds", type=float, default=5.0, help="Prometheus' scrape")
    parser.add_argument("--tick-seconds", type=float, default=1.0, help="the controller's tick")
    parser.add_argument("--node-idle-seconds", type=float, default=5.0)
    # The lab's own timing by default; shorter in the smoke test, which checks the steps
    # are seen, not how long they take.
    parser.add_argument("--cold-start-seconds", type=float, default=TIMING["cold_start_seconds"])
    parser.add_argument(
        "--node-provision-seconds", type=float, default=TIMING["node_provision_seconds"]
    )
    parser.add_argument("--seed", type=int, default=0, help="of the request moments' jitter")
    parser.add_argument(
        "--min-nodes", type=int, default=0, help="GPU nodes kept at zero (1: a warm node)"
    )
    parser.add_argument("--calm-seconds", type=float, default=15.0, help="at zero, idle")
    parser.add_argument("--window-seconds", type=float, default=90.0, help="watched after")
    args = parser.parse_args()
    if not shutil.which("prometheus"):
        sys.exit("prometheus is not installed (./dev test installs it)")
    methods = [m for m in METHODS if m in args.methods.split(",")]
    plan = [(m, f"{m}-{i}") for i in range(args.rounds) for m in methods]
    timing = ClusterTiming(
        **{
            **TIMING,
            "cold_start_seconds": args.cold_start_seconds,
            "node_provision_seconds": args.node_provision_seconds,
        },
        node_idle_seconds=args.node_idle_seconds,
        initial_nodes=args.min_nodes,
        min_nodes=args.min_nodes,
    )
    with live_stack(
        prefix="gpufleet-zero-",
        timing=timing,
        fleets={ns: {"labels": LABELS, "gateway": True} for _, ns in plan},
        scrape_seconds=args.scrape_seconds,
    ) as stack:
        rows = asyncio.run(
            run(stack.server, stack.api, stack.fleets, plan, stack.prometheus_port, args, timing)
        )
    report(rows, args)


async def run(
    server, api, fleets, plan, port: int, args, timing: ClusterTiming
) -> list[tuple[str, dict]]:
    feed = SnapshotFeed()
    scaler_port = free_port()
    scaler = await serve(feed, "127.0.0.1", scaler_port)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{scaler_port}")
    stub = pb_grpc.ExternalScalerStub(channel)
    prom = PromClient(f"http://127.0.0.1:{port}")
    own = client.ApiClient(api.configuration)  # the controller's own client
    events = EventRecorder(own, controller="gpufleet.dev/autoscaler", instance="bench")
    window = f"{max(5, round(4 * args.scrape_seconds))}s"  # at least two scrapes
    ctl = Controller(
        Cluster(own),
        prom,
        events,
        config=ControllerConfig(scrape_interval_seconds=args.scrape_seconds, rate_window=window),
        feed=feed,
    )

    async def loop() -> None:
        while True:
            await ctl.tick()
            await asyncio.sleep(args.tick_seconds)

    ticking = asyncio.create_task(loop())
    rng = random.Random(args.seed)
    rows = []
    try:
        for method, namespace in plan:
            await asyncio.to_thread(
                create, api, namespace, method, f"127.0.0.1:{scaler_port}", timing
            )
            steps = await one_round(
                server,
                api,
                stub,
                fleets[namespace],
                namespace=namespace,
                method=method,
                port=port,
                calm=args.calm_seconds,
                window=args.window_seconds,
                keep=args.min_nodes,
                jitter=rng.uniform(0.0, args.scrape_seconds),
            )
            print(method, namespace, steps, file=sys.stderr)
            rows.append((method, steps))
    finally:
        ticking.cancel()
        await prom.close()
        await channel.close()
        await scaler.stop(grace=None)
        own.close()
    return rows


def report(rows: list[tuple[str, dict]], args) -> None:
    print("# Time to the first Ready replica from zero (lab)\n")
    lab = (args.node_provision_seconds, args.cold_start_seconds) == (
        TIMING["node_provision_seconds"],
        TIMING["cold_start_seconds"],
    )
    whose = " (the lab's)" if lab else ""
    print(
        f"GPU nodes kept at zero: {args.min_nodes}. "
        f"Scrape {args.scrape_seconds:g} s, controller tick {args.tick_seconds:g} s, node "
        f"provisioning {args.node_provision_seconds:g} s, cold start "
        f"{args.cold_start_seconds:g} s{whose}; "
        f"medians of {args.rounds} rounds, seconds.\n"
    )
    print("| method | " + " | ".join(STEPS) + " | x gpufleet (first Ready) |")
    print("|---|" + "---:|" * (len(STEPS) + 1))
    medians = {}
    for method in dict.fromkeys(m for m, _ in rows):
        cells = []
        for step in STEPS:
            values = [s[step] for m, s in rows if m == method and s[step] is not None]
            value = statistics.median(values) if values else None
            medians[(method, step)] = value
            cells.append(f"{value:.1f}" if value is not None else "none")
        base, mine = medians.get(("gpufleet", "first Ready")), medians[(method, "first Ready")]
        ratio = f"{mine / base:.2f}x" if base and mine else "n/a"
        print(f"| {method} | " + " | ".join(cells) + f" | {ratio} |")


if __name__ == "__main__":
    exit_with(main)
