"""Kueue's pending Workloads as GPU demand for the node plan (read only).

A batch job queued in Kueue (`kueue.x-k8s.io` Workload) has no pods yet, so nothing
pending shows its GPUs to the planner; but once admitted its pods land on the same
NodePools as the serving replicas, inside the same limits. Each pod set of a Workload
that is neither admitted nor finished (nor deactivated) counts as `count` replicas of its
pod template's GPUs, on the node pool its template pins (`karpenter.sh/nodepool` in the
nodeSelector) or, where Kueue reserved quota in a flavor, the pool that flavor's
`nodeLabels` pin; else on the highest-weight pool. gpufleet never writes to Kueue.

Pure: plain dicts in, `PoolDemand`s out.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.autoscaler.core.nodepools import GPU, POOL_LABEL, PoolDemand, pod_gpus
from gpufleet.autoscaler.core.workload import GpuShape


def pending_demands(
    workloads: Sequence[Mapping[str, Any]], flavors: Sequence[Mapping[str, Any]]
) -> list[PoolDemand]:
    """One demand per GPU-requesting pod set of each pending Workload; a malformed one
    is skipped (the rest still count)."""
    pools = {
        (f.get("metadata") or {}).get("name", ""): (
            (f.get("spec") or {}).get("nodeLabels") or {}
        ).get(POOL_LABEL, "")
        for f in flavors
    }
    out = []
    for wl in workloads:
        if not _pending(wl):
            continue
        meta = wl.get("metadata") or {}
        name = f"kueue:{meta.get('namespace', '')}/{meta.get('name', '')}"
        assigned = {
            a.get("name", "main"): (a.get("flavors") or {}).get(GPU, "")
            for a in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments")
            or ()
            if isinstance(a, dict)
        }
        for pod_set in (wl.get("spec") or {}).get("podSets") or ():
            if not isinstance(pod_set, dict):
                continue
            spec = (pod_set.get("template") or {}).get("spec") or {}
            gpus = pod_gpus(spec)
            replicas = pod_set.get("count")
            if not gpus or not isinstance(replicas, int) or replicas <= 0:
                continue
            set_name = pod_set.get("name") or "main"
            pool = (spec.get("nodeSelector") or {}).get(POOL_LABEL) or pools.get(
                assigned.get(set_name, ""), ""
            )
            out.append(
                PoolDemand(
                    workload=f"{name}/{set_name}",
                    node_pool=pool,
                    shape=GpuShape(gpus=gpus),
                    replicas=replicas,
                    headroom=0,
                )
            )
    return out


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
