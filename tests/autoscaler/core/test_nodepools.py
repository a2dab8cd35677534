"""Karpenter NodePools as node groups: limits and weights read from the objects, and the
headroom their limits leave each workload."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.autoscaler.core.nodepools import (
    POOL_LABEL,
    PoolDemand,
    PoolUse,
    count,
    free_gpus,
    node_groups,
    pool_headroom,
    pool_use,
)
from gpufleet.autoscaler.core.replicas import PodState
from gpufleet.autoscaler.core.workload import GpuShape, ShapeKind


def nodepool(name: str, *, gpus: object = None, nodes: object = None, weight=None) -> dict:
    limits = {}
    if gpus is not None:
        limits["nvidia.com/gpu"] = gpus
    if nodes is not None:
        limits["nodes"] = nodes
    spec: dict = {"limits": limits} if limits else {}
    if weight is not None:
        spec["weight"] = weight
    return {"metadata": {"name": name}, "spec": spec}


def demand(workload: str, pool: str = "h100", *, replicas: int = 0, headroom: int = 0, **kw):
    return PoolDemand(
        workload=workload,
        node_pool=pool,
        shape=kw.pop("shape", GpuShape()),
        replicas=replicas,
        headroom=headroom,
        gpus_per_node=kw.pop("gpus_per_node", 8),
    )


@pytest.mark.parametrize(
    ("value", "want"),
    [
        pytest.param("16", 16, id="string"),
        pytest.param(16, 16, id="integer"),
        pytest.param("1k", 1000, id="decimal-suffix"),
        pytest.param("2Ki", 2048, id="binary-suffix"),
        pytest.param("1.5k", 1500, id="fraction"),
        pytest.param("lots", None, id="not-a-quantity"),
        pytest.param("-1", None, id="negative"),
        # the CRDs' Quantity pattern takes it; int(float) of it raised OverflowError, and
        # every workload's tick stopped
        pytest.param("1" * 400, None, id="past-a-float"),
    ],
)
def test_count_reads_a_quantity(value: object, want: int | None) -> None:
    assert count(value) == want


@given(st.text(max_size=20) | st.text("0123456789.kMGTi", min_size=300, max_size=400))
def test_count_never_raises(text: str) -> None:
    assert count(text) is None or count(text) >= 0


def test_limits_and_weight_become_the_groups_caps() -> None:
    (group,) = node_groups(
        [nodepool("h100", gpus="16", nodes="3", weight=40)], [demand("llm/a", gpus_per_node=4)]
    )
    assert (group.gpus_per_node, group.max_gpus, group.max_nodes, group.weight) == (4, 16, 3, 40)
    assert group.node_cap == 3


def test_a_limit_leaves_less_headroom_and_says_why() -> None:
    held = pool_headroom([nodepool("h100", gpus=16)], [demand("llm/a", replicas=12, headroom=8)])[
        "llm/a"
    ]
    assert (held.granted, held.wanted, held.node_pool) == (4, 8, "h100")
    assert "room for 4 of 8" in held.message and "nvidia.com/gpu 16" in held.message


def test_workloads_in_one_pool_share_its_limit() -> None:
    held = pool_headroom(
        [nodepool("h100", gpus=16)],
        [demand("llm/a", replicas=8, headroom=4), demand("llm/b", replicas=4, headroom=4)],
    )
    assert (held["llm/a"].granted, held["llm/b"].granted) == (2, 2)


@pytest.mark.parametrize(
    "d",
    [
        pytest.param(demand("llm/a", "ca-group", replicas=40, headroom=3), id="unknown-pool"),
        pytest.param(
            demand(
                "llm/a",
                replicas=40,
                headroom=3,
                shape=GpuShape(kind=ShapeKind.MIG, mig_profile="1g.10gb"),
            ),
            id="mig-not-planned",
        ),
    ],
)
def test_what_the_plan_does_not_cover_keeps_its_headroom(d: PoolDemand) -> None:
    held = pool_headroom([nodepool("h100", gpus=8)], [d])["llm/a"]
    assert (held.granted, held.message) == (3, "")


def test_an_unnamed_pool_is_the_highest_weight() -> None:
    pools = [nodepool("spot", gpus=8, weight=10), nodepool("reserved", gpus=16, weight=90)]
    held = pool_headroom(pools, [demand("llm/a", "", replicas=0, headroom=2)])["llm/a"]
    assert (held.granted, held.node_pool, held.message) == (2, "reserved", "")


@pytest.mark.parametrize(
    ("reserved_gpus", "want_granted", "want_pools"),
    [
        pytest.param(8, 3, "spot", id="the-first-pool-full-the-next-holds-it-all"),
        pytest.param(10, 3, "reserved, spot", id="what-the-first-cannot-hold-goes-on"),
        pytest.param(16, 3, "reserved", id="the-first-holds-it-all"),
    ],
)
def test_headroom_naming_no_pool_spills_down_the_weights(
    reserved_gpus: int, want_granted: int, want_pools: str
) -> None:
    """Issue 18 §3: Karpenter launches a pending pod's node in the next NodePool by
    weight once the first is at its limit; the placeholders of a workload naming no pool
    do the same, so its headroom is planned there."""
    pools = [
        nodepool("spot", gpus=16, weight=10),
        nodepool("reserved", gpus=reserved_gpus, weight=90),
    ]
    d = demand("llm/a", "", replicas=4, headroom=3, shape=GpuShape(gpus=2), gpus_per_node=2)
    held = pool_headroom(pools, [d])["llm/a"]
    assert (held.granted, held.wanted, held.node_pool) == (want_granted, 3, want_pools)


def test_headroom_pinned_to_a_full_pool_does_not_spill() -> None:
    pools = [nodepool("spot", gpus=16, weight=10), nodepool("reserved", gpus=8, weight=90)]
    d = demand("llm/a", "reserved", replicas=4, headroom=3, shape=GpuShape(gpus=2))
    held = pool_headroom(pools, [d])["llm/a"]
    assert (held.granted, held.node_pool) == (0, "reserved")
    assert "reserved has room for 0 of 3" in held.message


def gpu_node(name: str, pool: str, gpus: int = 8) -> dict:
    return {
        "metadata": {"name": name, "labels": {POOL_LABEL: pool}},
        "status": {"capacity": {"nvidia.com/gpu": str(gpus)}},
    }


def pod(name: str, node: str, gpus: int, ns: str = "research", **kw) -> PodState:
    return PodState(namespace=ns, name=name, node=node, gpus=gpus, **kw)


@pytest.mark.parametrize(
    ("pods", "want"),
    [
        pytest.param(
            [pod("train-0", "n1", 1)], {"h100": PoolUse(gpus=8, nodes=1)}, id="a-node-whole"
        ),
        pytest.param(
            [pod("train-0", "n1", 2), pod("vllm-0", "n1", 4, ns="llm")],
            {"h100": PoolUse(gpus=2, nodes=0)},
            id="a-node-shared-with-gpufleet-its-requests",
        ),
        pytest.param([pod("vllm-0", "n1", 4, ns="llm")], {}, id="gpufleet-alone"),
        pytest.param([], {}, id="an-empty-node-is-nobodys"),
        pytest.param(
            [pod("train-0", "n1", 8, finished=True)], {}, id="a-finished-pod-holds-nothing"
        ),
        pytest.param([pod("sidecar", "n1", 0)], {}, id="a-pod-without-gpus"),
        pytest.param([pod("train-0", "cpu-1", 8)], {}, id="a-node-in-no-pool"),
        pytest.param(
            [pod("train-0", "n1", 8), pod("train-1", "n2", 8), pod("nb", "a1", 1)],
            {"h100": PoolUse(gpus=16, nodes=2), "a100": PoolUse(gpus=4, nodes=1)},
            id="per-pool",
        ),
    ],
)
def test_other_pods_nodes_count_against_the_limits(pods: list, want: dict) -> None:
    """Karpenter compares spec.limits with its nodes' capacity, not pod requests."""
    nodes = [
        gpu_node("n1", "h100"),
        gpu_node("n2", "h100"),
        gpu_node("a1", "a100", gpus=4),
        {"metadata": {"name": "cpu-1"}},
    ]
    assert pool_use(nodes, pods, {("llm", "vllm-0")}) == want


