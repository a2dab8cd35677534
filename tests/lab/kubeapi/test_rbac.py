"""SubjectAccessReviews on the fake API server, through the official client, answered from
the RBAC objects it stores as kube-apiserver's RBAC authorizer answers them."""

import json
from collections.abc import Iterator

import pytest
from kubernetes import client

from gpufleet.lab.kubeapi.server import FakeApiServer

READER = {
    "apiGroups": ["external.metrics.k8s.io"],
    "resources": ["*"],
    "verbs": ["list", "get"],
}


@pytest.fixture
def api() -> Iterator[client.ApiClient]:
    with FakeApiServer() as server:
        config = client.Configuration()
        config.host = server.url
        with client.ApiClient(config) as api:
            core = client.CoreV1Api(api)
            core.create_namespace({"metadata": {"name": "llm"}})
            rbac = client.RbacAuthorizationV1Api(api)
            rbac.create_cluster_role({"metadata": {"name": "reader"}, "rules": [READER]})
            rbac.create_cluster_role(
                {
                    "metadata": {"name": "system:discovery"},
                    "rules": [{"nonResourceURLs": ["/apis", "/apis/*"], "verbs": ["get"]}],
                }
            )
            rbac.create_cluster_role_binding(
                binding(
                    "hpa",
                    "ClusterRole",
                    "reader",
                    kind="ServiceAccount",
                    name="horizontal-pod-autoscaler",
                    namespace="kube-system",
                )
            )
            rbac.create_cluster_role_binding(
                binding(
                    "system:discovery",
                    "ClusterRole",
                    "system:discovery",
                    kind="Group",
                    name="system:authenticated",
                )
            )
            rbac.create_namespaced_role(
                "llm",
                {"metadata": {"name": "one"}, "rules": [{**READER, "resourceNames": ["q"]}]},
            )
            rbac.create_namespaced_role_binding(
                "llm", binding("alice-one", "Role", "one", kind="User", name="alice")
            )
            rbac.create_namespaced_role_binding(
                "llm", binding("bob-reader", "ClusterRole", "reader", kind="User", name="bob")
            )
            yield api


def binding(binding_name: str, role_kind: str, role: str, **subject: str) -> dict:
    return {
        "metadata": {"name": binding_name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [subject],
    }


def review(
    api: client.ApiClient, user: str, groups=(), **attrs
) -> client.V1SubjectAccessReviewStatus:
    key = "non_resource_attributes" if "path" in attrs else "resource_attributes"
    spec = {"user": user, "groups": list(groups), key: attrs}
    answer = client.AuthorizationV1Api(api).create_subject_access_review(
        {"spec": client.V1SubjectAccessReviewSpec(**spec)}
    )
    return answer.status


def metric(namespace: str = "llm", name: str = "") -> dict:
    out = {
        "namespace": namespace,
        "verb": "list",
        "group": "external.metrics.k8s.io",
        "resource": "q",
    }
    return {**out, "name": name} if name else out


def test_cluster_role_bindings_grant_everywhere(api: client.ApiClient) -> None:
    hpa = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
    status = review(api, hpa, **metric("anywhere"))
    assert status.allowed
    assert status.reason == (
        'RBAC: allowed by ClusterRoleBinding "hpa" of ClusterRole "reader" to ServiceAccount '
        '"horizontal-pod-autoscaler/kube-system"'
    )
    assert not review(api, hpa, **{**metric(), "verb": "delete"}).allowed


def test_role_bindings_grant_in_their_namespace_only(api: client.ApiClient) -> None:
    assert review(api, "bob", **metric()).allowed
    assert not review(api, "bob", **metric("other")).allowed
    assert review(api, "alice", **metric(name="q")).allowed  # resourceNames
    assert not review(api, "alice", **metric()).allowed
    assert review(api, "alice", **metric()).reason is None


def test_masters_and_non_resource_urls(api: client.ApiClient) -> None:
    assert review(api, "system:kube-aggregator", ["system:masters"], **metric("x")).allowed
    assert review(api, "carol", ["system:authenticated"], path="/apis/x/v1", verb="get").allowed
    assert not review(api, "carol", ["system:authenticated"], path="/metrics", verb="get").allowed
    assert not review(api, "bob", path="/apis", verb="get").allowed


def test_a_review_without_a_user_is_invalid(api: client.ApiClient) -> None:
    with pytest.raises(client.ApiException) as caught:
        review(api, "", **metric())
    assert caught.value.status == 422


def test_a_request_bearing_a_token_is_authorized_as_its_user() -> None:
    """What a daemon's service account may do, decided per request: 401 for a token no
    one holds, 403 naming the verb and resource, discovery open, no token the admin."""
    with FakeApiServer() as server:
        admin_config = client.Configuration()
        admin_config.host = server.url
        admin = client.ApiClient(admin_config)
        rbac = client.RbacAuthorizationV1Api(admin)
        rule = {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["get"]}
        rbac.create_cluster_role({"metadata": {"name": "scaler"}, "rules": [rule]})
        rbac.create_cluster_role_binding(
            binding("scaler", "ClusterRole", "scaler", kind="User", name="carol")
        )
        client.AppsV1Api(admin).create_namespaced_deployment(
            "default",
            {
                "metadata": {"name": "vllm"},
                "spec": {
                    "selector": {"matchLabels": {"app": "vllm"}},
                    "template": {
                        "metadata": {"labels": {"app": "vllm"}},
                        "spec": {"containers": [{"name": "vllm", "image": "vllm"}]},
                    },
                },
            },
        )
        server.add_user("carols", "carol")

        def as_(token: str) -> client.AppsV1Api:
            config = client.Configuration()
            config.host = server.url
            config.api_key = {"authorization": token}
            config.api_key_prefix = {"authorization": "Bearer"}
            return client.AppsV1Api(client.ApiClient(config))

        carol = as_("carols")
        assert carol.read_namespaced_deployment_scale("vllm", "default").spec.replicas == 1
        assert client.ApisApi(carol.api_client).get_api_versions().groups  # discovery
        with pytest.raises(client.ApiException) as err:
            carol.patch_namespaced_deployment_scale("vllm", "default", {"spec": {"replicas": 2}})
        assert err.value.status == 403
        assert json.loads(err.value.body)["message"] == (
            'deployments.apps "vllm" is forbidden: User "carol" cannot patch resource '
            '"deployments/scale" in API group "apps" in the namespace "default"'
        )
        with pytest.raises(client.ApiException) as err:
            as_("nobodys").list_deployment_for_all_namespaces()
        assert err.value.status == 401
        # kube-apiserver authorizes before it routes: a CRD not installed is a 403 to a
        # user without the grant (a chart missing the rule), not a 404 ("not installed")
        with pytest.raises(client.ApiException) as err:
            client.CustomObjectsApi(carol.api_client).list_cluster_custom_object(
                "autoscaling.x-k8s.io",
                "v1beta1",
                "capacitybuffers",  # not installed here
            )
        assert err.value.status == 403
