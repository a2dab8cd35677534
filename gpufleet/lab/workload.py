"""The lab's serving workload: a vLLM Deployment on the fake API server, scaled by a
GPUAutoscaler, its pods simulated by `ServingFleet` and scheduled by `LabCluster`.

Everything is created through the official client, as a user would; the cluster's
controllers and the serving pods run on the API server's own loop (the store is not
thread-safe).
"""

import time
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client

from gpufleet.autoscaler.replay.core.trace import Trace
from gpufleet.lab.kubeapi.cluster import ClusterTiming, LabCluster
from gpufleet.lab.kubeapi.server import FakeApiServer
from gpufleet.lab.serving import ServingFleet, gateway_queue_query

NAMESPACE = "llm"
NAME = "vllm"
LABELS = {"app": NAME}
GPUS_PER_NODE = 8
# The lab cluster's timings: cold starts and nodes in seconds, not minutes, so a scale-up
# shows while you watch; the GPUAutoscaler is told the same.
TIMING = dict(cold_start_seconds=5.0, node_provision_seconds=10.0, termination_seconds=1.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadSpec:
    nodes: int
    min_replicas: int
    max_replicas: int
    idle_seconds_to_zero: int
    policy: str
    rate_rps: float
    trace: Trace | None
    speed: float


def autoscaler_spec(spec: WorkloadSpec) -> dict:
    """The GPUAutoscaler of the vLLM Deployment: one GPU per replica, the lab's timings,
    placeholders on (the policy's node headroom held as low-priority pods), and the
    gateway's held requests as queue (what activates it from zero)."""
    return {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME},
        "minReplicas": spec.min_replicas,
        "maxReplicas": spec.max_replicas,
        "idleSecondsToZero": spec.idle_seconds_to_zero,
        "policy": spec.policy,
        "batchSlots": 8,
        "coldStartSeconds": TIMING["cold_start_seconds"],
        "nodePool": {
            "gpusPerNode": GPUS_PER_NODE,
            "provisionSeconds": TIMING["node_provision_seconds"],
            "placeholders": True,
        },
        "keda": {"queueTarget": 5, "pollingIntervalSeconds": 5},
        "signals": {"gatewayQueueDepth": gateway_queue_query(NAMESPACE)},
    }


def create_deployment(
    api: client.ApiClient, namespace: str, *, replicas: int, gpus: int | None = 1
) -> dict:
    """The namespace and the Deployment NAME (pods labelled LABELS, `gpus` GPUs each; None
    requests none); returns its container, for a caller adding pods of its own."""
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    container: dict = {"name": "vllm", "image": "vllm/vllm-openai"}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    client.AppsV1Api(api).create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": NAME},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": LABELS},
                "template": {"metadata": {"labels": LABELS}, "spec": {"containers": [container]}},
            },
        },
    )
    return container


def create_workload(api: client.ApiClient, spec: WorkloadSpec) -> None:
    """The namespace, the Deployment (one replica, one GPU each) and its GPUAutoscaler."""
    create_deployment(api, NAMESPACE, replicas=1)
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "autoscaling.gpufleet.dev",
        "v1alpha1",
        NAMESPACE,
        "gpuautoscalers",
        {
            "apiVersion": "autoscaling.gpufleet.dev/v1alpha1",
            "kind": "GPUAutoscaler",
            "metadata": {"name": NAME},
            "spec": autoscaler_spec(spec),
        },
    )


def lab_timing(spec: WorkloadSpec) -> ClusterTiming:
    """The lab's cluster timings (TIMING) with the spec's initial nodes."""
    return ClusterTiming(
        **TIMING,
        node_idle_seconds=60.0,
        gpus_per_node=GPUS_PER_NODE,
        initial_nodes=spec.nodes,
    )


class ServingWorkload:
    """The cluster's controllers and the serving pods of the Deployment's pods (LABELS in
    NAMESPACE), on `server`'s loop, until `stop`. The lab and the closed-loop tests run
    this one setup; `rate_rps`, `trace`, `speed`, `seed` and `gateway` (requests that find
    no ready pod wait at the gateway) go to the ServingFleet."""

    def __init__(
        self,
        server: FakeApiServer,
        *,
        timing: ClusterTiming,
        targets_file: Path,
        rate_rps: float,
        trace: Trace | None = None,
        speed: float = 1.0,
        seed: int = 0,
        gateway: bool = False,
    ) -> None:
        self._server = server
        self.fleet = ServingFleet(
            server.store,
            namespace=NAMESPACE,
            labels=LABELS,
            targets_file=targets_file,
            rate_rps=rate_rps,
            seed=seed,
            trace=trace,
            speed=speed,
            gateway=gateway,
        )

        async def start() -> LabCluster:
            cluster = LabCluster(server.store, timing=timing, clock=time.time)
            cluster.start()
            self.fleet.start()
            return cluster

        self._cluster = server.run_async(start())

    def stop(self) -> None:
        async def stop() -> None:
            await self.fleet.stop()
            await self._cluster.stop()

        self._server.run_async(stop())
