"""The chart's RBAC for the exporter and the plugin against the calls they make. The fake
API server authorizes each request of the daemon's service account through the objects
`helm template` renders for it, as kube-apiserver's RBAC authorizer does, while the real
daemon does what needs the API: the exporter watches its node's pods for their labels and
the ResourceSlices for DRA claims; the plugin puts GFD's labels on its Node. A call the
code makes and the chart does not grant is a 403 here. (The autoscaler's:
tests/autoscaler/controller/test_chart_rbac.py.)"""

from collections.abc import Iterator

import pytest
from helpers import wait_for
from helpers.chart_rbac import admin, as_the_chart_grants, kubeconfig_with, refused
from helpers.e2e import SMALL_NODE, start_exporter
from helpers.helm import VALUE_SETS
from kubernetes import client

from gpufleet.lab.dra import resource_slice
from gpufleet.lab.kubeapi.server import FakeApiServer
from gpufleet.lab.node import NAMESPACES, SimNode
from gpufleet.lab.nvml.api import SimulatedNvml
from gpufleet.plugin.labels import publish_labels
from gpufleet.plugin.nvml.discovery import discover
from gpufleet.plugin.settings import PluginSettings, resolve_config

NODE = "node-a"  # helpers.e2e.node_settings' NODE_NAME


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as api:
        yield api


def test_the_exporters_pod_label_and_dra_calls_are_granted(server, tmp_path) -> None:
    values = VALUE_SETS["pod-labels-dra"][0]
    token = as_the_chart_grants(server, tmp_path, "exporter", values)
    core = client.CoreV1Api(admin(server))
    with SimNode(SMALL_NODE, root=tmp_path / "n") as node:
        node.sim.nvmlInit()
        for namespace in NAMESPACES:
            core.create_namespace({"metadata": {"name": namespace}})
        for pod in node.pods.values():
            core.create_namespaced_pod(
                pod.namespace,
                {
                    "metadata": {"name": pod.name, "labels": {"team": "red"}},
                    "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "x"}]},
                },
            )
        client.ResourceV1Api(admin(server)).create_resource_slice(
            resource_slice(node.sim, node.layout.node_name)
        )
        exporter = start_exporter(
            node,
            kubeconfig=str(kubeconfig_with(server, token, tmp_path / "kubeconfig")),
            kubernetes_enable_pod_labels=True,
            kubernetes_pod_label_allowlist_regex="^team$",
            kubernetes_enable_dra=True,
        )
        try:
            wait_for(lambda: 'team="red"' in exporter.metrics(), what="labels from the API")
            paths = {r.path for r in server.requests}
        finally:
            exporter.stop()
    assert refused(server) == []
    assert "/apis/resource.k8s.io/v1/resourceslices" in paths  # DRA was read too


def test_the_plugins_node_label_calls_are_granted(server, tmp_path) -> None:
    values = VALUE_SETS["node-labels-api"][0]
    token = as_the_chart_grants(server, tmp_path, "plugin", values)
    client.CoreV1Api(admin(server)).create_node({"metadata": {"name": NODE}})
    sim = SimulatedNvml("2xH100")
    sim.nvmlInit()
    try:
        settings = PluginSettings(
            kubeconfig=str(kubeconfig_with(server, token, tmp_path / "kubeconfig")),
            node_name=NODE,
            node_labels_api=True,
            node_labels_file="",
        )
        config, _ = resolve_config(settings)
        publish_labels(
            discover(sim),
            config,
            features_file="",
            node_name=NODE,
            machine_type_file=settings.machine_type_file,
            kube_url="",
            kubeconfig=settings.kubeconfig,
        )
    finally:
        sim.close()
    labels = client.CoreV1Api(admin(server)).read_node(NODE).metadata.labels
    assert labels["nvidia.com/gpu.count"] == "2"
    assert refused(server) == []
