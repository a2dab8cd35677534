"""The controller's view kept by watches is the view a tick's lists give, through every kind
of write a cluster sees; and a placeholder made since the view was taken is still its own."""

from collections import Counter
from collections.abc import Iterator

import pytest
from helpers import wait_for
from helpers.kube import api_client, create_autoscaler, create_vllm
from kubernetes import client

from gpufleet.autoscaler.core.placeholders import placeholder_deployment
from gpufleet.autoscaler.kube.cluster import Cluster
from gpufleet.kube.errors import KubeError, KubeErrorKind
from gpufleet.lab.kubeapi.server import FakeApiServer

NS = "llm"
SPEC = {"scaleTargetRef": {"kind": "Deployment", "name": "vllm"}, "maxReplicas": 4}


@pytest.fixture
def api() -> Iterator[client.ApiClient]:
    with FakeApiServer() as server, api_client(server.url) as api:
        yield api


def test_the_watched_view_is_the_listed_view_through_every_write(api) -> None:
    listed, watched = Cluster(api), Cluster(api, watch=True)
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    autoscaling = client.AutoscalingV2Api(api)

    def same() -> bool:
        return watched.view() == listed.view()

    try:
        assert same()  # the empty cluster
        writes = [
            lambda: create_vllm(api, NS, replicas=2, ready_pod="vllm-0"),
            lambda: create_autoscaler(api, NS, SPEC),
            lambda: apps.patch_namespaced_deployment_scale("vllm", NS, {"spec": {"replicas": 3}}),
            lambda: autoscaling.create_namespaced_horizontal_pod_autoscaler(
                NS,
                {
                    "metadata": {"name": "rival"},
                    "spec": {
                        "scaleTargetRef": {
                            "apiVersion": "apps/v1",
                            "kind": "Deployment",
                            "name": "vllm",
                        },
                        "maxReplicas": 3,
                    },
                },
            ),
            lambda: core.patch_namespaced_pod(
                "vllm-0",
                NS,
                {"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "5"}}},
            ),
            lambda: core.delete_namespaced_pod("vllm-0", NS),  # graceful: deletionTimestamp
            lambda: core.delete_namespaced_pod("vllm-0", NS, grace_period_seconds=0),
            lambda: autoscaling.delete_namespaced_horizontal_pod_autoscaler("rival", NS),
            lambda: apps.delete_namespaced_deployment("vllm", NS),
        ]
        for write in writes:
            write()
            wait_for(same, what="the watched view to catch up")
        view = watched.view()
        assert [a["metadata"]["name"] for a in view.autoscalers] == ["chat"]
        assert view.pods == [] and view.scales == {} and view.competitors == {}
    finally:
        watched.close()


def test_a_placeholder_made_since_the_view_was_taken_is_merged_not_refused(api) -> None:
    """A watch trails the API server: a tick may create a placeholder Deployment that the
    previous tick made. Its own, by its label, so merged; a user's of that name refused."""
    create_vllm(api, NS)
    cluster = Cluster(api)

    def body(autoscaler: str, replicas: int) -> dict:
        return placeholder_deployment(
            namespace=NS,
            autoscaler=autoscaler,
            autoscaler_uid=f"uid-{autoscaler}",
            replicas=replicas,
            template_spec={"containers": [{"name": "vllm", "image": "vllm"}]},
        )

    cluster.write_placeholders(body("chat", 1), exists=False)
    cluster.write_placeholders(body("chat", 3), exists=False)
    apps = client.AppsV1Api(api)
    assert apps.read_namespaced_deployment("chat-placeholder", NS).spec.replicas == 3
    users = body("mine", 1)
    users["metadata"] = {"name": users["metadata"]["name"]}  # a user's own, of that name
    apps.create_namespaced_deployment(NS, users)
    with pytest.raises(KubeError) as refused:
        cluster.write_placeholders(body("mine", 2), exists=False)
    assert refused.value.kind is KubeErrorKind.CONFLICT
    assert "exists and gpufleet did not make it" in str(refused.value)
    assert apps.read_namespaced_deployment("mine-placeholder", NS).spec.replicas == 1


def test_the_watches_failures_are_counted_and_a_restarted_server_caught_up() -> None:
    with FakeApiServer() as server, api_client(server.url) as api:
        cluster = Cluster(api, watch=True)
        try:
            assert cluster.view().pods == []
            server.stop()
            seen: Counter[str] = Counter()

            def failed_each() -> bool:
                seen.update(cluster.take_watch_failures())
                return seen["kube_unavailable"] >= 5  # each of the five watches

            wait_for(failed_each, what="every watch's failure counted")
            server.start()
            create_vllm(api, NS, ready_pod="vllm-0")
            wait_for(lambda: [p.name for p in cluster.view().pods] == ["vllm-0"])
        finally:
            cluster.close()
