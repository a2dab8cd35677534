"""The nodes a workload already pays for, counted in its replicas.

A node bills every GPU from launch until it is removed, an emptied one through its idle
time. So a replica on a GPU idle there costs nothing more, while a replica that needs a new
node serves only a node lead time (provisioning plus a cold start) after it is asked for.
The `gpufleet` policy fills nodes, takes surges and waits for nodes by these counts, and
sizes a backlog by what a new node's replicas would meet. Pure.
"""

import math

from gpufleet.autoscaler.core.backlog import queue_at
from gpufleet.autoscaler.core.observation import Observation, ReplicaState
from gpufleet.autoscaler.core.workload import ShapeKind, WorkloadConfig


def per_node(workload: WorkloadConfig) -> int:
    """Whole-GPU replicas per node of the workload's pool; 0 when unknown or shared."""
    shape = workload.shape
    if shape.kind is not ShapeKind.GPU:
        return 0
    return workload.gpus_per_node // shape.gpus


def filled(desired: int, workload: WorkloadConfig) -> int:
    """`desired` rounded up to whole nodes' worth of replicas (whole-GPU shapes only)."""
    per = per_node(workload)
    if per < 1 or desired <= 0:
        return desired
    return min(workload.max_replicas, math.ceil(desired / per) * per)


def idle_replicas(
    obs: Observation, workload: WorkloadConfig, *, placeholders: int, emptied_nodes: bool = False
) -> int:
    """Replicas that fit on the GPUs idle on nodes paid for: those of the nodes that the
    replicas (terminating ones too, until they drain) and `placeholders` occupy, if
    packed; with `emptied_nodes`, more where the observation shows its pool's ready
    nodes' free GPUs (a node emptied a while ago is billed until it is removed)."""
    per = per_node(workload)
    if per < 1:
        return 0
    held = len(obs.replicas) + placeholders
    packed = math.ceil(held / per) * per - held
    if obs.node_free_gpus is None or not emptied_nodes:
        return packed
    g = workload.shape.gpus
    return max(packed, sum(free // g for free in obs.node_free_gpus))


def paid_replicas(
    obs: Observation, workload: WorkloadConfig, *, placeholders: int, emptied_nodes: bool = False
) -> int:
    """Replicas the nodes paid for hold: those asked for, and the idle GPUs' worth."""
    idle = idle_replicas(obs, workload, placeholders=placeholders, emptied_nodes=emptied_nodes)
    return obs.current_replicas + idle


def queue_left(
    obs: Observation,
    workload: WorkloadConfig,
    *,
    interval_seconds: float,
    queue: float,
    level: float,
    unit: float,
    paid: int,
) -> float:
    """The queue when replicas asked for now on a new node serve, a node lead from now
    (`backlog.queue_at`): the ready replicas serve until then, each starting one a cold
    start after it got its node, or, still waiting for one, its own node lead after it
    was asked for (no sooner than a cold start and a tick from now: it may still be
    loading), and those this tick adds on idle paid GPUs (`paid` replicas in all) from a
    cold start and a tick.
    Each at what a ready replica completes now, where the replicas report it: with a
    queue they are saturated, and that is their real rate on this traffic's prompts,
    which the credited learned rate (`unit`) averages over calmer times."""
    lead = workload.node_lead_seconds
    cold = workload.cold_start_seconds + interval_seconds
    ready = obs.count(ReplicaState.READY)
    served = obs.completion_rate.latest()
    per = served / ready if ready and served else unit
    arriving = [
        (
            max(r.created + lead - obs.now, cold)
            if r.scheduled_since is None
            else r.scheduled_since + workload.cold_start_seconds - obs.now,
            per,
        )
        for r in obs.replicas
        if r.state is ReplicaState.STARTING
    ]
    arriving.append((cold, (paid - obs.current_replicas) * per))
    return queue_at(
        queue,
        arrival_rps=level,
        serving_rps=ready * per,
        arriving=arriving,
        horizon_seconds=lead,
    )
