"""Watches on the fake API server through the official client's `watch.Watch` (issue 15 §2:
the exporter keeps pod labels and ResourceSlices by list and watch, as an informer does)."""

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from gpufleet.lab.kubeapi.resources import RESOURCES
from gpufleet.lab.kubeapi.server import FakeApiServer

PODS = next(r for r in RESOURCES if (r.group, r.plural) == ("", "pods"))


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer(clock=lambda: 1.7e9) as s:
        yield s


@pytest.fixture
def core(server: FakeApiServer) -> Iterator[client.CoreV1Api]:
    config = client.Configuration()
    config.host = server.url
    with client.ApiClient(config) as api:
        yield client.CoreV1Api(api)


def pod(name: str, node: str, **labels: str) -> dict:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x"}]},
    }


def events(core: client.CoreV1Api, count: int, **kw) -> list[tuple[str, str, dict]]:
    """The first `count` events (type, name, labels) of a pod watch."""
    got = []
    stream = watch.Watch().stream(core.list_pod_for_all_namespaces, timeout_seconds=10, **kw)
    for event in stream:
        meta = event["raw_object"]["metadata"]
        got.append((event["type"], meta["name"], meta.get("labels") or {}))
        if len(got) == count:
            break
    return got


def test_watch_without_a_version_starts_with_the_current_objects(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod("a", "n1", app="x"))
    core.create_namespaced_pod("default", pod("b", "n2", app="x"))
    assert events(core, 1, field_selector="spec.nodeName=n1") == [("ADDED", "a", {"app": "x"})]


def test_watch_from_a_list_version_sees_only_later_changes(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod("a", "n1", app="x"))
    version = core.list_pod_for_all_namespaces().metadata.resource_version
    core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"app": "y"}}})
    core.create_namespaced_pod("default", pod("b", "n2"))  # another node: filtered out
    core.create_namespaced_pod("default", pod("c", "n1"))
    core.delete_namespaced_pod("c", "default", grace_period_seconds=0)
    assert events(core, 3, resource_version=version, field_selector="spec.nodeName=n1") == [
        ("MODIFIED", "a", {"app": "y"}),
        ("ADDED", "c", {}),
        ("DELETED", "c", {}),
    ]


def test_objects_entering_and_leaving_a_label_selector(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod("a", "n1", team="red"))
    version = core.list_pod_for_all_namespaces().metadata.resource_version
    core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"team": "blue"}}})
    core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"team": "red"}}})
    assert events(core, 2, resource_version=version, label_selector="team=red") == [
        ("DELETED", "a", {"team": "blue"}),
        ("ADDED", "a", {"team": "red"}),
    ]


def test_a_version_older_than_the_window_is_410_expired() -> None:
    with FakeApiServer(event_history=3) as server:
        config = client.Configuration()
        config.host = server.url
        with client.ApiClient(config) as api:
            core = client.CoreV1Api(api)
            for name in "abcde":
                core.create_namespaced_pod("default", pod(name, "n1"))
            with pytest.raises(ApiException) as err:
                events(core, 1, resource_version="1")
            assert err.value.status == 410
            assert events(core, 1, resource_version="5")[0][1] == "d"  # within the window


def test_a_watch_that_asks_gets_bookmarks_of_the_newest_version() -> None:
    """As kube-apiserver's watch cache: with allowWatchBookmarks, a BOOKMARK carrying only
    the newest resourceVersion the watch passed, any resource's write included."""
    with FakeApiServer(bookmark_seconds=0.1) as server:
        config = client.Configuration()
        config.host = server.url
        with client.ApiClient(config) as api:
            core = client.CoreV1Api(api)
            version = core.list_pod_for_all_namespaces().metadata.resource_version
            core.create_namespace({"metadata": {"name": "other"}})  # no pod's write
            stream = watch.Watch().stream(
                core.list_pod_for_all_namespaces,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=10,
            )
            event = next(iter(stream))
            assert event["type"] == "BOOKMARK"
            assert event["raw_object"] == {
                "kind": "Pod",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(int(version) + 1)},
            }
            plain = watch.Watch().stream(
                core.list_pod_for_all_namespaces, resource_version=version, timeout_seconds=1
            )
            assert list(plain) == []  # none unasked


def test_the_stream_ends_at_timeout_seconds(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod("a", "n1"))
    stream = watch.Watch().stream(core.list_pod_for_all_namespaces, timeout_seconds=1)
    assert [e["type"] for e in stream] == ["ADDED"]  # then the server closes it