def test_other_pods_nodes_leave_less_headroom_and_say_how_much() -> None:
    """A pool at its limit with another team's node: the headroom shrinks and the
    message names what the others use of the limit."""
    nodes = [gpu_node("n1", "h100"), gpu_node("n2", "h100")]
    used = pool_use(nodes, [pod("train-0", "n2", 8)], set())
    d = demand("llm/a", replicas=8, headroom=8)
    held = pool_headroom([nodepool("h100", gpus=16)], [d], used)["llm/a"]
    assert (held.granted, held.wanted) == (0, 8)
    assert "limit nvidia.com/gpu 16, 8 used by other pods' nodes" in held.message
    assert pool_headroom([nodepool("h100", gpus=16)], [d])["llm/a"].granted == 8


def test_other_pods_nodes_count_against_the_nodes_limit() -> None:
    used = {"h100": PoolUse(gpus=8, nodes=1)}
    d = demand("llm/a", replicas=8, headroom=8)
    held = pool_headroom([nodepool("h100", nodes=2)], [d], used)["llm/a"]
    assert held.granted == 0
    assert "max_nodes 2, 1 used by other pods" in held.message


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["h100", "a100", ""]),
            st.one_of(st.none(), st.text(max_size=6), st.integers(-3, 16)),
        ),
        max_size=6,
    ),
    st.lists(
        st.tuples(st.integers(0, 7), st.integers(0, 9), st.booleans(), st.booleans()),
        max_size=12,
    ),
)
def test_pool_use_never_raises_and_stays_within_the_nodes(nodes_in, pods_in) -> None:
    """Any label and capacity text: only pools where other pods hold GPUs appear, and a
    pool never counts more nodes than it has."""
    nodes = []
    for i, (pool, capacity) in enumerate(nodes_in):
        status = {} if capacity is None else {"capacity": {"nvidia.com/gpu": capacity}}
        nodes.append({"metadata": {"name": f"n{i}", "labels": {POOL_LABEL: pool}}, **status})
    pods = [
        PodState(namespace="x", name=f"p{j}", node=f"n{n}", gpus=g, finished=done)
        for j, (n, g, done, _) in enumerate(pods_in)
    ]
    ours = {("x", f"p{j}") for j, (*_, mine) in enumerate(pods_in) if mine}
    used = pool_use(nodes, pods, ours)
    for pool, use in used.items():
        assert pool and use.gpus > 0
        assert 0 <= use.nodes <= sum(1 for p, _ in nodes_in if p == pool)


