"""Karpenter NodePools as node groups: limits and weights read from the objects, and the
headroom their limits leave each workload."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.autoscaler.core.nodepools import PoolDemand, count, node_groups, pool_headroom
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
    ],
)
def test_count_reads_a_quantity(value: object, want: int | None) -> None:
    assert count(value) == want


@given(st.text(max_size=20))
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
    pools = [nodepool("spot", gpus=8, weight=10), nodepool("reserved", gpus=0, weight=90)]
    held = pool_headroom(pools, [demand("llm/a", "", replicas=0, headroom=2)])["llm/a"]
    assert (held.granted, held.node_pool) == (0, "reserved")
    assert "reserved has room for 0 of 2" in held.message
