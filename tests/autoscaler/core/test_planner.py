"""Capacity planner: replicas -> GPU units -> nodes, table-driven bin-packing."""

import pytest

from gpufleet.autoscaler.core.planner import (
    NodeGroup,
    WorkloadDemand,
    gpu_units,
    pack_nodes,
    plan_capacity,
)
from gpufleet.autoscaler.core.workload import GpuShape, ShapeKind
from gpufleet.core.mig_geometry import INSTANCES_PER_GPU_80GB

WHOLE = NodeGroup(name="h100", gpus_per_node=8, max_nodes=10)
MIG = NodeGroup(name="h100-mig", gpus_per_node=8, max_nodes=10, mig_per_profile=True)
MIXED = NodeGroup(
    name="h100-mixed",
    gpus_per_node=8,
    max_nodes=10,
    mig_layout=(("3g.40gb", 1), ("2g.20gb", 1), ("1g.10gb", 1)),
)


def gpu(n: int = 1) -> GpuShape:
    return GpuShape(kind=ShapeKind.GPU, gpus=n)


def mig(profile: str) -> GpuShape:
    return GpuShape(kind=ShapeKind.MIG, mig_profile=profile)


def shared(per_gpu: int) -> GpuShape:
    return GpuShape(kind=ShapeKind.SHARED, shares_per_gpu=per_gpu)


@pytest.mark.parametrize(
    ("units", "per_node", "want"),
    [
        pytest.param([], 8, [], id="nothing-no-nodes"),
        pytest.param([1] * 8, 8, [8], id="eight-singles-fill-one-node"),
        pytest.param([1] * 9, 8, [8, 1], id="ninth-single-opens-a-node"),
        pytest.param([3, 3, 3, 3, 2, 2], 8, [8, 8], id="ffd-fills-gaps-with-small-units"),
        pytest.param([3] * 5, 8, [6, 6, 3], id="tp3-two-per-node-wastes-two"),
        pytest.param([8, 1, 8], 8, [8, 8, 1], id="whole-node-units-first"),
        pytest.param([4, 2, 4, 2, 2], 4, [4, 4, 4, 2], id="four-gpu-nodes"),
    ],
)
def test_pack_nodes_first_fit_decreasing(units: list[int], per_node: int, want: list[int]) -> None:
    assert pack_nodes(units, gpus_per_node=per_node) == want


@pytest.mark.parametrize(
    ("counts", "group", "want_gpus"),
    [
        pytest.param({gpu(): 5}, WHOLE, [1] * 5, id="whole-gpu-one-unit-each"),
        pytest.param({gpu(2): 3}, WHOLE, [2] * 3, id="tp2-units-of-two"),
        pytest.param({mig("1g.10gb"): 7}, MIG, [1], id="seven-1g10gb-on-one-gpu"),
        pytest.param({mig("1g.10gb"): 8}, MIG, [1, 1], id="eighth-1g10gb-needs-a-gpu"),
        pytest.param({mig("1g.20gb"): 5}, MIG, [1, 1], id="1g20gb-four-per-gpu"),
        pytest.param({mig("2g.20gb"): 3}, MIG, [1], id="2g20gb-three-per-gpu"),
        pytest.param({mig("3g.40gb"): 3}, MIG, [1, 1], id="3g40gb-two-per-gpu"),
        pytest.param({mig("4g.40gb"): 2}, MIG, [1, 1], id="4g40gb-one-per-gpu"),
        pytest.param({mig("7g.80gb"): 1}, MIG, [1], id="7g80gb-whole-gpu"),
        pytest.param(
            {mig("1g.10gb"): 8, mig("3g.40gb"): 3}, MIG, [1] * 4, id="per-profile-gpus-add"
        ),
        pytest.param(
            {mig("3g.40gb"): 2, mig("1g.10gb"): 5},
            MIXED,
            [1] * 5,
            id="fixed-layout-gpus-are-the-max-profile",
        ),
        pytest.param({shared(4): 9}, WHOLE, [1] * 3, id="time-sliced-four-per-gpu"),
        pytest.param({gpu(): 0}, WHOLE, [], id="zero-replicas-no-units"),
    ],
)
def test_gpu_units(counts: dict[GpuShape, int], group: NodeGroup, want_gpus: list[int]) -> None:
    assert sorted(gpu_units(counts, group)) == sorted(want_gpus)


