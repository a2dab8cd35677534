"""Custom objects streamed as the typed APIs stream: the raw watch asks what
kube-apiserver's ListOptions read, with the client's token, and fails as the client's own
methods fail; every other call is CustomObjectsApi's."""

import json
from collections.abc import Iterator
from urllib.parse import parse_qsl

import pytest
from helpers.kube import api_client, create_autoscaler
from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from gpufleet.autoscaler.core.spec import GROUP, PLURAL, VERSION
from gpufleet.kube.custom_objects import cluster_custom_objects
from gpufleet.kube.errors import KubeError, KubeErrorKind, kube_call
from gpufleet.lab.kubeapi.server import FakeApiServer

BUFFERS = ("autoscaling.x-k8s.io", "v1beta1", "capacitybuffers")
STREAM = {
    "watch": True,
    "resource_version": "",
    "resource_version_match": "NotOlderThan",
    "send_initial_events": True,
    "allow_watch_bookmarks": True,
    "timeout_seconds": 5,
    "_preload_content": False,
    "_request_timeout": (5, 10),
}


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as fake:
        yield fake


def test_a_streaming_list_sends_every_object_then_marks_their_end(server) -> None:
    with api_client(server.url) as api:
        for name in ("a", "b"):
            create_autoscaler(api, "default", {"scaleTargetRef": {"name": name}}, name=name)
        response = cluster_custom_objects(api, GROUP, VERSION, PLURAL)(**STREAM)
        events = []
        for line in iter_resp_lines(response):
            events.append(json.loads(line))
            if events[-1]["type"] == "BOOKMARK":
                break
        response.close()
        response.release_conn()
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("BOOKMARK", None),
    ]
    assert events[-1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    watch = server.requests[-1]
    assert watch.method == "WATCH" and watch.path == f"/apis/{GROUP}/{VERSION}/{PLURAL}"
    assert dict(parse_qsl(watch.query, keep_blank_values=True)) == {
        "watch": "true",
        "resourceVersion": "",
        "resourceVersionMatch": "NotOlderThan",
        "sendInitialEvents": "true",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "5",
    }


def test_other_calls_are_the_clients_own(server) -> None:
    with api_client(server.url) as api:
        create_autoscaler(api, "default", {"scaleTargetRef": {"name": "a"}}, name="a")
        listed = cluster_custom_objects(api, GROUP, VERSION, PLURAL)(limit=1)
    assert [o["metadata"]["name"] for o in listed["items"]] == ["a"]


@pytest.mark.parametrize(
    ("watch_list", "resource", "kind", "status"),
    [
        # kube-apiserver 1.33 by default: the caller lists instead, from then on
        (False, (GROUP, VERSION, PLURAL), KubeErrorKind.INVALID, 422),
        (True, BUFFERS, KubeErrorKind.NOT_FOUND, 404),  # the CRD is not installed
    ],
)
def test_a_refused_streaming_list_raises_as_the_client_does(
    watch_list, resource, kind, status
) -> None:
    with FakeApiServer(watch_list=watch_list) as fake, api_client(fake.url) as api:
        call = cluster_custom_objects(api, *resource)
        with pytest.raises(KubeError) as raised:
            kube_call(lambda: call(**STREAM))
    assert raised.value.kind is kind and raised.value.status == status


def test_the_clients_token_is_sent(server) -> None:
    """A user the cluster knows but grants nothing: 403 (no token would be the admin's)."""
    server.add_user("carols", "carol")
    config = client.Configuration()
    config.host = server.url
    config.api_key = {"authorization": "carols"}
    config.api_key_prefix = {"authorization": "Bearer"}
    with client.ApiClient(config) as api:
        call = cluster_custom_objects(api, GROUP, VERSION, PLURAL)
        with pytest.raises(client.ApiException) as err:
            call(**STREAM)
    assert err.value.status == 403
    assert "cannot watch resource" in json.loads(err.value.body)["message"]


@pytest.mark.parametrize(
    "asked",
    [
        {**STREAM, "limit": 5},  # not a watch's option: the client's methods refuse it too
        {**STREAM, "_preload_content": True},  # the answer is the raw stream only
        {**STREAM, "watch": False},  # a list cannot stream
    ],
)
def test_what_a_streaming_list_cannot_be_is_a_type_error(server, asked) -> None:
    with api_client(server.url) as api, pytest.raises(TypeError):
        cluster_custom_objects(api, GROUP, VERSION, PLURAL)(**asked)
    assert not any(r.method == "WATCH" for r in server.requests)
