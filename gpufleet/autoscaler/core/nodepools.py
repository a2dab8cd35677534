"""Karpenter NodePools as the planner's node groups, and what their limits leave for headroom.

A NodePool (`karpenter.sh/v1`) caps the capacity of its nodes with `spec.limits` (a
ResourceList: `nvidia.com/gpu`, `nodes`) and orders itself against other pools with
`spec.weight` (1-100, higher first). Karpenter launches no node past a limit, so
headroom planned beyond it would be placeholder pods pending forever (or a buffer never
filled): the controller plans every workload's replicas and headroom per pool with
`core.planner`, keeps only the headroom the plan grants, and says why in a condition.

What the plan does not see: other pods in the same pool (only gpufleet's workloads are
counted), and the node size where no GPUAutoscaler names it (`nodePool.gpusPerNode`
unset: one replica's GPUs per node, the most optimistic packing).

Pure: plain dicts in, frozen results out.
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.autoscaler.core.planner import NodeGroup, WorkloadDemand, plan_capacity
from gpufleet.autoscaler.core.workload import GpuShape, ShapeKind

GPU = "nvidia.com/gpu"
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(k|M|G|T|Ki|Mi|Gi|Ti)?$")
_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_SUFFIX |= {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def count(value: Any) -> int | None:
    """A countable Quantity ("16", 16, "1k") -> an int, rounded down; None when it is not
    one (a limit that cannot be read is no limit the planner can honour)."""
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        return None
    return int(float(match.group(1)) * _SUFFIX[match.group(2) or ""])


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolDemand:
    """One GPUAutoscaler's part in its pool: replicas it will run plus the headroom."""

    workload: str  # namespace/name
    node_pool: str  # spec.nodePool.name; "" lets the highest weight take it
    shape: GpuShape
    replicas: int
    headroom: int
    gpus_per_node: int = 0  # spec.nodePool.gpusPerNode; 0: unknown


@dataclass(frozen=True, slots=True, kw_only=True)
class Headroom:
    """What one workload may hold: `granted` of `wanted`, and why less (empty: all)."""

    granted: int
    wanted: int
    node_pool: str = ""  # where the plan put it; "" when it holds none there
    message: str = ""


def node_groups(nodepools: Sequence[Mapping[str, Any]], demands: Sequence[PoolDemand]):
    """The NodePools as node groups; a pool's node size is the largest any GPUAutoscaler
    naming it gives, else the largest replica planned there."""
    sizes: dict[str, int] = {}
    for d in demands:
        size = d.gpus_per_node or _replica_gpus(d.shape)
        sizes[d.node_pool] = max(sizes.get(d.node_pool, 0), size)
    groups = []
    for pool in nodepools:
        name = (pool.get("metadata") or {}).get("name", "")
        spec = pool.get("spec") or {}
        limits = spec.get("limits") or {}
        per_node = sizes.get(name) or max(sizes.values(), default=1)
        max_nodes = count(limits["nodes"]) if "nodes" in limits else None
        weight = spec.get("weight")
        groups.append(
            NodeGroup(
                name=name,
                gpus_per_node=per_node,
                max_nodes=max_nodes if max_nodes is not None else 1_000_000,
                weight=weight if isinstance(weight, int) else 0,
                max_gpus=count(limits[GPU]) if GPU in limits else None,
            )
        )
    return tuple(groups)


def pool_headroom(
    nodepools: Sequence[Mapping[str, Any]], demands: Sequence[PoolDemand]
) -> dict[str, Headroom]:
    """Workload -> the headroom its NodePool's limits leave it, from one plan of every
    workload's replicas and headroom. A workload `on_nodepool` does not cover keeps all
    it asked for (a pool that is not there may be a Cluster Autoscaler node group)."""
    planned = [d for d in demands if on_nodepool(d, nodepools)]
    groups = node_groups(nodepools, planned)
    plan = plan_capacity(
        tuple(
            WorkloadDemand(
                name=d.workload,
                shape=d.shape,
                replicas=d.replicas,
                headroom_replicas=d.headroom,
                node_group=d.node_pool,
            )
            for d in planned
        ),
        groups,
    )
    out = {d.workload: Headroom(granted=d.headroom, wanted=d.headroom) for d in demands}
    for p in plan.placeholders:
        message = ""
        if p.replicas < p.wanted:
            message = next(
                (r for r in plan.reasons if r.startswith(f"{p.workload}: {p.node_group} ")), ""
            )
        out[p.workload] = Headroom(
            granted=p.replicas, wanted=p.wanted, node_pool=p.node_group, message=message
        )
    for reason in plan.reasons:  # a shape no pool offers: nothing to hold it on
        workload, _, rest = reason.partition(": ")
        if rest.startswith("no node group offers") and workload in out:
            wanted = out[workload].wanted
            out[workload] = Headroom(granted=0, wanted=wanted, message=reason)
    return out


def on_nodepool(demand: PoolDemand, nodepools: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the plan covers `demand`: whole GPUs or shares (MIG layouts are not in a
    NodePool: left uncapped) on a pool that exists, or on any when it names none."""
    if demand.shape.kind is ShapeKind.MIG or not nodepools:
        return False
    names = {(p.get("metadata") or {}).get("name", "") for p in nodepools}
    return not demand.node_pool or demand.node_pool in names


def _replica_gpus(shape: GpuShape) -> int:
    return shape.gpus if shape.kind is ShapeKind.GPU else 1
