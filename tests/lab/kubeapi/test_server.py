"""The fake API server through the official `kubernetes` client over real HTTP (and kubectl).

What the autoscaler and the coming issues rely on: discovery, a real autoscaling/v1 Scale,
resourceVersion conflicts, Status errors naming the field, selectors, status subresources,
415 for strategic merge on a custom resource, and the fault modes.
"""

import json
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from gpufleet.lab.kubeapi import server as server_module
from gpufleet.lab.kubeapi.server import FakeApiServer

GPA = ("autoscaling.gpufleet.dev", "v1alpha1", "gpuautoscalers")


@pytest.fixture(scope="module")
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer(clock=lambda: 1.7e9) as s:
        yield s


@pytest.fixture
def api(server: FakeApiServer) -> Iterator[client.ApiClient]:
    config = client.Configuration()
    config.host = server.url
    with client.ApiClient(config) as api_client:
        yield api_client


def deployment(name: str, replicas: int = 1) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]},
            },
        },
    }


@pytest.fixture
def vllm_a(api: client.ApiClient) -> None:
    """The Deployment `vllm-a` in the module's server, made by whichever test needs it first:
    xdist may run this module's tests on several workers, each with its own server."""
    try:
        client.AppsV1Api(api).create_namespaced_deployment("default", deployment("vllm-a"))
    except ApiException as err:
        if err.status != 409:
            raise


