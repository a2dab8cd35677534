"""The controller's view kept by watches is the view a tick's lists give, through every kind
of write a cluster sees, custom resources and the pools' nodes included; a CRD installed
later is found; and a placeholder made since the view was taken is still its own."""

from collections import Counter
from collections.abc import Iterator

import pytest
from helpers import wait_for
from helpers.kube import api_client, create_autoscaler, create_vllm
from kubernetes import client

from gpufleet.autoscaler.core.buffers import capacity_buffer, pod_template
from gpufleet.autoscaler.core.placeholders import placeholder_deployment
from gpufleet.autoscaler.kube.cluster import Cluster
from gpufleet.kube import reflector as reflector_module
from gpufleet.kube.errors import KubeError, KubeErrorKind
from gpufleet.lab.kubeapi.server import FakeApiServer

NS = "llm"
SPEC = {"scaleTargetRef": {"kind": "Deployment", "name": "vllm"}, "maxReplicas": 4}


BUFFERS = "capacitybuffers.autoscaling.x-k8s.io"
BUFFER = ("autoscaling.x-k8s.io", "v1beta1", NS, "capacitybuffers")
KARPENTER, KUEUE, KEDA = (
    ("karpenter.sh", "v1"),
    ("kueue.x-k8s.io", "v1beta2"),
    ("keda.sh", "v1alpha1"),
)


@pytest.fixture
def api() -> Iterator[client.ApiClient]:
    with FakeApiServer(install=(BUFFERS,)) as server, api_client(server.url) as api:
        yield api


def pool_node(name: str, gpus: int) -> dict:
    """A node Karpenter launched, with the images list a real Node's status carries."""
    return {
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "gpu"}},
        "status": {
            "capacity": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
            "images": [
                {"names": [f"registry.example.com/img-{i}"], "sizeBytes": i} for i in range(50)
            ],
        },
    }


def custom_writes(api: client.ApiClient) -> list:
    """A write of each custom resource and node a tick reads where Karpenter is installed."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    nodepool = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"}}
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "j"},
    }
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "f"},
    }
    scaled = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "rival-keda"},
        "spec": {"scaleTargetRef": {"name": "vllm"}},
    }
    buffer = capacity_buffer(namespace=NS, autoscaler="chat", autoscaler_uid="u", replicas=2)
    return [
        lambda: custom.create_cluster_custom_object(*KARPENTER, "nodepools", nodepool),
        lambda: core.create_node(pool_node("gpu-1", 8)),
        lambda: core.patch_node("gpu-1", {"spec": {"unschedulable": True}}),
        lambda: custom.create_namespaced_custom_object(*KUEUE, NS, "workloads", workload),
        lambda: custom.create_cluster_custom_object(*KUEUE, "resourceflavors", flavor),
        lambda: custom.create_namespaced_custom_object(*KEDA, NS, "scaledobjects", scaled),
        lambda: custom.create_namespaced_custom_object(*BUFFER, buffer),
        lambda: custom.patch_namespaced_custom_object(
            *BUFFER, "chat-placeholder", {"spec": {"replicas": 0}}
        ),
        lambda: custom.delete_namespaced_custom_object(*KEDA, NS, "scaledobjects", "rival-keda"),
    ]


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
            *custom_writes(api),
            lambda: apps.delete_namespaced_deployment("vllm", NS),
        ]
        for write in writes:
            write()
            wait_for(same, what="the watched view to catch up")
        view = watched.view()
        assert [a["metadata"]["name"] for a in view.autoscalers] == ["chat"]
        assert view.pods == [] and view.scales == {} and view.competitors == {}
        assert view.buffers == {(NS, "chat"): 0}
        assert [p["metadata"]["name"] for p in view.nodepools] == ["gpu"]
        assert [len(view.kueue_workloads), len(view.kueue_flavors)] == [1, 1]
        (node,) = view.pool_nodes  # what the node plan reads of it, its images left out
        assert node == {
            "metadata": {"name": "gpu-1", "labels": {"karpenter.sh/nodepool": "gpu"}},
            "spec": {"unschedulable": True},
            "status": {
                "capacity": {"nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    finally:
        watched.close()


@pytest.mark.parametrize("watch_list", [True, False])
def test_every_collection_custom_resources_included_is_streamed_where_the_server_can(
    watch_list,
) -> None:
    """Each of the eleven collections is read first by a streaming list, not a list: the
    custom resources too (the official client's CustomObjectsApi cannot ask for one). A
    server without WatchList (422) has each listed instead."""
    with (
        FakeApiServer(install=(BUFFERS,), watch_list=watch_list) as server,
        api_client(server.url) as api,
    ):
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
        for write in custom_writes(api)[:4]:  # a NodePool, a node, a Workload
            write()
        cluster = Cluster(api, watch=True)
        try:
            cluster.view()  # Kueue's and the pool nodes' reflectors start too
        finally:
            cluster.close()
        reads: dict[str, list[str]] = {}
        for r in server.requests:
            if r.method in ("GET", "WATCH"):
                streamed = "sendInitialEvents=true" in r.query
                reads.setdefault(r.path, []).append("stream" if streamed else r.method)
    assert len(reads) == 11
    expected = ["stream"] if watch_list else ["stream", "GET", "WATCH"]
    assert {path: seen[: len(expected)] for path, seen in reads.items()} == dict.fromkeys(
        reads, expected
    )


def test_a_crd_installed_later_is_found(monkeypatch) -> None:
    """Not installed, a CRD's list is 404, which is an answer (none), not a failure; it is
    looked for again, so one applied later is read."""
    monkeypatch.setattr(reflector_module, "ABSENT_RETRY_SECONDS", 0.1)
    with FakeApiServer() as server, api_client(server.url) as api:
        cluster = Cluster(api, watch=True)
        try:
            assert cluster.view().buffers is None
            server.install(BUFFERS)
            client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                *BUFFER,
                {
                    "apiVersion": "autoscaling.x-k8s.io/v1beta1",
                    "kind": "CapacityBuffer",
                    "metadata": {"name": "someone-elses"},
                    "spec": {"replicas": 1},
                },
            )
            wait_for(lambda: cluster.view().buffers == {}, what="the CRD found")
            assert cluster.take_watch_failures() == Counter()  # a 404 is no failure
        finally:
            cluster.close()


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


def test_a_buffer_made_since_the_view_was_taken_is_merged_not_refused(api) -> None:
    """The same for a CapacityBuffer: its own, by its label, patched; a user's refused."""
    create_vllm(api, NS)
    cluster = Cluster(api)

    def write(autoscaler: str, replicas: int) -> None:
        owner = {"namespace": NS, "autoscaler": autoscaler, "autoscaler_uid": f"uid-{autoscaler}"}
        template = pod_template(
            **owner, template_spec={"containers": [{"name": "c", "image": "i"}]}
        )
        cluster.write_buffer(template, capacity_buffer(**owner, replicas=replicas), exists=False)

    custom = client.CustomObjectsApi(api)
    write("chat", 1)
    write("chat", 3)
    assert custom.get_namespaced_custom_object(*BUFFER, "chat-placeholder")["spec"]["replicas"] == 3
    users = {"apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer"}
    custom.create_namespaced_custom_object(
        *BUFFER, {**users, "metadata": {"name": "mine-placeholder"}, "spec": {"replicas": 1}}
    )
    with pytest.raises(KubeError, match="exists and gpufleet did not make it"):
        write("mine", 2)
    assert custom.get_namespaced_custom_object(*BUFFER, "mine-placeholder")["spec"]["replicas"] == 1


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
