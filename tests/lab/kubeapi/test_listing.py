"""Lists at a resourceVersion and in pages, through the official client over real HTTP and
kubectl's own pager: every page of a list shows the same version of the collection, as
etcd serves it, whatever was written between the pages."""

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.kube import api_client
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.rest import ApiException

from gpufleet.lab.kubeapi.listing import CONTINUE_TOO_OLD, TOO_OLD
from gpufleet.lab.kubeapi.resources import RESOURCES
from gpufleet.lab.kubeapi.server import FakeApiServer
from gpufleet.lab.kubeapi.store import ObjectStore

NS = "default"
PODS = next(r for r in RESOURCES if (r.group, r.plural) == ("", "pods"))
NAMESPACES = next(r for r in RESOURCES if (r.group, r.plural) == ("", "namespaces"))


def pod(name: str, team: str = "red") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"team": team}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer(watch_cache=False) as fake:
        yield fake


@pytest.fixture
def core(server: FakeApiServer) -> Iterator[client.CoreV1Api]:
    with api_client(server.url) as api:
        yield client.CoreV1Api(api)


def names(answer: Any) -> list[str]:
    return [p["metadata"]["name"] for p in answer["items"]]


def page(core: client.CoreV1Api, **query: Any) -> dict[str, Any]:
    return json.loads(core.list_namespaced_pod(NS, _preload_content=False, **query).data)


def status(err: ApiException) -> dict[str, Any]:
    return json.loads(err.body)


def test_pages_follow_continue_to_the_end_at_one_version(core) -> None:
    for i in range(7):
        core.create_namespaced_pod(NS, pod(f"p{i}"))
    first = page(core, limit=3)
    assert names(first) == ["p0", "p1", "p2"]
    assert first["metadata"]["remainingItemCount"] == 4
    version = first["metadata"]["resourceVersion"]
    second = page(core, limit=3, _continue=first["metadata"]["continue"])
    third = page(core, limit=3, _continue=second["metadata"]["continue"])
    assert names(second) == ["p3", "p4", "p5"] and names(third) == ["p6"]
    assert "continue" not in third["metadata"]
    assert {p["metadata"]["resourceVersion"] for p in (second, third)} == {version}
    # a selector filters each page, and the server then does not count what remains
    chosen = page(core, limit=2, label_selector="team=red")
    assert "remainingItemCount" not in chosen["metadata"] and chosen["metadata"]["continue"]


def test_a_page_after_writes_shows_the_version_of_the_first(core) -> None:
    for name in ("a", "b", "c", "d"):
        core.create_namespaced_pod(NS, pod(name))
    first = page(core, limit=2)
    core.delete_namespaced_pod("c", NS, grace_period_seconds=0)
    core.patch_namespaced_pod("d", NS, {"metadata": {"labels": {"team": "gold"}}})
    core.create_namespaced_pod(NS, pod("e"))
    rest = page(core, _continue=first["metadata"]["continue"])
    assert names(rest) == ["c", "d"]
    assert rest["items"][1]["metadata"]["labels"] == {"team": "red"}
    assert names(page(core)) == ["a", "b", "d", "e"]


def test_a_page_the_window_has_passed_is_410_expired() -> None:
    with FakeApiServer(event_history=3) as server, api_client(server.url) as api:
        core = client.CoreV1Api(api)
        for name in ("a", "b", "c"):
            core.create_namespaced_pod(NS, pod(name))
        first = page(core, limit=1)
        for name in ("d", "e", "f", "g"):
            core.create_namespaced_pod(NS, pod(name))
        with pytest.raises(ApiException) as err:
            page(core, limit=1, _continue=first["metadata"]["continue"])
        assert err.value.status == 410
        assert status(err.value)["reason"] == "Expired"
        assert status(err.value)["message"] == CONTINUE_TOO_OLD


def test_version_zero_comes_whole_from_the_watch_cache_and_in_pages_without_one() -> None:
    for cache, expected in ((True, ["a", "b", "c"]), (False, ["a"])):
        with FakeApiServer(watch_cache=cache) as server, api_client(server.url) as api:
            core = client.CoreV1Api(api)
            for name in ("a", "b", "c"):
                core.create_namespaced_pod(NS, pod(name))
            answer = page(core, limit=1, resource_version="0")
            assert names(answer) == expected
            assert ("continue" in answer["metadata"]) is not cache


