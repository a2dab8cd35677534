"""The nodes a workload pays for, in replicas (`paid_nodes`): table-driven."""

import pytest

from gpufleet.autoscaler.core import paid_nodes
from gpufleet.autoscaler.core.observation import Observation, Replica, ReplicaState
from gpufleet.autoscaler.core.workload import GpuShape, ShapeKind, WorkloadConfig

NODE_OF_8 = WorkloadConfig(name="llm", max_replicas=50, gpus_per_node=8)


def observe(
    *, ready: int = 0, starting: int = 0, terminating: int = 0, free: tuple[int, ...] | None = None
) -> Observation:
    states = (
        [ReplicaState.READY] * ready
        + [ReplicaState.STARTING] * starting
        + [ReplicaState.TERMINATING] * terminating
    )
    return Observation(
        now=0.0,
        replicas=tuple(
            Replica(name=f"r{i}", state=state, since=0.0, created=0.0)
            for i, state in enumerate(states)
        ),
        node_free_gpus=free,
    )


@pytest.mark.parametrize(
    ("workload", "want"),
    [
        pytest.param(NODE_OF_8, 8, id="one-gpu replicas on 8-gpu nodes"),
        pytest.param(
            WorkloadConfig(name="llm", gpus_per_node=8, shape=GpuShape(gpus=2)), 4, id="tp2"
        ),
        pytest.param(WorkloadConfig(name="llm"), 0, id="node size unknown"),
        pytest.param(
            WorkloadConfig(
                name="llm", gpus_per_node=8, shape=GpuShape(kind=ShapeKind.MIG, mig_profile="1g")
            ),
            0,
            id="a mig slice is not a whole gpu",
        ),
    ],
)
def test_replicas_per_node(workload: WorkloadConfig, want: int) -> None:
    assert paid_nodes.per_node(workload) == want


@pytest.mark.parametrize(
    ("desired", "want"),
    [
        pytest.param(9, 16, id="rounded up to whole nodes"),
        pytest.param(16, 16, id="whole nodes stay"),
        pytest.param(0, 0, id="zero stays zero"),
        pytest.param(49, 50, id="never above max_replicas"),
    ],
)
def test_filled_to_whole_nodes(desired: int, want: int) -> None:
    assert paid_nodes.filled(desired, NODE_OF_8) == want


def test_filled_leaves_an_unknown_node_size_alone() -> None:
    assert paid_nodes.filled(9, WorkloadConfig(name="llm")) == 9


@pytest.mark.parametrize(
    ("obs", "placeholders", "emptied_nodes", "want"),
    [
        pytest.param(observe(ready=9), 0, False, 7, id="the rest of the second node"),
        pytest.param(observe(ready=8), 0, False, 0, id="full nodes leave none"),
        pytest.param(observe(ready=6, starting=3), 0, False, 7, id="starting replicas hold"),
        pytest.param(observe(ready=6, terminating=2), 0, False, 0, id="draining ones too"),
        pytest.param(observe(ready=6), 2, False, 0, id="placeholders' gpus are not idle"),
        pytest.param(
            observe(ready=8, free=(0, 8)), 0, False, 0, id="an emptied node, not asked for"
        ),
        pytest.param(
            observe(ready=8, free=(0, 8)), 0, True, 8, id="an emptied node is billed until it goes"
        ),
        pytest.param(observe(ready=9, free=(1,)), 0, True, 7, id="packing counts when it is more"),
    ],
)
def test_idle_replicas(obs: Observation, placeholders: int, emptied_nodes: bool, want: int) -> None:
    got = paid_nodes.idle_replicas(
        obs, NODE_OF_8, placeholders=placeholders, emptied_nodes=emptied_nodes
    )
    assert got == want
    assert paid_nodes.paid_replicas(
        obs, NODE_OF_8, placeholders=placeholders, emptied_nodes=emptied_nodes
    ) == (obs.current_replicas + want)