def test_mig_table_is_the_80gb_geometry_the_simulated_nvml_reports() -> None:
    from gpufleet.lab.nvml.models import MODELS

    for key in ("H100", "A100"):
        reported = {p.name: p.max_count for p in MODELS[key].mig_profiles}
        assert reported == INSTANCES_PER_GPU_80GB
    assert INSTANCES_PER_GPU_80GB == {
        "1g.10gb": 7,
        "1g.20gb": 4,
        "2g.20gb": 3,
        "3g.40gb": 2,
        "4g.40gb": 1,
        "7g.80gb": 1,
    }


@pytest.mark.parametrize(
    ("demands", "groups", "want_nodes", "want_placeholders"),
    [
        pytest.param(
            (WorkloadDemand(name="a", replicas=10),),
            (WHOLE,),
            {"h100": 2},
            {},
            id="ten-gpus-two-nodes",
        ),
        pytest.param(
            (WorkloadDemand(name="a", replicas=8, headroom_replicas=2),),
            (WHOLE,),
            {"h100": 2},
            {"a": 2},
            id="placeholders-count-toward-nodes",
        ),
        pytest.param(
            (
                WorkloadDemand(name="a", shape=shared(4), replicas=2),
                WorkloadDemand(name="b", shape=shared(4), replicas=2),
            ),
            (WHOLE,),
            {"h100": 1},
            {},
            id="same-share-shape-shares-a-gpu",
        ),
        pytest.param(
            (
                WorkloadDemand(name="llm", replicas=6),
                WorkloadDemand(name="small", shape=mig("1g.10gb"), replicas=14),
            ),
            (WHOLE, MIG),
            {"h100": 1, "h100-mig": 1},
            {},
            id="mig-goes-to-the-mig-group",
        ),
        pytest.param(
            (WorkloadDemand(name="a", replicas=3, node_group="h100-mig"),),
            (WHOLE, MIG),
            {"h100": 0, "h100-mig": 0},
            {},
            id="named-group-without-the-shape-skips",
        ),
        pytest.param(
            (WorkloadDemand(name="a", shape=gpu(4), replicas=3),),
            (NodeGroup(name="small", gpus_per_node=2), WHOLE),
            {"small": 0, "h100": 2},
            {},
            id="tp4-skips-a-group-with-smaller-nodes",
        ),
        pytest.param((), (WHOLE,), {"h100": 0}, {}, id="no-demand-no-nodes"),
    ],
)
def test_plan_capacity(
    demands: tuple[WorkloadDemand, ...],
    groups: tuple[NodeGroup, ...],
    want_nodes: dict[str, int],
    want_placeholders: dict[str, int],
) -> None:
    plan = plan_capacity(demands, groups)
    assert {g.name: g.nodes for g in plan.node_groups} == want_nodes
    assert {p.workload: p.replicas for p in plan.placeholders} == want_placeholders


def test_plan_caps_at_max_nodes_and_says_so() -> None:
    group = NodeGroup(name="h100", gpus_per_node=8, max_nodes=2)
    plan = plan_capacity((WorkloadDemand(name="a", replicas=20),), (group,))
    (g,) = plan.node_groups
    assert (g.nodes, g.gpus_needed, g.unplaced_gpus) == (2, 20, 4)
    assert any("capped at max_nodes 2" in r for r in plan.reasons)


def test_plan_names_a_shape_no_group_offers() -> None:
    plan = plan_capacity((WorkloadDemand(name="x", shape=mig("2g.20gb"), replicas=1),), (WHOLE,))
    assert plan.nodes("h100") == 0
    assert plan.reasons == ("x: no node group offers MIG 2g.20gb; skipped",)


def test_plan_reason_splits_replicas_and_placeholders() -> None:
    plan = plan_capacity((WorkloadDemand(name="a", replicas=9, headroom_replicas=3),), (WHOLE,))
    assert plan.reasons == ("h100: 9 GPUs for replicas + 3 for placeholders -> 2 nodes of 8",)
    (g,) = plan.node_groups
    assert (g.gpus_for_replicas, g.gpus_needed) == (9, 12)


LIMITED = NodeGroup(name="h100", gpus_per_node=8, max_nodes=10, max_gpus=16)  # 2 nodes