def test_a_version_with_a_limit_is_exact_and_without_one_not_older(core) -> None:
    core.create_namespaced_pod(NS, pod("a"))
    version = page(core)["metadata"]["resourceVersion"]
    core.create_namespaced_pod(NS, pod("b"))
    exact = page(core, limit=10, resource_version=version)
    assert names(exact) == ["a"] and exact["metadata"]["resourceVersion"] == version
    assert names(page(core, resource_version=version)) == ["a", "b"]
    assert names(page(core, resource_version=version, resource_version_match="Exact")) == ["a"]
    newest = page(core, limit=10, resource_version=version, resource_version_match="NotOlderThan")
    assert names(newest) == ["a", "b"]


def test_a_version_etcd_compacted_is_410_and_one_not_reached_504() -> None:
    with FakeApiServer(event_history=2) as server, api_client(server.url) as api:
        core = client.CoreV1Api(api)
        version = page(core)["metadata"]["resourceVersion"]
        for name in ("a", "b", "c"):
            core.create_namespaced_pod(NS, pod(name))
        with pytest.raises(ApiException) as err:
            page(core, limit=5, resource_version=version)
        assert (err.value.status, status(err.value)["message"]) == (410, TOO_OLD)
        ahead = str(int(server.store.resource_version) + 5)
        for call in (
            lambda: page(core, resource_version=ahead),
            lambda: core.list_namespaced_pod(
                NS, watch=True, resource_version=ahead, _preload_content=False
            ),
        ):
            with pytest.raises(ApiException) as err:
                call()
            assert err.value.status == 504
            assert status(err.value)["details"]["causes"] == [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ]


@pytest.mark.parametrize(
    "query, code, says",
    [
        ({"resource_version": "1", "_continue": "x"}, 400, "not allowed when using continue"),
        ({"_continue": "bm90IGpzb24"}, 400, "continue key is not valid"),
        ({"resource_version": "x"}, 400, "invalid resourceVersion"),
        ({"resource_version_match": "Exact"}, 422, "forbidden unless resourceVersion"),
        (
            {"resource_version": "0", "resource_version_match": "Exact"},
            422,
            'forbidden for resourceVersion "0"',
        ),
        (
            {"resource_version": "1", "resource_version_match": "Newest"},
            422,
            'Unsupported value: "Newest"',
        ),
        ({"send_initial_events": True}, 422, "sendInitialEvents is forbidden for list"),
    ],
)
def test_a_query_the_api_server_refuses_is_400_or_422(core, query, code, says) -> None:
    with pytest.raises(ApiException) as err:
        page(core, **query)
    assert err.value.status == code and says in status(err.value)["message"]


def test_a_continue_may_carry_version_zero(core) -> None:
    """What client-go's pager sends on: etcd refuses only a version that is not "" or "0"."""
    for name in ("a", "b"):
        core.create_namespaced_pod(NS, pod(name))
    first = page(core, limit=1)
    rest = page(core, resource_version="0", _continue=first["metadata"]["continue"])
    assert names(rest) == ["b"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_pages_through_a_list_with_its_own_pager(
    server: FakeApiServer, core, tmp_path: Path
) -> None:
    for i in range(5):
        core.create_namespaced_pod(NS, pod(f"p{i}"))
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    out = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "get", "pods", "-n", NS,
         "--chunk-size=2", "-o", "name"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split()  # fmt: skip
    assert out == [f"pod/p{i}" for i in range(5)]
    lists = [r for r in server.requests if r.method == "GET" and r.path.endswith("/pods")]
    assert len(lists) == 3


# --- the store's versions, as a property ---

_names = st.sampled_from(["a", "b", "c", "d"])
_writes = st.lists(st.tuples(st.sampled_from(["create", "label", "delete"]), _names), max_size=30)


@settings(max_examples=60, deadline=None)
@given(writes=_writes, history=st.integers(min_value=1, max_value=12))
def test_the_objects_at_a_version_are_what_a_list_then_showed(writes, history) -> None:
    store = ObjectStore(clock=lambda: 0.0, event_history=history)
    store.create(NAMESPACES, "", {"metadata": {"name": NS}})
    seen = {int(store.resource_version): store.list(PODS, None)}
    for n, (write, name) in enumerate(writes):
        exists = any(o["metadata"]["name"] == name for o in store.list(PODS, None))
        if write == "create" and not exists:
            store.create(PODS, NS, pod(name))
        elif write == "label" and exists:
            label = {"metadata": {"labels": {"n": str(n)}}}
            store.patch(PODS, NS, name, label, content_type="application/merge-patch+json")
        elif write == "delete" and exists:
            store.delete(PODS, NS, name)
        seen[int(store.resource_version)] = store.list(PODS, None)
    oldest = int(store.resource_version) - history
    for version, objects in seen.items():
        at = store.objects_at(PODS, None, version)
        if version >= oldest:
            assert at is not None and [obj for _, obj in at] == objects
