"""Kueue's pending Workloads as GPU demand for the node plan (read only).

A batch job queued in Kueue (`kueue.x-k8s.io` Workload) has no pods yet, so nothing
pending shows its GPUs to the planner; but once admitted its pods land on the same
NodePools as the serving replicas, inside the same limits. Each pod set of a Workload
that is neither admitted nor finished (nor deactivated) counts as `count` replicas of its
pod template's GPUs, on the node pool its template pins (`karpenter.sh/nodepool` in the
nodeSelector) or, where Kueue reserved quota in a flavor, the pool that flavor's
`nodeLabels` pin; else on the highest-weight pool. gpufleet never writes to Kueue.

Pure: a Workload's plain dict in, its `QueuedPodSet`s out; those and the flavors in,
`PoolDemand`s out.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.autoscaler.core.nodepools import GPU, POOL_LABEL, PoolDemand, pod_gpus
from gpufleet.autoscaler.core.workload import GpuShape


@dataclass(frozen=True, slots=True)
class QueuedPodSet:
    """One pod set of a pending Workload that asks for GPUs: all the plan reads of it."""

    workload: str  # kueue:namespace/name/pod set
    gpus: int  # one pod's
    replicas: int
    pool: str  # the NodePool its template pins, "" for none
    flavor: str  # the GPU flavor Kueue reserved quota in, "" for none


def queued_pod_sets(wl: Mapping[str, Any]) -> tuple[QueuedPodSet, ...]:
    """A Workload's pod sets still to come that ask for GPUs; () once it is admitted,
    finished or deactivated. The autoscaler keeps this of each Workload, not the Workload:
    each pod set carries a whole pod template, and a batch cluster has thousands. Raises
    (AttributeError, TypeError) for one whose shape it cannot read, which is then left
    out; a pod set or an assignment that is not an object is skipped."""
    if not _pending(wl):
        return ()
    meta = wl.get("metadata") or {}
    name = f"kueue:{meta.get('namespace', '')}/{meta.get('name', '')}"
    assigned = {
        a.get("name", "main"): (a.get("flavors") or {}).get(GPU, "")
        for a in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or ()
        if isinstance(a, dict)
    }
    out = []
    for pod_set in (wl.get("spec") or {}).get("podSets") or ():
        if not isinstance(pod_set, dict):
            continue
        spec = (pod_set.get("template") or {}).get("spec") or {}
        gpus = pod_gpus(spec)
        replicas = pod_set.get("count")
        if not gpus or not isinstance(replicas, int) or replicas <= 0:
            continue
        set_name = pod_set.get("name") or "main"
        out.append(
            QueuedPodSet(
                workload=f"{name}/{set_name}",
                gpus=gpus,
                replicas=replicas,
                pool=str((spec.get("nodeSelector") or {}).get(POOL_LABEL) or ""),
                flavor=str(assigned.get(set_name) or ""),
            )
        )
    return tuple(out)


def pending_demands(
    queued: Iterable[Sequence[QueuedPodSet]], flavors: Sequence[Mapping[str, Any]]
) -> list[PoolDemand]:
    """One demand per queued pod set (`queued`: each Workload's), on the pool its template
    pins, else the one its GPU flavor's `nodeLabels` pin, else "" (the highest-weight)."""
    pools = {
        (f.get("metadata") or {}).get("name", ""): (
            (f.get("spec") or {}).get("nodeLabels") or {}
        ).get(POOL_LABEL, "")
        for f in flavors
    }
    return [
        PoolDemand(
            workload=s.workload,
            node_pool=s.pool or pools.get(s.flavor, ""),
            shape=GpuShape(gpus=s.gpus),
            replicas=s.replicas,
            headroom=0,
        )
        for pod_sets in queued
        for s in pod_sets
    ]


def _pending(wl: Mapping[str, Any]) -> bool:
    """Neither admitted nor finished, and active: its pods are still to come."""
    if (wl.get("spec") or {}).get("active") is False:
        return False
    done = {"Admitted", "Finished"}
    return not any(
        c.get("type") in done and c.get("status") == "True"
        for c in (wl.get("status") or {}).get("conditions") or ()
        if isinstance(c, dict)
    )
