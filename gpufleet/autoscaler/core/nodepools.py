"""Karpenter NodePools as the planner's node groups, and what their limits leave for headroom.

A NodePool (`karpenter.sh/v1`) caps the capacity of its nodes with `spec.limits` (a
ResourceList: `nvidia.com/gpu`, `nodes`) and orders itself against other pools with
`spec.weight` (1-100, higher first). Karpenter launches no node past a limit, so
headroom planned beyond it would be placeholder pods pending forever (or a buffer never
filled): the controller plans every workload's replicas and headroom per pool with
`core.planner`, keeps only the headroom the plan grants, and says why in a condition.

Other pods share the pools (other teams' training jobs, notebooks), and Karpenter counts
their nodes against the same limits: it compares `spec.limits` with the summed capacity
of the pool's nodes (what `status.resources` reports), not with pod requests. So
`pool_use` counts nodes, those labelled `karpenter.sh/nodepool`: a node holding other
pods' GPUs and none of gpufleet's is theirs whole (all its GPUs, and one of `nodes`); on a
node shared with gpufleet's pods only their GPU requests are theirs. Empty nodes are
nobody's: a node Karpenter just launched for gpufleet's pending placeholders is empty
too, and counting it as others' would cut the headroom that asked for it.
`status.resources` is not read for the same reason: it counts NodeClaims still
launching, whoever they are for. gpufleet's pods are the planned workloads' pods and its
placeholder pods; a Kueue Workload's pods count as others' once admitted (pending, it is
demand in the plan).

What the plan does not see: the node size where no GPUAutoscaler names it
(`nodePool.gpusPerNode` unset: one replica's GPUs per node, the most optimistic packing).

Pure: plain dicts in, frozen results out.
"""

import math
import re
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from gpufleet.autoscaler.core.planner import (
    NodeGroup,
    PlaceholderPods,
    WorkloadDemand,
    plan_capacity,
)
from gpufleet.autoscaler.core.replicas import PodState
from gpufleet.autoscaler.core.workload import GpuShape, ShapeKind