def pod(name: str, labels: dict, node: str = "") -> dict:
    spec: dict = {"containers": [{"name": "main", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


def test_discovery_lists_core_groups_and_crds(api: client.ApiClient) -> None:
    assert client.CoreApi(api).get_api_versions().versions == ["v1"]
    groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
    assert {"apps", "coordination.k8s.io", "karpenter.sh", "autoscaling.gpufleet.dev"} <= groups
    apps = client.AppsV1Api(api).get_api_resources()
    names = {r.name: r for r in apps.resources}
    assert names["deployments/scale"].kind == "Scale"
    assert client.VersionApi(api).get_code().git_version.startswith("v1.33")


def test_its_root_lists_its_paths_as_kube_apiservers_does(server: FakeApiServer) -> None:
    """The lab prints the API's URL; opened in a browser it was a 404."""
    with urllib.request.urlopen(server.url + "/", timeout=5) as answer:
        paths = json.load(answer)["paths"]
    assert {"/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1", "/version"} <= set(paths)


def test_scale_subresource_is_a_real_autoscaling_v1_scale(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment("default", deployment("vllm-s", replicas=2))
    scale = apps.read_namespaced_deployment_scale("vllm-s", "default")
    assert (scale.kind, scale.api_version) == ("Scale", "autoscaling/v1")
    assert scale.spec.replicas == 2 and scale.status.selector == "app=vllm-s"
    apps.patch_namespaced_deployment_scale("vllm-s", "default", {"spec": {"replicas": 5}})
    d = apps.read_namespaced_deployment("vllm-s", "default")
    assert d.spec.replicas == 5
    assert d.metadata.generation == 2
    assert d.spec.template.spec.containers[0].name == "vllm"


def test_a_stale_resource_version_is_a_409_conflict(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    created = apps.create_namespaced_deployment("default", deployment("vllm-b"))
    stale = created.metadata.resource_version
    apps.patch_namespaced_deployment_scale("vllm-b", "default", {"spec": {"replicas": 3}})
    body = deployment("vllm-b")
    body["metadata"]["resourceVersion"] = stale
    with pytest.raises(ApiException) as err:
        apps.replace_namespaced_deployment("vllm-b", "default", body)
    assert err.value.status == 409 and '"reason":"Conflict"' in err.value.body.replace(" ", "")
    with pytest.raises(ApiException) as err:
        apps.replace_namespaced_deployment_scale(
            "vllm-b",
            "default",
            {"metadata": {"name": "vllm-b", "resourceVersion": stale}, "spec": {"replicas": 1}},
        )
    assert err.value.status == 409


@pytest.mark.parametrize(
    ("call", "code", "text"),
    [
        pytest.param(
            lambda api: client.AppsV1Api(api).read_namespaced_deployment("nope", "default"),
            404,
            'deployments.apps "nope" not found',
            id="missing-object",
        ),
        pytest.param(
            lambda api: client.CoreV1Api(api).create_namespaced_pod("ghost", pod("p", {})),
            404,
            'namespaces "ghost" not found',
            id="missing-namespace",
        ),
        pytest.param(
            lambda api: client.CoreV1Api(api).create_namespaced_pod("default", pod("Bad_Name", {})),
            422,
            "metadata.name",
            id="bad-name-names-the-field",
        ),
        pytest.param(
            lambda api: client.AppsV1Api(api).patch_namespaced_deployment_scale(
                "vllm-a", "default", {"spec": {"replicas": -1}}
            ),
            422,
            "spec.replicas",
            id="negative-scale",
        ),
        pytest.param(
            lambda api: client.AppsV1Api(api).patch_namespaced_deployment(
                "vllm-a", "default", {"spec": {"selector": {"matchLabels": {"app": "other"}}}}
            ),
            422,
            "spec.selector",
            id="deployment-selector-is-immutable",
        ),
    ],
)
@pytest.mark.usefixtures("vllm_a")
def test_errors_are_status_objects(api: client.ApiClient, call, code: int, text: str) -> None:
    with pytest.raises(ApiException) as err:
        call(api)
    status = json.loads(err.value.body)
    assert (status["kind"], status["code"], err.value.status) == ("Status", code, code)
    fields = [c["field"] for c in status.get("details", {}).get("causes", [])]
    assert text in status["message"] or text in fields


def test_label_and_field_selectors(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": "sel"}})
    core.create_namespaced_pod("sel", pod("a", {"app": "x", "tier": "gpu"}, node="n1"))
    core.create_namespaced_pod("sel", pod("b", {"app": "x", "tier": "cpu"}, node="n2"))
    core.create_namespaced_pod("sel", pod("c", {"app": "y"}, node="n1"))

    def names(**kw) -> list[str]:
        return [p.metadata.name for p in core.list_namespaced_pod("sel", **kw).items]

    assert names(label_selector="app=x") == ["a", "b"]
    assert names(label_selector="app=x,tier in (gpu, tpu)") == ["a"]
    assert names(label_selector="!tier") == ["c"]
    assert names(label_selector="tier notin (cpu)") == ["a", "c"]
    assert names(field_selector="spec.nodeName=n1") == ["a", "c"]
    assert names(field_selector="spec.nodeName!=n1,metadata.name=b") == ["b"]
    everywhere = core.list_pod_for_all_namespaces(label_selector="app=y").items
    assert [p.metadata.namespace for p in everywhere] == ["sel"]
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod("sel", label_selector="app in x")
    assert err.value.status == 400


def test_custom_resource_status_is_its_own_subresource(api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    body = {
        "apiVersion": "autoscaling.gpufleet.dev/v1alpha1",
        "kind": "GPUAutoscaler",
        "metadata": {"name": "chat"},
        "spec": {"maxReplicas": 4},
        "status": {"desiredReplicas": 99},
    }
    custom.create_namespaced_custom_object(*GPA[:2], "default", GPA[2], body)
    merge = "application/merge-patch+json"
    custom.patch_namespaced_custom_object_status(
        *GPA[:2],
        "default",
        GPA[2],
        "chat",
        {"status": {"desiredReplicas": 3}},
        _content_type=merge,
    )
    custom.patch_namespaced_custom_object(
        *GPA[:2],
        "default",
        GPA[2],
        "chat",
        {"spec": {"maxReplicas": 8}, "status": {"desiredReplicas": 0}},
        _content_type=merge,
    )
    got = custom.get_namespaced_custom_object(*GPA[:2], "default", GPA[2], "chat")
    assert got["spec"]["maxReplicas"] == 8
    assert got["status"] == {"desiredReplicas": 3}  # the main resource never writes status
    assert got["metadata"]["generation"] == 2


def test_strategic_merge_on_a_custom_resource_is_415_as_on_a_real_server(
    api: client.ApiClient,
) -> None:
    """A real API server serves strategic merge for built-in types only; the fake refuses it
    on a custom resource too, so code that would send one fails here first."""
    custom = client.CustomObjectsApi(api)
    custom.create_cluster_custom_object(
        "karpenter.sh", "v1", "nodepools", {"metadata": {"name": "gpu"}, "spec": {}}
    )
    limits = {"spec": {"limits": {"nvidia.com/gpu": 8}}}
    with pytest.raises(ApiException) as err:
        custom.patch_cluster_custom_object(
            "karpenter.sh",
            "v1",
            "nodepools",
            "gpu",
            limits,
            _content_type="application/strategic-merge-patch+json",
        )
    assert err.value.status == 415
    custom.patch_cluster_custom_object("karpenter.sh", "v1", "nodepools", "gpu", limits)
    custom.patch_cluster_custom_object(
        "karpenter.sh",
        "v1",
        "nodepools",
        "gpu",
        [{"op": "replace", "path": "/spec/limits/nvidia.com~1gpu", "value": 16}],
        _content_type="application/json-patch+json",
    )
    got = custom.get_cluster_custom_object("karpenter.sh", "v1", "nodepools", "gpu")
    assert got["spec"]["limits"] == {"nvidia.com/gpu": 16}


def test_strategic_merge_merges_containers_by_name(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment("default", deployment("vllm-c"))
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "image": "v2"}]}}}}
    apps.patch_namespaced_deployment("vllm-c", "default", patch)
    (container,) = apps.read_namespaced_deployment(
        "vllm-c", "default"
    ).spec.template.spec.containers
    assert (container.name, container.image) == ("vllm", "v2")


def test_leases_and_events(api: client.ApiClient) -> None:
    coordination = client.CoordinationV1Api(api)
    lease = coordination.create_namespaced_lease(
        "kube-system",
        {
            "metadata": {"name": "gpufleet-autoscaler"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
        },
    )
    lease.spec.holder_identity = "b"
    coordination.replace_namespaced_lease("gpufleet-autoscaler", "kube-system", lease)
    lease.spec.holder_identity = "c"  # written with the now stale resourceVersion
    with pytest.raises(ApiException) as err:
        coordination.replace_namespaced_lease("gpufleet-autoscaler", "kube-system", lease)
    assert err.value.status == 409
    events = client.EventsV1Api(api)
    event = {
        "metadata": {"generateName": "chat-"},
        # the client reads this into a datetime and writes it with isoformat(): a
        # whole second would lose the six digits MicroTime wants (400 here, as there)
        "eventTime": "2026-11-24T00:00:00.250000Z",
        "reason": "ScaleUp",
        "note": "3 -> 5",
        "type": "Normal",
        "action": "Scale",
        "reportingController": "gpufleet.dev/autoscaler",
        "reportingInstance": "a",
        "regarding": {"kind": "Deployment", "name": "vllm-a", "namespace": "default"},
    }
    events.create_namespaced_event("default", event)
    (made,) = events.list_namespaced_event("default").items
    assert made.reason == "ScaleUp" and made.metadata.name.startswith("chat-")
    # NameIsDNSSubdomain(prefix=true) forgives a trailing dash, not a dot: the autoscaler's
    # "<name>." made every Event a 422 on a real cluster, and this server took it.
    for generate in ("chat.", "Chat-", "chat_"):
        with pytest.raises(ApiException) as err:
            events.create_namespaced_event(
                "default", {**event, "metadata": {"generateName": generate}}
            )
        assert err.value.status == 422 and "metadata.generateName" in err.value.body


@pytest.mark.usefixtures("vllm_a")
def test_fault_modes_then_recovery(server: FakeApiServer, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    server.faults.fail_next = 2
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            core.read_namespace("default")
        assert err.value.status == 503
    assert core.read_namespace("default").metadata.name == "default"
    server.faults.conflict_next_writes = 1
    apps = client.AppsV1Api(api)
    with pytest.raises(ApiException) as err:
        apps.patch_namespaced_deployment_scale("vllm-a", "default", {"spec": {"replicas": 4}})
    assert err.value.status == 409
    apps.patch_namespaced_deployment_scale("vllm-a", "default", {"spec": {"replicas": 4}})
    server.stop()
    config = client.Configuration()
    config.host = server.url
    config.retries = False
    with client.ApiClient(config) as down, pytest.raises(Exception):  # noqa: B017
        client.CoreV1Api(down).read_namespace("default", _request_timeout=2)
    server.start()
    assert apps.read_namespaced_deployment_scale("vllm-a", "default").spec.replicas == 4


@pytest.mark.usefixtures("vllm_a")
def test_requests_are_recorded_by_user_agent(server: FakeApiServer, api: client.ApiClient) -> None:
    api.user_agent = "gpufleet-autoscaler/replica-1"
    client.AppsV1Api(api).patch_namespaced_deployment_scale(
        "vllm-a", "default", {"spec": {"replicas": 2}}
    )
    (mine,) = [r for r in server.requests if r.user_agent == "gpufleet-autoscaler/replica-1"]
    assert (mine.method, mine.path, mine.status) == (
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/vllm-a/scale",
        200,
    )


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_kubectl_drives_it(server: FakeApiServer, api: client.ApiClient, tmp_path: Path) -> None:
    config = server.write_kubeconfig(tmp_path / "kubeconfig")

    def kubectl(*args: str) -> str:
        run = subprocess.run(
            ["kubectl", f"--kubeconfig={config}", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert run.returncode == 0, run.stderr
        return run.stdout

    # its own Deployment: the module's server is shared, and this test ran alone failed
    client.AppsV1Api(api).create_namespaced_deployment("default", deployment("vllm-k"))
    kubectl("scale", "deployment/vllm-k", "--replicas=6")
    assert kubectl("get", "deployment", "vllm-k", "-o", "jsonpath={.spec.replicas}") == "6"
    assert "vllm-k" in kubectl("get", "deploy", "-n", "default")


def test_an_optional_crd_is_served_only_where_installed() -> None:
    """A cluster without Cluster Autoscaler's CapacityBuffer CRD answers 404 for it, as a
    real one does: what a client's discovery of the CRD relies on."""
    buffers = ("autoscaling.x-k8s.io", "v1beta1", "capacitybuffers")
    for install, listed in (((), False), (("capacitybuffers.autoscaling.x-k8s.io",), True)):
        with FakeApiServer(install=install) as s:
            config = client.Configuration()
            config.host = s.url
            with client.ApiClient(config) as api:
                groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
                assert ("autoscaling.x-k8s.io" in groups) is listed
                custom = client.CustomObjectsApi(api)
                if listed:
                    assert custom.list_cluster_custom_object(*buffers)["items"] == []
                else:
                    with pytest.raises(ApiException) as err:
                        custom.list_cluster_custom_object(*buffers)
                    assert err.value.status == 404
    with pytest.raises(ValueError, match="no optional CRD"):
        FakeApiServer(install=("nodepools.karpenter.sh",))


def test_the_request_log_keeps_the_newest_only(monkeypatch) -> None:
    """A lab runs for hours: every request kept grew it by about 240 bytes each."""
    monkeypatch.setattr(server_module, "REQUEST_LOG", 5)
    with FakeApiServer() as fake:
        config = client.Configuration()
        config.host = fake.url
        with client.ApiClient(config) as api:
            core = client.CoreV1Api(api)
            for name in ("default", "kube-system") * 4:
                core.read_namespace(name)
            core.list_namespace()
        # the last 5 of 9: the last two pairs of reads, then the list
        assert [r.path for r in fake.requests] == [
            "/api/v1/namespaces/default",
            "/api/v1/namespaces/kube-system",
            "/api/v1/namespaces/default",
            "/api/v1/namespaces/kube-system",
            "/api/v1/namespaces",
        ]


def test_delete_options_preconditions_grace_and_dry_run(api: client.ApiClient) -> None:
    """DeleteOptions in a body were ignored: a stale precondition deleted all the same, a
    body's gracePeriodSeconds 0 left the pod terminating; and a dry run was made."""
    core = client.CoreV1Api(api)
    made = core.create_namespaced_config_map("default", {"metadata": {"name": "pre"}})
    stale = client.V1DeleteOptions(preconditions=client.V1Preconditions(resource_version="1"))
    wrong = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="not-its-uid"))
    for options, what in ((stale, "ResourceVersion"), (wrong, "UID")):
        with pytest.raises(ApiException) as refused:
            core.delete_namespaced_config_map("pre", "default", body=options)
        assert refused.value.status == 409
        assert f"Precondition failed: {what} in precondition:" in refused.value.body
    current = client.V1Preconditions(uid=made.metadata.uid)
    core.delete_namespaced_config_map("pre", "default", dry_run="All")
    core.patch_namespaced_config_map("pre", "default", {"data": {"a": "1"}}, dry_run="All")
    core.create_namespaced_config_map("default", {"metadata": {"name": "dry"}}, dry_run="All")
    assert core.read_namespaced_config_map("pre", "default").data is None
    with pytest.raises(ApiException, match="Not Found"):
        core.read_namespaced_config_map("dry", "default")
    core.delete_namespaced_config_map(
        "pre", "default", body=client.V1DeleteOptions(preconditions=current)
    )
    core.create_namespaced_pod("default", pod("grace", {}))
    core.delete_namespaced_pod(
        "grace", "default", body=client.V1DeleteOptions(grace_period_seconds=0)
    )
    with pytest.raises(ApiException, match="Not Found"):
        core.read_namespaced_pod("grace", "default")
