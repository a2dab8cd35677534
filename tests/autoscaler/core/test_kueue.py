"""Kueue's pending Workloads as GPU demand: which count, on which pool, and how they move
the node plan (Kueue's v1beta2 field names)."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.autoscaler.core.kueue import QueuedPodSet, pending_demands, queued_pod_sets
from gpufleet.autoscaler.core.nodepools import PoolDemand, pool_headroom
from gpufleet.autoscaler.core.workload import GpuShape


def workload(
    name: str = "train",
    *,
    gpus: object = "4",
    pods: int = 2,
    conditions: tuple[str, ...] = (),
    pool: str = "",
    flavor: str = "",
    active: bool | None = None,
) -> dict:
    spec: dict = {
        "containers": [{"name": "t", "resources": {"requests": {"nvidia.com/gpu": gpus}}}]
    }
    if pool:
        spec["nodeSelector"] = {"karpenter.sh/nodepool": pool}
    body: dict = {
        "metadata": {"namespace": "ml", "name": name},
        "spec": {"podSets": [{"name": "main", "count": pods, "template": {"spec": spec}}]},
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]},
    }
    if active is not None:
        body["spec"]["active"] = active
    if flavor:
        body["status"]["admission"] = {
            "clusterQueue": "cq",
            "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": flavor}}],
        }
    return body


FLAVORS = [
    {"metadata": {"name": "h100-flavor"}, "spec": {"nodeLabels": {"karpenter.sh/nodepool": "h100"}}}
]


@pytest.mark.parametrize(
    ("wl", "want"),
    [
        pytest.param(workload(), [("kueue:ml/train/main", "", 4, 2)], id="pending-counts"),
        pytest.param(workload(conditions=("Admitted",)), [], id="admitted-has-its-pods"),
        pytest.param(workload(conditions=("Finished",)), [], id="finished"),
        pytest.param(workload(active=False), [], id="deactivated"),
        pytest.param(
            workload(conditions=("QuotaReserved",), flavor="h100-flavor"),
            [("kueue:ml/train/main", "h100", 4, 2)],
            id="quota-reserved-not-admitted-on-its-flavors-pool",
        ),
        pytest.param(workload(pool="a100"), [("kueue:ml/train/main", "a100", 4, 2)], id="pinned"),
        pytest.param(workload(gpus=None), [], id="no-gpus-no-demand"),
        pytest.param(workload(gpus="x"), [], id="unreadable-quantity-skipped"),
        pytest.param({"spec": {"podSets": ["bad"]}}, [], id="malformed-skipped"),
    ],
)
def test_pending_workloads_are_demand(wl: dict, want: list) -> None:
    got = pending_demands([queued_pod_sets(wl)], FLAVORS)
    assert [(d.workload, d.node_pool, d.shape.gpus, d.replicas) for d in got] == want


def test_kueue_workloads_move_the_node_plan() -> None:
    """16 GPUs of limit: a serving workload's 8 replicas leave 8 for its headroom, until a
    queued training job wants 8 of them."""
    pools = [{"metadata": {"name": "h100"}, "spec": {"limits": {"nvidia.com/gpu": "16"}}}]
    serving = PoolDemand(
        workload="llm/chat",
        node_pool="h100",
        shape=GpuShape(),
        replicas=8,
        headroom=8,
        gpus_per_node=8,
    )
    assert pool_headroom(pools, [serving])["llm/chat"].granted == 8
    queued = pending_demands([queued_pod_sets(workload(gpus="4", pods=2, pool="h100"))], [])
    held = pool_headroom(pools, [serving, *queued])["llm/chat"]
    assert (held.granted, held.wanted) == (0, 8)


def test_what_is_kept_of_a_workload_is_its_queued_pod_sets() -> None:
    """Not the Workload: its pod templates (env, volumes, probes) stay out of memory."""
    wl = workload(pool="a100")
    wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["env"] = [
        {"name": f"E{i}", "value": "x" * 100} for i in range(50)
    ]
    assert queued_pod_sets(wl) == (
        QueuedPodSet(workload="kueue:ml/train/main", gpus=4, replicas=2, pool="a100", flavor=""),
    )


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=6,
)
# the paths the reading takes, so the fuzz reaches past the first wrong shape
_PATHS = st.sampled_from(
    [
        ("metadata",),
        ("spec", "active"),
        ("spec", "podSets"),
        ("spec", "podSets", 0, "count"),
        ("spec", "podSets", 0, "name"),
        ("spec", "podSets", 0, "template", "spec", "nodeSelector"),
        ("spec", "podSets", 0, "template", "spec", "containers"),
        ("spec", "podSets", 0, "template", "spec", "containers", 0, "resources"),
        ("status", "conditions"),
        ("status", "admission", "podSetAssignments"),
        ("status", "admission", "podSetAssignments", 0, "flavors"),
    ]
)


def _put(body: Any, path: tuple, value: Any) -> None:
    for step in path[:-1]:
        if isinstance(step, int):
            if not (isinstance(body, list) and body):
                return
        elif not isinstance(body, dict):
            return
        body = body[step] if isinstance(step, int) else body.setdefault(step, {})
    if isinstance(body, dict):
        body[path[-1]] = value


@given(st.lists(st.tuples(_PATHS, _JSON), max_size=4))
def test_any_workload_is_read_or_left_out(edits: list) -> None:
    """Whatever a Workload holds, reading it gives its pod sets or raises what the
    reflector leaves an object out for; what is read always plans."""
    wl = workload(flavor="h100-flavor", conditions=("QuotaReserved",))
    for path, value in edits:
        _put(wl, path, value)
    try:
        kept = queued_pod_sets(wl)
    except (AttributeError, TypeError):
        return
    assert all(isinstance(s.gpus, int) and s.gpus > 0 and s.replicas > 0 for s in kept)
    pending_demands([kept], FLAVORS)
