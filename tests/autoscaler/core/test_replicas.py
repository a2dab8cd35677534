"""Pods as replica states, and deletion costs that empty the emptiest node first."""

import pytest

from gpufleet.autoscaler.core.observation import ReplicaState
from gpufleet.autoscaler.core.replicas import PodState, deletion_costs, hpa_ready, replica_of


@pytest.mark.parametrize(
    ("pod", "state", "since"),
    [
        pytest.param(
            PodState(namespace="a", name="p", created=10.0),
            ReplicaState.STARTING,
            10.0,
            id="not-ready-is-starting",
        ),
        pytest.param(
            PodState(namespace="a", name="p", created=10.0, ready_since=70.0),
            ReplicaState.READY,
            70.0,
            id="ready",
        ),
        pytest.param(
            PodState(namespace="a", name="p", created=10.0, ready_since=70.0, deleting_since=90.0),
            ReplicaState.TERMINATING,
            90.0,
            id="being-deleted-is-terminating-even-if-ready",
        ),
    ],
)
def test_replica_of(pod: PodState, state: ReplicaState, since: float) -> None:
    replica = replica_of(pod)
    assert (replica.state, replica.since, replica.created) == (state, since, 10.0)


def test_a_starting_replica_says_when_it_got_its_node() -> None:
    waiting = replica_of(PodState(namespace="a", name="p", created=10.0))
    bound = replica_of(PodState(namespace="a", name="p", created=10.0, scheduled_since=40.0))
    assert waiting.scheduled_since is None and bound.scheduled_since == 40.0


def test_deletion_costs_make_the_emptiest_node_lose_its_pods_first() -> None:
    pods = [
        PodState(namespace="a", name="full-1", node="n1"),
        PodState(namespace="a", name="lonely", node="n2", deletion_cost=1),  # already right
        PodState(namespace="a", name="pending"),
        PodState(namespace="a", name="going", node="n1", deleting_since=5.0),
    ]
    assert deletion_costs(pods, {"n1": 7, "n2": 1}) == {"full-1": 7, "pending": 0}


def test_the_hpa_counts_ready_pods_draining_or_not_and_no_finished_one() -> None:
    pods = [
        PodState(namespace="a", name="ready", ready_since=1.0),
        PodState(namespace="a", name="draining", ready_since=1.0, deleting_since=5.0),
        PodState(namespace="a", name="starting"),
        PodState(namespace="a", name="evicted", finished=True),
    ]
    assert hpa_ready(pods) == 2