@pytest.mark.parametrize("query", [{"label_selector": "a in"}, {"resource_version": "x"}])
def test_bad_watch_queries_are_400(core: client.CoreV1Api, query: dict) -> None:
    with pytest.raises(ApiException) as err:
        core.list_pod_for_all_namespaces(watch=True, _preload_content=False, **query)
    assert err.value.status == 400


def test_bad_timeout_is_400(server: FakeApiServer) -> None:
    url = f"{server.url}/api/v1/pods?watch=1&timeoutSeconds=x"
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(url, timeout=10)
    assert err.value.code == 400
    assert json.load(err.value)["message"] == "invalid timeoutSeconds 'x'"


def test_a_streaming_list_sends_the_objects_then_marks_their_end(server, core) -> None:
    """As the official client reads it: an ADDED event for each object matching, a
    BOOKMARK annotated `k8s.io/initial-events-end` at their version, then the changes."""
    core.create_namespaced_pod("default", pod("a", "n1"))
    core.create_namespaced_pod("default", pod("b", "n2"))
    version = server.store.resource_version
    stream = watch.Watch().stream(
        core.list_pod_for_all_namespaces,
        field_selector="spec.nodeName=n1",
        send_initial_events=True,
        resource_version_match="NotOlderThan",
        allow_watch_bookmarks=True,
        timeout_seconds=10,
    )
    first = [next(stream) for _ in range(2)]
    core.create_namespaced_pod("default", pod("c", "n1"))
    changed = next(stream)
    assert [(e["type"], e["raw_object"]["metadata"]["name"]) for e in first[:1]] == [("ADDED", "a")]
    end = first[1]["raw_object"]["metadata"]
    assert first[1]["type"] == "BOOKMARK"
    assert end == {
        "resourceVersion": version,
        "annotations": {"k8s.io/initial-events-end": "true"},
    }
    assert (changed["type"], changed["raw_object"]["metadata"]["name"]) == ("ADDED", "c")


@pytest.mark.parametrize(
    "query, field",
    [
        ({"sendInitialEvents": "true", "allowWatchBookmarks": "true"}, "resourceVersionMatch"),
        ({"resourceVersionMatch": "NotOlderThan"}, "resourceVersionMatch"),
    ],
)
def test_a_watch_the_api_server_validation_refuses_is_422(server, query, field) -> None:
    url = f"{server.url}/api/v1/pods?watch=1&" + "&".join(f"{k}={v}" for k, v in query.items())
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(url, timeout=10)
    assert err.value.code == 422
    assert f"{field}: Forbidden" in json.loads(err.value.read())["message"]


def test_without_the_watchlist_gate_a_streaming_list_is_422() -> None:
    with FakeApiServer(watch_list=False) as server:
        config = client.Configuration()
        config.host = server.url
        with client.ApiClient(config) as api, pytest.raises(ApiException) as err:
            client.CoreV1Api(api).list_pod_for_all_namespaces(
                watch=True,
                send_initial_events=True,
                resource_version_match="NotOlderThan",
                allow_watch_bookmarks=True,
                _preload_content=False,
            )
    assert err.value.status == 422
    assert "WatchList feature gate" in json.loads(err.value.body)["message"]


def lines(server: FakeApiServer, query: str) -> list[dict]:
    """The first events of a raw watch of pods, until its 1 s timeout ends it."""
    url = f"{server.url}/api/v1/pods?watch=1&timeoutSeconds=1&{query}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return [json.loads(line) for line in answer if line.strip()]


@pytest.mark.parametrize("watch_list", [True, False], ids=["gate-on", "gate-off"])
def test_a_watch_from_no_version_is_a_streaming_list_where_the_gate_is_on(watch_list) -> None:
    """kube-apiserver defaults a watch from "" or "0" that asks neither option to a
    streaming list (SetListOptionsDefaults): with bookmarks, the end of its objects is
    marked. `sendInitialEvents=false` starts at the newest, with no ADDED events."""
    with FakeApiServer(watch_list=watch_list) as server:
        server.store.create(PODS, "default", pod("a", "n1"))
        marked = [e["type"] for e in lines(server, "allowWatchBookmarks=true&resourceVersion=0")]
        assert marked == (["ADDED", "BOOKMARK"] if watch_list else ["ADDED"])
        assert [e["type"] for e in lines(server, "resourceVersion=")] == ["ADDED"]
        if watch_list:
            query = "sendInitialEvents=false&resourceVersionMatch=NotOlderThan"
            assert lines(server, query) == []
