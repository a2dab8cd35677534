"""Targets of any kind with a scale subresource, found through the API's discovery: a kind
it does not find is asked for again a minute later, not at every tick of every workload
naming it."""

from collections.abc import Iterator

import pytest
from helpers.kube import api_client, create_scaled_object
from kubernetes import client

from gpufleet.autoscaler.core.spec import TargetRef
from gpufleet.autoscaler.kube.cluster import DISCOVERY_RETRY_SECONDS, Cluster
from gpufleet.kube.errors import KubeError, KubeErrorKind, kube_call
from gpufleet.lab.kubeapi.server import FakeApiServer

NS = "llm"


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def _discoveries(server: FakeApiServer, path: str) -> int:
    return sum(1 for r in server.requests if r.method == "GET" and r.path == path)


@pytest.mark.parametrize(
    ("api_version", "kind", "path"),
    [
        # the plural for the kind: its group is served, the kind is not
        ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSets", "/apis/leaderworkerset.x-k8s.io/v1"),
        ("rollouts.example.com/v1", "Rollout", "/apis/rollouts.example.com/v1"),  # no group
    ],
)
def test_a_kind_discovery_did_not_find_is_asked_for_again_after_a_minute(
    server: FakeApiServer, api_version: str, kind: str, path: str
) -> None:
    now = [0.0]
    with api_client(server.url) as api:
        cluster = Cluster(api, clock=lambda: now[0])
        target = TargetRef(api_version=api_version, kind=kind, name="llama-70b")
        for _ in range(3):  # three ticks
            with pytest.raises(KubeError) as raised:
                cluster.read_scale(NS, target)
            assert raised.value.kind is KubeErrorKind.NOT_FOUND
            group_version = path.removeprefix("/apis/")
            assert str(raised.value) == (
                f"no resource of kind {kind} with a scale subresource in {group_version}"
            )
        assert _discoveries(server, path) == 1
        now[0] = DISCOVERY_RETRY_SECONDS
        with pytest.raises(KubeError):
            cluster.read_scale(NS, target)
        assert _discoveries(server, path) == 2


def _leader_worker_set(api: client.ApiClient) -> TargetRef:
    """The namespace and a LeaderWorkerSet `llama-70b` of 3 replicas; the target naming it."""
    client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "leaderworkerset.x-k8s.io",
        "v1",
        NS,
        "leaderworkersets",
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "llama-70b"},
            "spec": {"replicas": 3},
        },
    )
    return TargetRef(
        api_version="leaderworkerset.x-k8s.io/v1", kind="LeaderWorkerSet", name="llama-70b"
    )


def test_a_kind_found_is_never_asked_for_again(server: FakeApiServer) -> None:
    with api_client(server.url) as api:
        target = _leader_worker_set(api)
        cluster = Cluster(api)
        assert [cluster.read_scale(NS, target).replicas for _ in range(3)] == [3, 3, 3]
    assert _discoveries(server, "/apis/leaderworkerset.x-k8s.io/v1") == 1


def test_a_scaled_object_of_any_shape_is_read_or_left_out(server: FakeApiServer) -> None:
    """A ScaledObject whose spec is a string (its CRD's schema looser than KEDA assumes):
    the view raised, and no workload was decided."""
    with api_client(server.url) as api:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
        for name, spec in (("junk", "spec"), ("ref", {"scaleTargetRef": "vllm"})):
            create_scaled_object(api, NS, name, spec)
        competitors = Cluster(api).view().competitors
    assert set(competitors) == {(NS, "Deployment", "")}  # no target has an empty name


def test_an_answer_nested_too_deeply_is_a_kube_error() -> None:
    """A status.learned nested 2,000 deep (preserve-unknown-fields; the API takes 10,000)
    raised RecursionError out of the list call, and the daemon exited."""

    def deep() -> None:
        raise RecursionError("maximum recursion depth exceeded")

    with pytest.raises(KubeError) as raised:
        kube_call(deep)
    assert raised.value.kind is KubeErrorKind.UNAVAILABLE
    assert str(raised.value) == "an answer nested too deeply to read"


def test_an_api_error_in_discovery_is_no_missing_kind(server: FakeApiServer) -> None:
    """call_api raises on no status: a 503 read as an empty resource list said the kind
    was not served, the target counted as gone (its headroom released), and, cached, for a
    minute. It is an API error, asked again at the next call."""
    with api_client(server.url) as api:
        target = _leader_worker_set(api)
        cluster = Cluster(api, clock=lambda: 0.0)
        server.faults.fail_code, server.faults.fail_next = 503, 1
        with pytest.raises(KubeError) as raised:
            cluster.read_scale(NS, target)
        assert raised.value.kind is KubeErrorKind.UNAVAILABLE
        assert cluster.read_scale(NS, target).replicas == 3  # the clock has not moved