GPU = "nvidia.com/gpu"
POOL_LABEL = "karpenter.sh/nodepool"  # on each node: the NodePool that launched it
# Karpenter's taints that keep new pods off a node: one it is draining, one not registered yet
KEEP_OFF_TAINTS = frozenset({"karpenter.sh/disrupted", "karpenter.sh/unregistered"})
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(k|M|G|T|Ki|Mi|Gi|Ti)?$")
_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_SUFFIX |= {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def count(value: Any) -> int | None:
    """A countable Quantity ("16", 16, "1k") -> an int, rounded down; None when it is not
    one (a limit that cannot be read is no limit the planner can honour)."""
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        return None
    number = float(match.group(1)) * _SUFFIX[match.group(2) or ""]
    # Over 308 digits (the CRDs' Quantity pattern allows them) is inf: no count either.
    return int(number) if math.isfinite(number) else None


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
    # the pools holding it ("a, b"), else the first it was planned on; "": not planned
    node_pool: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolUse:
    """What other pods' nodes count against one NodePool's limits."""

    gpus: int = 0
    nodes: int = 0


def pod_gpus(pod_spec: Mapping[str, Any]) -> int:
    """`nvidia.com/gpu` one pod asks for: each container's limit, else its request."""
    total = 0
    for container in pod_spec.get("containers") or ():
        resources = (container or {}).get("resources") or {}
        value = (resources.get("limits") or {}).get(GPU, (resources.get("requests") or {}).get(GPU))
        total += (count(value) or 0) if value is not None else 0
    return total


def pool_use(
    nodes: Sequence[Mapping[str, Any]], pods: Sequence[PodState], ours: Set[tuple[str, str]]
) -> dict[str, PoolUse]:
    """NodePool -> what nodes holding other pods' GPUs use of its limits (see the module
    docstring); `ours` are gpufleet's pods as (namespace, name). Finished pods hold
    nothing; a node without a readable GPU capacity counts its pods' requests."""
    others: dict[str, int] = {}
    ours_on: set[str] = set()  # nodes holding any of gpufleet's pods
    for pod in pods:
        if not pod.node or pod.finished:
            continue
        if (pod.namespace, pod.name) in ours:
            ours_on.add(pod.node)
        elif pod.gpus > 0:
            others[pod.node] = others.get(pod.node, 0) + pod.gpus
    out: dict[str, PoolUse] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        pool = (meta.get("labels") or {}).get(POOL_LABEL, "")
        requested = others.get(meta.get("name", ""), 0)
        if not pool or requested == 0:
            continue
        status = node.get("status") or {}
        capacity = count((status.get("capacity") or {}).get(GPU, "")) or requested
        whole = meta.get("name", "") not in ours_on
        use = out.get(pool, PoolUse())
        out[pool] = PoolUse(
            gpus=use.gpus + (max(capacity, requested) if whole else min(capacity, requested)),
            nodes=use.nodes + whole,
        )
    return out


def pool_node(node: Mapping[str, Any]) -> dict[str, Any]:
    """What this module reads of a Node, the rest left out: a Node's status also lists its
    images and more, often tens of KB, and the autoscaler keeps every pool node."""

    def kept(part: str, keys: tuple[str, ...]) -> dict[str, Any]:
        found = node.get(part) or {}
        return {k: found[k] for k in keys if k in found}

    if not isinstance(node.get("metadata"), Mapping):
        raise ValueError("a Node without metadata")
    return {
        "metadata": kept("metadata", ("name", "labels", "deletionTimestamp")),
        "spec": kept("spec", ("unschedulable", "taints")),
        "status": kept("status", ("capacity", "allocatable", "conditions")),
    }


def free_gpus(
    nodepools: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[PodState],
) -> dict[str, tuple[int, ...]]:
    """NodePool -> each of its nodes' GPUs that no pod holds, for the nodes a new pod can
    land on now: Ready, schedulable, not being deleted nor kept off by Karpenter. A node
    Karpenter keeps through `consolidateAfter` once it empties is billed all the while,
    and a replica placed there starts without waiting for a node. Terminating pods hold
    their GPUs until they are gone; finished ones hold nothing. Every NodePool has an
    entry, () where none of its nodes takes pods."""
    held: dict[str, int] = {}
    for pod in pods:
        if pod.node and not pod.finished and pod.gpus > 0:
            held[pod.node] = held.get(pod.node, 0) + pod.gpus
    out: dict[str, list[int]] = {(p.get("metadata") or {}).get("name", ""): [] for p in nodepools}
    for node in nodes:
        meta, spec, status = (
            node.get("metadata") or {},
            node.get("spec") or {},
            node.get("status") or {},
        )
        free = out.get((meta.get("labels") or {}).get(POOL_LABEL, ""))
        if free is None or not _takes_pods(meta, spec, status):
            continue
        capacity = (status.get("capacity") or {}).get(GPU, "")
        gpus = count((status.get("allocatable") or {}).get(GPU, capacity)) or 0
        free.append(max(0, gpus - held.get(meta.get("name", ""), 0)))
    out.pop("", None)
    return {pool: tuple(free) for pool, free in out.items()}


def _takes_pods(
    meta: Mapping[str, Any], spec: Mapping[str, Any], status: Mapping[str, Any]
) -> bool:
    if meta.get("deletionTimestamp") or spec.get("unschedulable"):
        return False
    if any((t or {}).get("key") in KEEP_OFF_TAINTS for t in spec.get("taints") or ()):
        return False
    return any(
        (c or {}).get("type") == "Ready" and (c or {}).get("status") == "True"
        for c in status.get("conditions") or ()
    )


def node_groups(
    nodepools: Sequence[Mapping[str, Any]],
    demands: Sequence[PoolDemand],
    used: Mapping[str, PoolUse] | None = None,
):
    """The NodePools as node groups, less what `used` says other pods' nodes hold; a
    pool's node size is the largest any GPUAutoscaler naming it gives, else the largest
    replica planned there."""
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
        use = (used or {}).get(name, PoolUse())
        groups.append(
            NodeGroup(
                name=name,
                gpus_per_node=per_node,
                max_nodes=max_nodes if max_nodes is not None else 1_000_000,
                weight=weight if isinstance(weight, int) else 0,
                max_gpus=count(limits[GPU]) if GPU in limits else None,
                used_gpus=use.gpus,
                used_nodes=use.nodes,
            )
        )
    return tuple(groups)


def pool_headroom(
    nodepools: Sequence[Mapping[str, Any]],
    demands: Sequence[PoolDemand],
    used: Mapping[str, PoolUse] | None = None,
) -> dict[str, Headroom]:
    """Workload -> the headroom its NodePool's limits leave it, from one plan of every
    workload's replicas and headroom, after what other pods' nodes `used` (`pool_use`).
    A workload naming no pool may hold headroom in several (the plan spills it down the
    weights). A workload `on_nodepool` does not cover keeps all it asked for (a pool that
    is not there may be a Cluster Autoscaler node group)."""
    planned = [d for d in demands if on_nodepool(d, nodepools)]
    groups = node_groups(nodepools, planned, used)
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
    held: dict[str, list[PlaceholderPods]] = {}
    for p in plan.placeholders:
        held.setdefault(p.workload, []).append(p)
    for workload, parts in held.items():
        granted = sum(p.replicas for p in parts)
        wanted = out[workload].wanted
        message = ""
        if granted < wanted:  # every pool tried says why it held less
            message = "; ".join(
                r
                for p in parts
                if p.replicas < p.wanted
                for r in plan.reasons
                if r.startswith(f"{workload}: {p.node_group} has room")
            )
        pools = ", ".join(p.node_group for p in parts if p.replicas) or parts[0].node_group
        out[workload] = Headroom(granted=granted, wanted=wanted, node_pool=pools, message=message)
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
