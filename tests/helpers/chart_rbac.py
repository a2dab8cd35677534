"""A daemon's service account on the fake API server, with exactly the RBAC the chart gives
it: the ClusterRoles, Roles and bindings `helm template` renders for that component, stored
in the server, and a token the server authorizes through them (FakeApiServer.add_user)."""

import json
from pathlib import Path
from typing import Any

from kubernetes import client

from gpufleet.lab.kubeapi.server import FakeApiServer
from helpers.helm import render

RELEASE, NAMESPACE = "gf", "gpu"


def admin(server: FakeApiServer) -> client.ApiClient:
    config = client.Configuration()
    config.host = server.url
    return client.ApiClient(config)


def as_the_chart_grants(
    server: FakeApiServer, tmp_path: Path, component: str, values: dict[str, Any] | None = None
) -> str:
    """Store the chart's RBAC objects for `component` (rendered with `values`) and return
    the token of its service account, `<release>-gpufleet-<component>`."""
    core, rbac = client.CoreV1Api(admin(server)), client.RbacAuthorizationV1Api(admin(server))
    if NAMESPACE not in {n.metadata.name for n in core.list_namespace().items}:
        core.create_namespace({"metadata": {"name": NAMESPACE}})
    create = {
        "ClusterRole": rbac.create_cluster_role,
        "ClusterRoleBinding": rbac.create_cluster_role_binding,
        "Role": lambda o: rbac.create_namespaced_role(NAMESPACE, o),
        "RoleBinding": lambda o: rbac.create_namespaced_role_binding(NAMESPACE, o),
    }
    stored = 0
    for obj in render(values or {}, tmp_path=tmp_path, release=RELEASE, namespace=NAMESPACE):
        labels = obj["metadata"].get("labels", {})
        if labels.get("app.kubernetes.io/component") == component and obj["kind"] in create:
            create[obj["kind"]](obj)
            stored += 1
    assert stored, f"the chart gives the {component} no RBAC with these values"
    token = f"{component}-token"
    server.add_user(token, f"system:serviceaccount:{NAMESPACE}:{RELEASE}-gpufleet-{component}")
    return token


def client_with(server: FakeApiServer, token: str) -> client.ApiClient:
    config = client.Configuration()
    config.host = server.url
    config.api_key = {"authorization": token}
    config.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(config)


def kubeconfig_with(server: FakeApiServer, token: str, path: Path) -> Path:
    """A kubeconfig for a daemon's --kubeconfig, bearing `token`."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "lab", "cluster": {"server": server.url}}],
                "users": [{"name": "sa", "user": {"token": token}}],
                "contexts": [{"name": "sa", "context": {"cluster": "lab", "user": "sa"}}],
                "current-context": "sa",
            }
        )
    )
    return path


def refused(server: FakeApiServer) -> list[str]:
    """The requests the authorizer refused (401, 403)."""
    return [f"{r.method} {r.path}" for r in server.requests if r.status in (401, 403)]