@pytest.mark.parametrize(
    ("demands", "groups", "want_placeholders", "want_nodes"),
    [
        pytest.param(
            (WorkloadDemand(name="a", replicas=8, headroom_replicas=8),),
            (LIMITED,),
            {"a": 8},
            {"h100": 2},
            id="headroom-within-the-gpu-limit-is-all-held",
        ),
        pytest.param(
            (WorkloadDemand(name="a", replicas=12, headroom_replicas=8),),
            (LIMITED,),
            {"a": 4},
            {"h100": 2},
            id="replicas-first-placeholders-get-what-the-limit-leaves",
        ),
        pytest.param(
            (
                WorkloadDemand(name="a", replicas=4, headroom_replicas=8),
                WorkloadDemand(name="b", replicas=4, headroom_replicas=8),
            ),
            (LIMITED,),
            {"a": 4, "b": 4},
            {"h100": 2},
            id="the-limits-room-is-shared-round-the-workloads",
        ),
        pytest.param(
            (WorkloadDemand(name="a", replicas=20, headroom_replicas=2),),
            (LIMITED,),
            {"a": 0},
            {"h100": 2},
            id="replicas-past-the-limit-leave-no-headroom",
        ),
        pytest.param(
            (WorkloadDemand(name="a", shape=gpu(3), replicas=0, headroom_replicas=6),),
            (NodeGroup(name="h100", gpus_per_node=8, max_gpus=20),),
            {"a": 4},
            {"h100": 2},
            id="a-limit-caps-whole-nodes-tp3-packs-two-per-node",
        ),
        pytest.param(
            (WorkloadDemand(name="a", replicas=1, headroom_replicas=1),),
            (NodeGroup(name="spot", weight=10), NodeGroup(name="reserved", weight=50)),
            {"a": 1},
            {"spot": 0, "reserved": 1},
            id="an-unnamed-demand-goes-to-the-highest-weight",
        ),
    ],
)
def test_plan_honours_nodepool_limits_and_weights(
    demands: tuple[WorkloadDemand, ...],
    groups: tuple[NodeGroup, ...],
    want_placeholders: dict[str, int],
    want_nodes: dict[str, int],
) -> None:
    plan = plan_capacity(demands, groups)
    assert {p.workload: p.replicas for p in plan.placeholders} == want_placeholders
    assert {g.name: g.nodes for g in plan.node_groups} == want_nodes
    assert {p.workload: p.wanted for p in plan.placeholders} == {
        d.name: d.headroom_replicas for d in demands if d.headroom_replicas
    }


def test_a_capped_headroom_is_named_in_the_reasons() -> None:
    plan = plan_capacity((WorkloadDemand(name="a", replicas=12, headroom_replicas=8),), (LIMITED,))
    assert (
        "a: h100 has room for 4 of 8 placeholder replicas (limit nvidia.com/gpu 16: 2 nodes of 8)"
        in plan.reasons
    )


def test_headroom_naming_no_group_spills_to_the_next_weight() -> None:
    """Issue 18 §3: what a full higher-weight group cannot hold of an unnamed demand's
    headroom is planned on the next group by weight, with the nodes it keeps there."""
    groups = (
        NodeGroup(name="spot", gpus_per_node=8, weight=10),
        NodeGroup(name="reserved", gpus_per_node=8, weight=50, max_gpus=16),
    )
    plan = plan_capacity((WorkloadDemand(name="a", replicas=12, headroom_replicas=8),), groups)
    held = {(p.node_group, p.replicas, p.wanted) for p in plan.placeholders}
    assert held == {("reserved", 4, 8), ("spot", 4, 4)}
    assert {g.name: g.nodes for g in plan.node_groups} == {"spot": 1, "reserved": 2}


def test_capacity_used_outside_the_plan_counts_against_the_limits() -> None:
    group = NodeGroup(name="h100", gpus_per_node=8, max_gpus=32, used_gpus=12, max_nodes=4)
    assert group.node_cap == 2  # (32 - 12) // 8
    plan = plan_capacity((WorkloadDemand(name="a", replicas=8, headroom_replicas=16),), (group,))
    assert plan.placeholders[0].replicas == 8
    assert (
        "a: h100 has room for 8 of 16 placeholder replicas "
        "(limit nvidia.com/gpu 32, 12 used by other pods' nodes: 2 nodes of 8)"
    ) in plan.reasons
    nodes = NodeGroup(name="h100", gpus_per_node=8, max_nodes=3, used_nodes=2)
    assert nodes.node_cap == 1
