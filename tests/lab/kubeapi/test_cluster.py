"""The fake cluster's scheduler and node provisioner with placeholder pods: nodes come up
for the placeholders, real replicas preempt them and turn Ready long before a new node
could have arrived. Driven by a manual clock through `reconcile`, read through the store
(what the API server serves)."""

import asyncio
import dataclasses
from typing import Any

from helpers.clock import ManualClock

from gpufleet.autoscaler.core.buffers import capacity_buffer, pod_template
from gpufleet.autoscaler.core.placeholders import placeholder_deployment, priority_class
from gpufleet.lab.kubeapi.cluster import (
    BUFFERS,
    BURST_REPLICAS,
    DEPLOYMENTS,
    NODES,
    POD_TEMPLATES,
    PODS,
    PRIORITY_CLASSES,
    ClusterTiming,
    LabCluster,
    is_ready,
)
from gpufleet.lab.kubeapi.resources import RESOURCES
from gpufleet.lab.kubeapi.store import ObjectStore

NAMESPACES = next(r for r in RESOURCES if (r.group, r.plural) == ("", "namespaces"))

NS = "llm"
TIMING = ClusterTiming(
    cold_start_seconds=60, node_provision_seconds=180, termination_seconds=30, gpus_per_node=8
)
TEMPLATE = {"containers": [{"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}


def _deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": TEMPLATE},
        },
    }


def _world(placeholders: int, *, buffer: int = 0) -> tuple[ObjectStore, LabCluster, ManualClock]:
    clock = ManualClock()
    store = ObjectStore(clock=clock)
    store.create(NAMESPACES, "", {"metadata": {"name": NS}})
    store.create(PRIORITY_CLASSES, "", priority_class())
    store.create(DEPLOYMENTS, NS, _deployment("vllm", 4))  # 8 GPUs: the first node full
    if placeholders:
        body = placeholder_deployment(
            namespace=NS,
            autoscaler="vllm",
            autoscaler_uid="u",
            replicas=placeholders,
            template_spec=TEMPLATE,
        )
        store.create(DEPLOYMENTS, NS, body)
    if buffer:
        owner = {"namespace": NS, "autoscaler": "vllm", "autoscaler_uid": "u"}
        store.create(POD_TEMPLATES, NS, pod_template(**owner, template_spec=TEMPLATE))
        store.create(BUFFERS, NS, capacity_buffer(**owner, replicas=buffer))
    cluster = LabCluster(store, timing=TIMING, clock=clock)
    return store, cluster, clock


def _run(cluster: LabCluster, clock: ManualClock, seconds: float) -> None:
    for _ in range(int(seconds)):
        cluster.reconcile(clock.advance(1.0))


def _ready(store: ObjectStore, app: str) -> int:
    return sum(1 for p in store.list(PODS, NS, label_selector=f"app={app}") if is_ready(p))


def _burst_ready_after(placeholders: int, *, buffer: int = 0) -> float:
    """Seconds from a scale-up of 4 replicas (a second node's worth) to all 8 Ready."""
    store, cluster, clock = _world(placeholders, buffer=buffer)
    _run(cluster, clock, 400)  # steady: 4 replicas Ready; placeholders on a second node
    assert _ready(store, "vllm") == 4
    store.patch(
        DEPLOYMENTS,
        NS,
        "vllm",
        {"spec": {"replicas": 8}},
        content_type="application/merge-patch+json",
    )
    start = clock()
    while _ready(store, "vllm") < 8:
        _run(cluster, clock, 1)
        assert clock() - start < 1000, "the burst's replicas never turned Ready"
    return clock() - start


def test_a_bound_pod_is_scheduled_from_its_binding_and_stays_so_once_ready() -> None:
    """As the scheduler's binding does, PodScheduled is True from the bind, so a controller
    tells a replica loading on its node from one waiting for a node; Ready adds to it."""
    store, cluster, clock = _world(placeholders=0)
    _run(cluster, clock, 1)
    pods = store.list(PODS, NS, label_selector="app=vllm")
    conditions = [{c["type"]: c["status"] for c in p["status"]["conditions"]} for p in pods]
    assert len(pods) == 4 and conditions == [{"PodScheduled": "True"}] * 4
    _run(cluster, clock, 400)
    pods = store.list(PODS, NS, label_selector="app=vllm")
    conditions = [{c["type"]: c["status"] for c in p["status"]["conditions"]} for p in pods]
    assert conditions == [{"PodScheduled": "True", "Ready": "True"}] * 4


def test_placeholders_make_the_provisioner_add_nodes_ahead() -> None:
    store, cluster, clock = _world(placeholders=4)
    _run(cluster, clock, 400)
    nodes = store.list(NODES, None)
    assert len(nodes) == 2  # one for the replicas, one bought ahead for the placeholders
    placed = store.list(PODS, NS, label_selector="autoscaling.gpufleet.dev/placeholder-for=vllm")
    assert len(placed) == 4 and all(p["spec"].get("nodeName") for p in placed)


def test_replicas_preempt_placeholders_and_are_ready_a_node_provisioning_sooner() -> None:
    with_placeholders = _burst_ready_after(placeholders=4)
    without = _burst_ready_after(placeholders=0)
    # Without: a node's provisioning (180 s) plus a cold start (60 s). With: the
    # placeholders go at once (terminationGracePeriodSeconds 0), then a cold start.
    assert without >= 180 + 60
    assert with_placeholders <= 60 + 5
    assert with_placeholders < without - 150


def test_preempted_placeholders_come_back_on_a_new_node() -> None:
    store, cluster, clock = _world(placeholders=4)
    _run(cluster, clock, 400)
    store.patch(
        DEPLOYMENTS,
        NS,
        "vllm",
        {"spec": {"replicas": 8}},
        content_type="application/merge-patch+json",
    )
    _run(cluster, clock, 400)
    placed = store.list(PODS, NS, label_selector="autoscaling.gpufleet.dev/placeholder-for=vllm")
    assert len(placed) == 4 and all(p["spec"].get("nodeName") for p in placed)
    assert len(store.list(NODES, None)) == 3


def test_a_placeholder_never_preempts_anything() -> None:
    """preemptionPolicy Never: a placeholder with no room waits for a node."""
    store, cluster, clock = _world(placeholders=0)
    _run(cluster, clock, 400)
    body = placeholder_deployment(
        namespace=NS, autoscaler="vllm", autoscaler_uid="u", replicas=1, template_spec=TEMPLATE
    )
    store.create(DEPLOYMENTS, NS, body)
    _run(cluster, clock, 5)
    assert _ready(store, "vllm") == 4  # nothing evicted


def test_a_capacity_buffer_makes_the_provisioner_add_nodes_and_keep_them() -> None:
    """Cluster Autoscaler's CapacityBuffer: its chunks are never pods, yet a node comes up
    for them and stays while the buffer asks for it; the status says what CA holds."""
    store, cluster, clock = _world(placeholders=0, buffer=4)
    _run(cluster, clock, 400)  # past node_idle_seconds: an unheld empty node would be gone
    assert len(store.list(NODES, None)) == 2
    assert len(store.list(PODS, NS)) == 4  # the replicas only
    status = store.get(BUFFERS, NS, "vllm-placeholder")["status"]
    assert (status["replicas"], status["podTemplateRef"]) == (4, {"name": "vllm-placeholder"})
    assert status["conditions"][0]["type"] == "ReadyForProvisioning"
    store.patch(
        BUFFERS,
        NS,
        "vllm-placeholder",
        {"spec": {"replicas": 0}},
        content_type="application/merge-patch+json",
    )
    _run(cluster, clock, 100)
    assert len(store.list(NODES, None)) == 1  # the headroom given back


def test_replicas_bind_to_a_buffers_nodes_without_preempting_anything() -> None:
    with_buffer = _burst_ready_after(placeholders=0, buffer=4)
    # No node provisioning, no placeholder to evict: a cold start.
    assert with_buffer <= 60 + 5
    assert with_buffer < _burst_ready_after(placeholders=0) - 150


def test_a_buffer_without_its_pod_template_holds_nothing() -> None:
    store, cluster, clock = _world(placeholders=0)
    owner = {"namespace": NS, "autoscaler": "vllm", "autoscaler_uid": "u"}
    store.create(BUFFERS, NS, capacity_buffer(**owner, replicas=4))
    _run(cluster, clock, 400)
    assert len(store.list(NODES, None)) == 1
    (condition,) = store.get(BUFFERS, NS, "vllm-placeholder")["status"]["conditions"]
    assert (condition["type"], condition["status"]) == ("ReadyForProvisioning", "False")


def test_idle_nodes_go_down_to_min_nodes() -> None:
    """Issue 18 §3: a workload scaled to zero leaves no GPU node when min_nodes is 0; the
    default keeps one (a cluster's system pool)."""
    for min_nodes, left in ((1, 1), (0, 0)):
        clock = ManualClock()
        store = ObjectStore(clock=clock)
        timing = dataclasses.replace(TIMING, initial_nodes=2, min_nodes=min_nodes)
        cluster = LabCluster(store, timing=timing, clock=clock)
        _run(cluster, clock, TIMING.node_idle_seconds + 2)
        assert len(store.list(NODES, None)) == left


def test_a_deployment_past_242_characters_gets_no_pods() -> None:
    """As the Deployment controller: its ReplicaSet `<name>-<hash>` (a hash of up to 10
    characters) would pass an object name's 253, so no pod comes, and Progressing says why.
    Up to 242, the pods come, their names cut as the apiserver's generator cuts them."""
    store, cluster, clock = _world(placeholders=0)
    for app, name in (("a", "a" * 242), ("b", "b" * 243)):
        body = _deployment(app, 1)
        body["metadata"]["name"] = name
        store.create(DEPLOYMENTS, NS, body)
    _run(cluster, clock, 1)
    (pod,) = store.list(PODS, NS, label_selector="app=a")
    assert pod["metadata"]["name"].startswith("a" * 58) and len(pod["metadata"]["name"]) == 63
    assert store.list(PODS, NS, label_selector="app=b") == []
    status = store.get(DEPLOYMENTS, NS, "b" * 243)["status"]
    (condition,) = status["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "Progressing",
        "False",
        "ReplicaSetCreateError",
    )


def test_the_placeholders_of_a_253_character_autoscaler_get_pods() -> None:
    """A GPUAutoscaler's name may be 253 characters. Its placeholder Deployment was named
    `<name>-placeholder`: refused past 241 characters, and past 230 left without pods."""
    for length in (235, 253):
        store, cluster, clock = _world(placeholders=0)
        body = placeholder_deployment(
            namespace=NS,
            autoscaler="x" * length,
            autoscaler_uid="u",
            replicas=2,
            template_spec=TEMPLATE,
        )
        store.create(DEPLOYMENTS, NS, body)
        _run(cluster, clock, 1)
        selector = ",".join(f"{k}={v}" for k, v in body["spec"]["selector"]["matchLabels"].items())
        assert len(store.list(PODS, NS, label_selector=selector)) == 2, length


def test_a_deployment_gets_its_pods_a_burst_at_a_time() -> None:
    """As the ReplicaSet controller's BurstReplicas: a Deployment scaled to int32's top
    created all its pods in one pass, on the API server's loop, which then answered no one."""
    store, cluster, clock = _world(placeholders=0)
    store.patch(
        DEPLOYMENTS,
        NS,
        "vllm",
        {"spec": {"replicas": 2 * BURST_REPLICAS}},
        content_type="application/merge-patch+json",
    )
    _run(cluster, clock, 1)
    assert len(store.list(PODS, NS)) == BURST_REPLICAS
    _run(cluster, clock, 1)
    assert len(store.list(PODS, NS)) == 2 * BURST_REPLICAS


def test_a_buffer_of_int32s_top_chunks_takes_one_pass() -> None:
    """Each chunk that fits nowhere was counted one by one: 2**31 - 1 of them."""
    store, cluster, clock = _world(placeholders=0, buffer=2**31 - 1)
    _run(cluster, clock, 1)
    assert store.get(BUFFERS, NS, "vllm-placeholder")["status"]["replicas"] == 2**31 - 1
    _run(cluster, clock, 400)
    assert len(store.list(NODES, None)) == TIMING.max_nodes


def test_a_failing_pass_is_logged_and_the_next_one_runs(caplog) -> None:
    """An exception out of a pass ended the cluster's task: no pod was made or ended again,
    and nothing said so."""
    _, cluster, _ = _world(placeholders=0)
    passes: list[int] = []

    def reconcile(now: float) -> None:
        passes.append(1)
        if len(passes) == 1:
            raise RuntimeError("an object nothing checked")

    cluster.reconcile = reconcile  # type: ignore[method-assign]

    async def run() -> None:
        cluster.start(period_seconds=0.01)
        while len(passes) < 3:
            await asyncio.sleep(0.01)
        await cluster.stop()

    asyncio.run(run())
    assert "an object nothing checked" in caplog.text


def test_a_buffer_whose_spec_is_not_an_object_is_skipped() -> None:
    """A custom resource's spec is what its CRD's schema allows: a string one raised out
    of the pass, and the cluster did nothing more."""
    store, cluster, clock = _world(placeholders=0)
    store.create(BUFFERS, NS, {"metadata": {"name": "loose"}, "spec": "all of it"})
    _run(cluster, clock, 70)
    assert _ready(store, "vllm") == 4
