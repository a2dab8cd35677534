"""A cluster of N served workloads for the controller benchmark, in its own process.

Starts the lab's fake API server with N Deployments (one Ready pod each) and N
GPUAutoscalers, and a stand-in Prometheus that answers every range query with one series
per pod (buckets for quantile queries), so the benchmark measures the controller, not
Prometheus. Prints {"kube": URL, "prom": URL} on one line, then serves until stdin closes.
`GET /counts` on the stand-in reports the API server's requests so far.

A second number adds that many pods of other teams (no GPUAutoscaler selects them), each
about 3.4 KB of JSON (a real pod, managedFields and all, is often 5 to 15 KB): what a
cluster-wide pod list also carries.

`--kueue-workloads N` adds a Karpenter NodePool and N Kueue Workloads of a batch team,
every other one admitted, the rest queued; about 2.5 KB of JSON each (one pod set with a
GPU container's template): the custom resource a batch cluster holds by the thousand.

`--no-watch-cache` serves lists as a resource without the API server's watch cache: in
pages, whatever their resourceVersion; `--no-watch-list` refuses streaming lists, as
kube-apiserver 1.33 does by default.

    python -m bench.controller_world 1000 [OTHER_PODS] [--kueue-workloads N]
        [--no-watch-cache] [--no-watch-list]
"""

import argparse
import asyncio
import json
import sys
import threading
import time

from aiohttp import web

from gpufleet.lab.kubeapi.resources import RESOURCES
from gpufleet.lab.kubeapi.server import FakeApiServer

NS = "bench"
_RES = {(r.group, r.plural): r for r in RESOURCES}
CONTAINERS = {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]}


def populate(server: FakeApiServer, n: int) -> None:
    store = server.store
    store.create(_RES[("", "namespaces")], "", {"metadata": {"name": NS}})
    for i in range(n):
        labels = {"app": f"w{i}"}
        store.create(
            _RES[("apps", "deployments")],
            NS,
            {
                "metadata": {"name": f"w{i}"},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}},
                },
            },
        )
        store.create(
            _RES[("", "pods")],
            NS,
            {
                "metadata": {"name": f"w{i}-0", "labels": labels},
                "spec": {"nodeName": f"node-{i // 8}", **CONTAINERS},
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                        }
                    ]
                },
            },
        )
        store.create(
            _RES[("autoscaling.gpufleet.dev", "gpuautoscalers")],
            NS,
            {
                "metadata": {"name": f"w{i}"},
                "spec": {
                    "scaleTargetRef": {"kind": "Deployment", "name": f"w{i}"},
                    "maxReplicas": 8,
                    "batchSlots": 64,
                },
            },
        )


def other_pod(i: int) -> dict:
    """A pod of some other team's service, of a real pod's size."""
    env = [{"name": f"SETTING_{k}", "value": f"value-{i}-{k}-" + "x" * 24} for k in range(40)]
    return {
        "metadata": {
            "name": f"svc-{i}",
            "labels": {"app": f"svc-{i // 10}", "team": "web", "pod-template-hash": "5d4f8b7c9"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"},
        },
        "spec": {
            "nodeName": f"cpu-node-{i // 30}",
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example.com/web/app:1.2.3",
                    "env": env,
                    "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
                }
            ],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ],
        },
    }


def kueue_workload(i: int) -> dict:
    """A Workload of a one-pod GPU job as Kueue writes one: admitted where `i` is even,
    else queued (no quota reserved yet)."""
    env = [{"name": f"JOB_SETTING_{k}", "value": f"value-{i}-{k}-" + "x" * 16} for k in range(20)]
    usage = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"job-train-{i}-3f2a1",
            "labels": {"kueue.x-k8s.io/job-uid": f"0c5d{i:08d}-aaaa-bbbb-cccc-123456789abc"},
        },
        "spec": {
            "queueName": "gpu-queue",
            "priority": 0,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "train",
                                    "image": "registry.example.com/ml/train:2.4.1",
                                    "env": env,
                                    "resources": {
                                        "requests": {**usage},
                                        "limits": {"nvidia.com/gpu": "1"},
                                    },
                                }
                            ],
                        }
                    },
                }
            ],
        },
        "status": _admitted(usage) if i % 2 == 0 else {},
    }


