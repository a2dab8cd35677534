"""`apply_node_labels` against the lab's fake API server, through the official client."""

from collections.abc import Iterator

import pytest
from helpers.kube import api_client
from kubernetes import client

from gpufleet.kube.node_labels import apply_node_labels
from gpufleet.lab.kubeapi.server import FakeApiServer


@pytest.fixture
def api() -> Iterator[client.ApiClient]:
    with FakeApiServer() as server:
        api = api_client(server.url)
        client.CoreV1Api(api).create_node(
            {"metadata": {"name": "gpu-0", "labels": {"nvidia.com/gpu.deploy.dcgm": "true"}}}
        )
        yield api


def labels(api: client.ApiClient) -> dict[str, str]:
    return client.CoreV1Api(api).read_node("gpu-0").metadata.labels


def test_sets_then_removes_only_its_own_stale_labels(api) -> None:
    apply_node_labels(
        api,
        "gpu-0",
        {"nvidia.com/gpu.count": "8", "nvidia.com/mig-1g.10gb.count": "7"},
        owner="plugin",
    )
    assert labels(api) == {
        "nvidia.com/gpu.deploy.dcgm": "true",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/mig-1g.10gb.count": "7",
    }
    patch = apply_node_labels(api, "gpu-0", {"nvidia.com/gpu.count": "6"}, owner="plugin")
    assert patch == {"nvidia.com/mig-1g.10gb.count": None, "nvidia.com/gpu.count": "6"}
    assert labels(api) == {"nvidia.com/gpu.deploy.dcgm": "true", "nvidia.com/gpu.count": "6"}
    node = client.CoreV1Api(api).read_node("gpu-0")
    assert node.metadata.annotations == {"gpufleet.dev/plugin-labels": "nvidia.com/gpu.count"}


def test_a_missing_node_is_an_api_error(api) -> None:
    with pytest.raises(client.ApiException) as exc:
        apply_node_labels(api, "nope", {"a/b": "c"}, owner="plugin")
    assert exc.value.status == 404
