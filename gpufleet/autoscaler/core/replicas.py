"""Replicas as the Kubernetes API shows them: pods to replica states, and which to remove.

A pod being deleted is terminating (draining); one whose Ready condition is True is ready;
any other is starting (scheduled or waiting for a node, pulling, loading weights). On a
scale-down the ReplicaSet controller removes pods with the lowest
`controller.kubernetes.io/pod-deletion-cost` first: the costs here make it take replicas
from the emptiest nodes first, as the replay's cluster does, so a node can empty and go.
Pure.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.autoscaler.core.observation import Replica, ReplicaState

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


@dataclass(frozen=True, slots=True, kw_only=True)
class PodState:
    """What the controller reads of one pod; times are unix seconds."""

    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    node: str = ""
    created: float = 0.0
    ready_since: float | None = None  # the Ready condition's last transition to True
    scheduled_since: float | None = None  # bound to `node` (the PodScheduled condition)
    deleting_since: float | None = None  # metadata.deletionTimestamp
    deletion_cost: int | None = None  # the annotation, when set
    gpus: int = 0  # nvidia.com/gpu it asks for (`nodepools.pod_gpus`)
    finished: bool = False  # status.phase Succeeded or Failed: it holds nothing


def hpa_ready(pods: Sequence[PodState]) -> int:
    """The Ready pods an HPA multiplies a `Value` ratio by (replica_calculator.go's
    `getReadyPodsCount`: phase Running and Ready). Terminating pods count while Ready: the
    kubelet probes readiness until their containers stop."""
    return sum(1 for p in pods if p.ready_since is not None and not p.finished)


def replica_of(pod: PodState) -> Replica:
    if pod.deleting_since is not None:
        state, since = ReplicaState.TERMINATING, pod.deleting_since
    elif pod.ready_since is not None:
        state, since = ReplicaState.READY, pod.ready_since
    else:
        state, since = ReplicaState.STARTING, pod.created
    return Replica(
        name=pod.name,
        state=state,
        since=since,
        created=pod.created,
        scheduled_since=pod.scheduled_since,
    )


def deletion_costs(pods: Sequence[PodState], node_pods: Mapping[str, int]) -> dict[str, int]:
    """Pod name -> deletion cost for a workload's live pods: the number of pods on its node
    (`node_pods`), so the emptiest nodes lose theirs first; unscheduled pods cost 0. Only
    pods whose annotation differs are returned."""
    out = {}
    for pod in pods:
        if pod.deleting_since is not None:
            continue
        cost = node_pods.get(pod.node, 0) if pod.node else 0
        if pod.deletion_cost != cost:
            out[pod.name] = cost
    return out