def ready_node(name: str, pool: str = "h100", gpus: object = "8", **extra) -> dict:
    node = gpu_node(name, pool)
    node["status"] = {
        "allocatable": {"nvidia.com/gpu": gpus},
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    for key, value in extra.items():
        section, _, field = key.partition("__")
        node.setdefault(section, {})[field] = value
    return node


@pytest.mark.parametrize(
    ("node", "pods", "want"),
    [
        pytest.param(ready_node("n1"), [], (8,), id="an-empty-node-billed-while-idle"),
        pytest.param(
            ready_node("n1"),
            [pod("vllm-0", "n1", 2, ns="llm"), pod("train-0", "n1", 3)],
            (3,),
            id="every-pods-gpus-are-held",
        ),
        pytest.param(
            ready_node("n1"),
            [pod("vllm-0", "n1", 2, deleting_since=5.0)],
            (6,),
            id="a-terminating-pod-holds-its-gpus-until-gone",
        ),
        pytest.param(
            ready_node("n1"), [pod("job", "n1", 8, finished=True)], (8,), id="a-finished-pod-none"
        ),
        pytest.param(ready_node("n1"), [pod("vllm-0", "", 1)], (8,), id="a-pending-pod-none"),
        pytest.param(
            ready_node("n1", spec__unschedulable=True), [], (), id="a-cordoned-node-takes-none"
        ),
        pytest.param(
            ready_node("n1", metadata__deletionTimestamp="2026-11-29T10:00:00Z"),
            [],
            (),
            id="a-node-being-deleted-takes-none",
        ),
        pytest.param(
            ready_node(
                "n1", spec__taints=[{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]
            ),
            [],
            (),
            id="a-node-karpenter-drains-takes-none",
        ),
        pytest.param(
            ready_node("n1", spec__taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]),
            [],
            (8,),
            id="the-gpu-taint-gpu-pods-tolerate",
        ),
        pytest.param(
            ready_node("n1", status__conditions=[{"type": "Ready", "status": "False"}]),
            [],
            (),
            id="a-node-not-ready-takes-none",
        ),
        pytest.param(ready_node("n1", gpus="lots"), [], (0,), id="unreadable-gpus-none"),
    ],
)
def test_free_gpus_are_those_a_new_replica_can_take_now(node, pods, want) -> None:
    """A replica placed on a free GPU of a node up now starts without waiting for one."""
    assert free_gpus([nodepool("h100")], [node], pods) == {"h100": want}


def test_free_gpus_per_nodepool_and_capacity_where_allocatable_is_silent() -> None:
    """Every NodePool has an entry; a node of a pool that is not a NodePool counts in none."""
    nodes = [
        ready_node("n1"),
        ready_node("a1", "a100", gpus="4"),
        ready_node("x1", "gone"),
        {"metadata": {"name": "cpu-1"}},
    ]
    nodes[1]["status"]["capacity"] = nodes[1]["status"].pop("allocatable")
    pods = [pod("train-0", "a1", 1), pod("web", "cpu-1", 0)]
    pools = [nodepool("h100"), nodepool("a100"), nodepool("l4")]
    assert free_gpus(pools, nodes, pods) == {"h100": (8,), "a100": (3,), "l4": ()}


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["h100", "a100", ""]),
            st.one_of(st.none(), st.text(max_size=6), st.integers(-3, 16)),
            st.booleans(),
        ),
        max_size=6,
    ),
    st.lists(st.tuples(st.integers(0, 7), st.integers(0, 9), st.booleans()), max_size=12),
)
def test_free_gpus_never_raises_nor_goes_negative(nodes_in, pods_in) -> None:
    nodes = []
    for i, (pool, gpus, ready) in enumerate(nodes_in):
        nodes.append(
            {
                "metadata": {"name": f"n{i}", "labels": {POOL_LABEL: pool}},
                "status": {
                    "allocatable": {} if gpus is None else {"nvidia.com/gpu": gpus},
                    "conditions": [{"type": "Ready", "status": str(ready)}],
                },
            }
        )
    pods = [
        PodState(namespace="x", name=f"p{j}", node=f"n{n}", gpus=g, finished=done)
        for j, (n, g, done) in enumerate(pods_in)
    ]
    free = free_gpus([nodepool("h100"), nodepool("a100")], nodes, pods)
    assert set(free) == {"h100", "a100"}
    assert all(f >= 0 for frees in free.values() for f in frees)
