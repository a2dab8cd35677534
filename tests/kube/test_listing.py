"""Lists in pages as client-go's pager makes them, over the fake API server's real REST: every
page asked for in turn, and the list read again whole when the server loses its version
between two pages."""

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl

import pytest
from helpers.kube import api_client
from kubernetes import client

from gpufleet.kube.errors import KubeError, KubeErrorKind
from gpufleet.kube.listing import Pages, list_in_pages, list_objects, version_unavailable
from gpufleet.lab.kubeapi.server import FakeApiServer

NS = "default"


def pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}}


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer(event_history=3, watch_cache=False) as fake:
        yield fake


@pytest.fixture
def core(server: FakeApiServer) -> Iterator[client.CoreV1Api]:
    with api_client(server.url) as api:
        yield client.CoreV1Api(api)


def asked(server: FakeApiServer) -> list[dict[str, str]]:
    return [
        dict(parse_qsl(r.query))
        for r in server.requests
        if r.method == "GET" and r.path.endswith("/pods")
    ]


def names(items: list[Any]) -> list[str]:
    return [p["metadata"]["name"] for p in items]


def test_every_page_in_turn(server, core) -> None:
    for i in range(5):
        core.create_namespaced_pod(NS, pod(f"p{i}"))
    call = core.list_pod_for_all_namespaces
    pages = list_in_pages(call, lambda p: p, limit=2)
    assert pages.paged and pages.version == server.store.resource_version
    assert asked(server) == [{"limit": "2"}]  # the first page only, until read
    assert names(list(pages)) == [f"p{i}" for i in range(5)]
    assert [q.keys() for q in asked(server)[1:]] == [{"limit", "continue"}] * 2
    items, version = list_objects(call)
    assert names(items) == [f"p{i}" for i in range(5)] and version == pages.version


def test_a_version_lost_between_pages_is_read_again_whole(server, core) -> None:
    for i in range(3):
        core.create_namespaced_pod(NS, pod(f"p{i}"))
    uses = []

    def use(pages: Pages) -> list[str]:
        uses.append(pages.paged)
        found = []
        for item in pages:
            found.append(item["metadata"]["name"])
            if len(uses) == 1 and len(found) == 1:  # between the pages: past the window
                for i in range(3, 7):
                    core.create_namespaced_pod(NS, pod(f"p{i}"))
        return found

    assert list_in_pages(core.list_pod_for_all_namespaces, use, limit=1) == [
        f"p{i}" for i in range(7)
    ]
    assert uses == [True, False]
    assert asked(server)[-1] == {}  # whole, at the version first asked (the newest)


def test_an_answer_that_is_no_list_is_invalid() -> None:
    def answer(**_: Any) -> Any:
        class Answer:
            data = b'{"metadata": {"continue": 5}, "items": []}'

        return Answer()

    with pytest.raises(KubeError, match=r"metadata\.continue") as err:
        list_objects(answer)
    assert err.value.kind is KubeErrorKind.INVALID


def test_a_version_gone_or_not_reached_is_told_apart(server, core) -> None:
    ahead = str(int(server.store.resource_version) + 9)
    with pytest.raises(KubeError) as too_large:
        list_in_pages(core.list_pod_for_all_namespaces, list, resource_version=ahead)
    assert too_large.value.causes == ("ResourceVersionTooLarge",)
    for i in range(4):
        core.create_namespaced_pod(NS, pod(f"p{i}"))
    with pytest.raises(KubeError) as gone:
        list_in_pages(core.list_pod_for_all_namespaces, list, resource_version="1", limit=2)
    assert gone.value.status == 410
    assert version_unavailable(too_large.value) and version_unavailable(gone.value)
    assert not version_unavailable(KubeError(KubeErrorKind.UNAVAILABLE, "503", status=503))


def test_no_page_is_asked_for_once_its_reader_stops(server, core) -> None:
    for i in range(3):
        core.create_namespaced_pod(NS, pod(f"p{i}"))
    stopping = []

    def use(pages: Pages) -> list[Any]:
        stopping.append(True)  # the reader stops while it reads the first page
        return list(pages)

    with pytest.raises(KubeError, match="stopped between pages"):
        list_in_pages(
            core.list_pod_for_all_namespaces, use, limit=1, stopped=lambda: bool(stopping)
        )
    assert len(asked(server)) == 1