def _admitted(usage: dict) -> dict:
    """What Kueue writes of a Workload it admitted: its flavors, then the conditions."""
    when = "2026-01-01T00:00:00Z"
    return {
        "admission": {
            "clusterQueue": "gpu-cluster-queue",
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": 1,
                    "flavors": {"cpu": "cpu", "memory": "cpu", "nvidia.com/gpu": "h100"},
                    "resourceUsage": usage,
                }
            ],
        },
        "conditions": [
            {
                "type": t,
                "status": "True",
                "reason": t,
                "message": f"{t} by ClusterQueue gpu-cluster-queue",
                "lastTransitionTime": when,
            }
            for t in ("QuotaReserved", "Admitted")
        ],
    }


def matrix(query: str, pods: int, start: float, end: float, step: float) -> dict:
    times = []
    t = start
    while t <= end + 1e-9:
        times.append(t)
        t += step
    les = ("0.1", "1", "+Inf") if " le)" in query else (None,)
    result = []
    for i in range(pods):
        for j, le in enumerate(les):
            metric = {"namespace": NS, "pod": f"w{i}-0"}
            if le is not None:
                metric["le"] = le
            value = str(3.0 * (j + 1))
            result.append({"metric": metric, "values": [[ts, value] for ts in times]})
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.controller_world")
    parser.add_argument("workloads", type=int)
    parser.add_argument("other_pods", type=int, nargs="?", default=0)
    parser.add_argument("--kueue-workloads", type=int, default=0, metavar="N")
    parser.add_argument("--no-watch-cache", dest="watch_cache", action="store_false")
    parser.add_argument("--no-watch-list", dest="watch_list", action="store_false")
    args = parser.parse_args()
    n = args.workloads
    server = FakeApiServer(watch_cache=args.watch_cache, watch_list=args.watch_list).start()
    populate(server, n)
    if args.other_pods:
        server.store.create(_RES[("", "namespaces")], "", {"metadata": {"name": "web"}})
        for i in range(args.other_pods):
            server.store.create(_RES[("", "pods")], "web", other_pod(i))
    if args.kueue_workloads:
        server.store.create(_RES[("karpenter.sh", "nodepools")], "", {"metadata": {"name": "gpu"}})
        server.store.create(_RES[("", "namespaces")], "", {"metadata": {"name": "batch"}})
        for i in range(args.kueue_workloads):
            server.store.create(_RES[("kueue.x-k8s.io", "workloads")], "batch", kueue_workload(i))

    async def query_range(request: web.Request) -> web.Response:
        q = request.query
        body = matrix(q["query"], n, float(q["start"]), float(q["end"]), float(q["step"]))
        return web.json_response(body)

    async def clock(request: web.Request) -> web.Response:
        """`time()`, the one instant query the controller asks (its clock's reading)."""
        if request.query.get("query") != "time()":
            return web.json_response({"status": "error", "error": "time() only"}, status=400)
        now = time.time()
        return web.json_response(
            {"status": "success", "data": {"resultType": "scalar", "result": [now, f"{now}"]}}
        )

    async def counts(_: web.Request) -> web.Response:
        requests = list(server.requests)
        writes = [r for r in requests if r.method in ("POST", "PUT", "PATCH", "DELETE")]
        kinds = {}
        for r in writes:
            kind = (
                r.path.rsplit("/", 1)[-1]
                if r.path.endswith(("/status", "/scale"))
                else ("events" if "/events" in r.path else "other")
            )
            kinds[kind] = kinds.get(kind, 0) + 1
        return web.json_response({"requests": len(requests), "writes": len(writes), "by": kinds})

    async def serve() -> None:
        app = web.Application()
        app.router.add_get("/api/v1/query_range", query_range)
        app.router.add_get("/api/v1/query", clock)
        app.router.add_get("/counts", counts)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        print(json.dumps({"kube": server.url, "prom": f"http://127.0.0.1:{port}"}), flush=True)
        done = asyncio.Event()
        threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
        while not done.is_set():
            await asyncio.sleep(0.2)
        await runner.cleanup()

    asyncio.run(serve())
    server.stop()


if __name__ == "__main__":
    main()
