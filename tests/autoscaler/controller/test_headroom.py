"""The NodePool plan of a tick (`fit_to_nodepools`): every workload's replicas and headroom
planned together against the pool's limits, the busy ones' too."""

from helpers.autoscalers import workload

from gpufleet.autoscaler.controller.headroom import fit_to_nodepools
from gpufleet.autoscaler.controller.workload import Tick
from gpufleet.autoscaler.kube.cluster import ClusterView

POOL = {"metadata": {"name": "h100"}, "spec": {"limits": {"nvidia.com/gpu": "16"}}}


def on_pool(namespace: str, *, replicas: int, headroom: int) -> Tick:
    w = workload(namespace, nodePool={"name": "h100", "gpusPerNode": 8})
    w.decided, w.headroom = replicas, headroom
    return Tick(workload=w, headroom=headroom)


def test_a_busy_workloads_headroom_stays_in_the_plan() -> None:
    """b's step still writes (busy): its 4 replicas and 4 of headroom hold 8 of the pool's 16
    GPUs all the same. Planned without them, a was granted all 8 it asked for, and the two
    held 20 GPUs' worth of a 16-GPU pool."""
    view = ClusterView(autoscalers=[], pods=[], scales={}, competitors={}, nodepools=[POOL])
    a = on_pool("a", replicas=4, headroom=8)
    b = on_pool("b", replicas=4, headroom=4)
    fit_to_nodepools([a], view, [], undecided=[b])
    assert a.headroom == 4
    assert b.headroom == 4 and b.health.node_pool_limit == ""  # left as it was: not written
