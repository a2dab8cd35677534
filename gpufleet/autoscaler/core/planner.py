"""Capacity planner: replicas across workloads -> GPUs per shape -> nodes per node group.

Pure: the policies say how many replicas each workload needs (and how many warm
placeholders for demand due within node provisioning); this module turns that into what
the cluster must hold, as a frozen `CapacityPlan`. The live controller plans through
`nodepools` to cut each workload's headroom (placeholder pods, CapacityBuffers) to what its
Karpenter NodePool's limits leave; Karpenter or the Cluster Autoscaler then sizes the node
groups from the pods. The simulator packs its nodes with `pack_nodes`. It never reads the
cluster: a node count here is what the demand needs, not what exists.

The three steps:

1. **Replicas -> GPU units.** A unit is what must sit on one GPU (or one node): a
   whole-GPU replica with `gpus` GPUs is one unit of `gpus` GPUs (tensor parallelism keeps
   it on one node); MIG replicas of one profile pack `INSTANCES_PER_GPU_80GB[profile]` per GPU
   (or the node group's layout); time-sliced replicas pack `shares_per_gpu` per GPU.
   Workloads sharing a shape and a node group share GPUs.
2. **Units -> nodes.** First-fit decreasing on GPUs per node, per node group, up to the
   group's cap (`max_nodes`, and a Karpenter NodePool's `spec.limits`); what does not fit
   is reported, not dropped silently.
3. **Headroom.** Placeholder replicas go through the same packing after the real ones, so
   the node count includes the nodes they keep warm. Under a cap, real replicas come
   first and placeholders get what is left, one replica at a time round the workloads:
   a plan never holds capacity the group cannot provide.

A demand that names no group goes to the highest-`weight` group offering its shape, as
Karpenter tries NodePools; the headroom that group cannot hold goes on to the next group
by weight offering the shape (once all its replicas fit), as Karpenter launches a pending
pod's node in the next NodePool when the first is at its limit.
"""

import math
from dataclasses import dataclass, field

from gpufleet.autoscaler.core.workload import GpuShape, ShapeKind
from gpufleet.core.mig_geometry import INSTANCES_PER_GPU_80GB


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeGroup:
    """A node group or Karpenter NodePool of identical GPU nodes."""

    name: str
    gpus_per_node: int = 8
    max_nodes: int = 64
    # A fixed MIG layout every GPU of the group carries, as (profile, slices per GPU), e.g.
    # (("3g.40gb", 1), ("2g.20gb", 1), ("1g.10gb", 1)). Empty: see `mig_per_profile`.
    mig_layout: tuple[tuple[str, int], ...] = ()
    # True: each GPU is partitioned into one profile as demand needs (the GPU operator's
    # mixed strategy, re-partitioned per GPU), at INSTANCES_PER_GPU_80GB. False with no layout:
    # whole GPUs, which also serve time-sliced shares.
    mig_per_profile: bool = False
    weight: int = 0  # Karpenter's spec.weight: higher is tried first
    max_gpus: int | None = None  # Karpenter's spec.limits nvidia.com/gpu; None: no limit
    # What nodes outside the plan (other pods') already count against those limits.
    used_gpus: int = 0
    used_nodes: int = 0

    @property
    def node_cap(self) -> int:
        """The most nodes the plan may give the group: max_nodes, and no more nodes than
        keep its GPU capacity within `max_gpus`, less what is used outside the plan
        (Karpenter launches no node past a limit)."""
        nodes = max(0, self.max_nodes - self.used_nodes)
        if self.max_gpus is None:
            return nodes
        return min(nodes, max(0, self.max_gpus - self.used_gpus) // max(1, self.gpus_per_node))

    @property
    def is_mig(self) -> bool:
        return bool(self.mig_layout) or self.mig_per_profile

    def mig_slices(self, profile: str) -> int:
        """Slices of `profile` per GPU in this group; 0 when it offers none."""
        if self.mig_layout:
            return dict(self.mig_layout).get(profile, 0)
        return INSTANCES_PER_GPU_80GB.get(profile, 0) if self.mig_per_profile else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadDemand:
    """One workload's ask: replicas it needs now plus warm placeholders (`Decision.headroom`)."""

    name: str
    shape: GpuShape = field(default_factory=GpuShape)
    replicas: int = 0
    headroom_replicas: int = 0
    node_group: str = ""  # empty: the first group in order that offers the shape


@dataclass(frozen=True, slots=True, kw_only=True)
class PlaceholderPods:
    """Low-priority pause pods holding GPUs for one workload's predicted demand."""

    workload: str
    node_group: str
    shape: GpuShape
    replicas: int  # what the group has room for
    wanted: int  # what the policy asked for


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeGroupPlan:
    name: str
    nodes: int  # nodes the demand and placeholders need (capped at node_cap)
    gpus_needed: int  # GPUs the units need, placeholders included
    gpus_for_replicas: int  # of which for real replicas
    unplaced_gpus: int  # GPUs that did not fit under max_nodes


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityPlan:
    node_groups: tuple[NodeGroupPlan, ...]
    placeholders: tuple[PlaceholderPods, ...]
    reasons: tuple[str, ...]  # one line per group and per problem, for events and logs

    def nodes(self, group: str) -> int:
        return next((g.nodes for g in self.node_groups if g.name == group), 0)


def plan_capacity(
    demands: tuple[WorkloadDemand, ...], groups: tuple[NodeGroup, ...]
) -> CapacityPlan:
    """The nodes per group that `demands` need, and the placeholder pods to create.

    A workload whose shape no group offers, or naming an unknown group, is skipped and
    named in `reasons` (per-item failure: the other workloads are still planned).
    """
    reasons: list[str] = []
    chosen: dict[str, list[WorkloadDemand]] = {g.name: [] for g in groups}
    by_name = {g.name: g for g in groups}
    by_weight = tuple(sorted(groups, key=lambda g: -g.weight))  # stable: list order within
    for d in demands:
        group = _group_for(d, by_weight, by_name)
        if group is None:
            reasons.append(f"{d.name}: no node group offers {_shape_label(d.shape)}; skipped")
        else:
            chosen[group.name].append(d)
    plans: dict[str, NodeGroupPlan] = {}
    placeholders = []
    for i, g in enumerate(by_weight):  # spill-over only flows to lower weights
        granted = _grant_headroom(g, chosen[g.name])
        plans[g.name] = plan = _plan_group(g, chosen[g.name], granted, reasons)
        if plan.unplaced_gpus == 0:
            _spill(chosen, g, granted, by_weight[i + 1 :])
        placeholders.extend(
            PlaceholderPods(
                workload=d.name,
                node_group=g.name,
                shape=d.shape,
                replicas=granted[d.name],
                wanted=d.headroom_replicas,
            )
            for d in chosen[g.name]
            if d.headroom_replicas > 0
        )
        reasons.extend(
            f"{d.name}: {g.name} has room for {granted[d.name]} of {d.headroom_replicas} "
            f"placeholder replicas ({_cap_label(g)})"
            for d in chosen[g.name]
            if granted[d.name] < d.headroom_replicas
        )
    return CapacityPlan(
        node_groups=tuple(plans[g.name] for g in groups),
        placeholders=tuple(placeholders),
        reasons=tuple(reasons),
    )


def _spill(
    chosen: dict[str, list[WorkloadDemand]],
    group: NodeGroup,
    granted: dict[str, int],
    lower: tuple[NodeGroup, ...],
) -> None:
    """Hand the headroom `group` cannot hold of each demand naming no group to the next
    lower-weight group offering its shape, as placeholders alone (its replicas are here)."""
    for d in chosen[group.name]:
        left = d.headroom_replicas - granted[d.name]
        if d.node_group or left <= 0:
            continue
        nxt = next((g for g in lower if _offers(g, d.shape)), None)
        if nxt is not None:
            chosen[nxt.name].append(
                WorkloadDemand(name=d.name, shape=d.shape, headroom_replicas=left)
            )


def gpu_units(counts: dict[GpuShape, int], group: NodeGroup) -> list[int]:
    """Sizes in GPUs of the units that `counts` (replicas per shape) occupy on `group`.

    Replicas of one MIG profile or one share count pack together whoever they belong to.
    On a fixed MIG layout every GPU carries every profile of the layout, so the GPUs
    needed are the most any one profile needs; per-profile partitioning (one profile per
    GPU) needs the sum.
    """
    units: list[int] = []
    mig_gpus: list[int] = []
    for shape, n in sorted(counts.items(), key=lambda kv: _shape_label(kv[0])):
        if n <= 0:
            continue
        if shape.kind is ShapeKind.GPU:
            units.extend([shape.gpus] * n)
        elif shape.kind is ShapeKind.MIG:
            mig_gpus.append(math.ceil(n / group.mig_slices(shape.mig_profile)))
        else:
            units.extend([1] * math.ceil(n / max(1, shape.shares_per_gpu)))
    if mig_gpus:
        units.extend([1] * (max(mig_gpus) if group.mig_layout else sum(mig_gpus)))
    return units


def pack_nodes(units: list[int], *, gpus_per_node: int) -> list[int]:
    """First-fit decreasing: the GPUs used on each node, in node order.

    Units larger than a node cannot be placed; the caller checks sizes first.
    """
    nodes: list[int] = []
    for size in sorted(units, reverse=True):
        for i, used in enumerate(nodes):
            if used + size <= gpus_per_node:
                nodes[i] = used + size
                break
        else:
            nodes.append(size)
    return nodes


def _group_for(
    d: WorkloadDemand, groups: tuple[NodeGroup, ...], by_name: dict[str, NodeGroup]
) -> NodeGroup | None:
    if d.node_group:
        group = by_name.get(d.node_group)
        return group if group is not None and _offers(group, d.shape) else None
    return next((g for g in groups if _offers(g, d.shape)), None)


def _offers(group: NodeGroup, shape: GpuShape) -> bool:
    if shape.kind is ShapeKind.MIG:
        return group.mig_slices(shape.mig_profile) > 0
    if group.is_mig:
        return False  # partitioned GPUs serve only MIG slices
    return shape.kind is ShapeKind.SHARED or 1 <= shape.gpus <= group.gpus_per_node


def _grant_headroom(group: NodeGroup, demands: list[WorkloadDemand]) -> dict[str, int]:
    """Placeholder replicas per workload that fit under the group's cap after every real
    replica: all of them when they fit, else one at a time round the workloads (in
    order) while the packing stays within the cap."""
    granted = {d.name: d.headroom_replicas for d in demands}

    def fits() -> bool:
        units = _units(group, demands, granted)
        return len(pack_nodes(units, gpus_per_node=group.gpus_per_node)) <= group.node_cap

    if fits():
        return granted
    granted = dict.fromkeys(granted, 0)
    growing = [d for d in demands if d.headroom_replicas > 0]
    while growing:
        for d in list(growing):
            granted[d.name] += 1
            if not fits():
                granted[d.name] -= 1
                growing.remove(d)
            elif granted[d.name] == d.headroom_replicas:
                growing.remove(d)
    return granted


def _plan_group(
    group: NodeGroup, demands: list[WorkloadDemand], granted: dict[str, int], reasons: list[str]
) -> NodeGroupPlan:
    """Pack real replicas first, then the placeholders granted; cap at node_cap."""
    real = _units(group, demands, {})
    total = _units(group, demands, granted)
    gpus_real = sum(real)
    gpus_total = sum(total)
    used = pack_nodes(total, gpus_per_node=group.gpus_per_node)  # GPUs used per node
    nodes = len(used)
    unplaced = 0
    cap = group.node_cap
    if nodes > cap:
        unplaced = gpus_total - sum(used[:cap])
        limit = _cap_label(group)
        reasons.append(
            f"{group.name}: needs {nodes} nodes, capped at {limit}; {unplaced} GPUs unplaced"
        )
        nodes = cap
    if demands:
        reasons.append(
            f"{group.name}: {gpus_real} GPUs for replicas + {gpus_total - gpus_real} for "
            f"placeholders -> {nodes} nodes of {group.gpus_per_node}"
        )
    return NodeGroupPlan(
        name=group.name,
        nodes=nodes,
        gpus_needed=gpus_total,
        gpus_for_replicas=gpus_real,
        unplaced_gpus=unplaced,
    )


def _units(group: NodeGroup, demands: list[WorkloadDemand], headroom: dict[str, int]) -> list[int]:
    """GPU units for the group's replicas plus `headroom` placeholders per workload;
    workloads of one shape share GPUs (MIG slices, shares)."""
    counts: dict[GpuShape, int] = {}
    for d in demands:
        n = d.replicas + headroom.get(d.name, 0)
        counts[d.shape] = counts.get(d.shape, 0) + n
    return gpu_units(counts, group)


def _cap_label(group: NodeGroup) -> str:
    """Which cap binds, and what nodes outside the plan use of it."""
    if group.max_gpus is not None and group.node_cap < group.max_nodes - group.used_nodes:
        used = f", {group.used_gpus} used by other pods' nodes" if group.used_gpus else ""
        return (
            f"limit nvidia.com/gpu {group.max_gpus}{used}: {group.node_cap} nodes of "
            f"{group.gpus_per_node}"
        )
    used = f", {group.used_nodes} used by other pods" if group.used_nodes else ""
    return f"max_nodes {group.max_nodes}{used}"


def _shape_label(shape: GpuShape) -> str:
    if shape.kind is ShapeKind.MIG:
        return f"MIG {shape.mig_profile}"
    if shape.kind is ShapeKind.SHARED:
        return f"1/{shape.shares_per_gpu} shared GPU"
    return f"{shape.gpus} GPU(s)"
