"""One bad client never takes the fake API server, its other clients or the lab's cluster
down, nor floods its log: input kube-apiserver refuses gets kube-apiserver's 4xx `Status`,
and what nothing foresaw one 500 `Status` and a few log lines. Raw HTTP over loopback,
since the official client would not send most of these."""

import asyncio
import http.client
import json
import logging
import re
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import stalled_connections_answer, wait_for

from gpufleet.lab.kubeapi import server as server_module
from gpufleet.lab.kubeapi.server import MAX_BODY_BYTES, FakeApiServer
from gpufleet.lab.kubeapi.store import ObjectStore
from gpufleet.logs import LOG_BURST

CM = "/api/v1/namespaces/default/configmaps"
DEPLOYMENT = "/apis/apps/v1/namespaces/default/deployments/d"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
SAR = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@pytest.fixture(scope="module")
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as s:
        labels = {"app": "d"}
        spec = {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        }
        assert (
            call(
                s, "POST", DEPLOYMENT.rsplit("/", 1)[0], {"metadata": {"name": "d"}, "spec": spec}
            )[0]
            == 201
        )
        assert call(s, "POST", CM, {"metadata": {"name": "c", "labels": {"app": "x"}}})[0] == 201
        yield s


def call(
    server: FakeApiServer,
    method: str,
    path: str,
    body: Any = None,
    *,
    raw: bytes | None = None,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    connection = http.client.HTTPConnection(
        "127.0.0.1", int(server.url.rsplit(":", 1)[1]), timeout=10
    )
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        connection.request(
            method, path, body=data, headers={"Content-Type": content_type, **(headers or {})}
        )
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()


def _deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def _copies(n: int) -> list[dict[str, Any]]:
    """Each copy doubles the data: about a kilobyte of patch asks for gigabytes."""
    ops: list[dict[str, Any]] = [{"op": "add", "path": "/data", "value": {"a": "x" * 64}}]
    ops += [{"op": "copy", "from": "/data", "path": f"/data/k{i}"} for i in range(n)]
    return ops


@pytest.mark.parametrize(
    ("method", "path", "body", "content_type", "code", "text"),
    [
        ("POST", CM, [1, 2], "application/json", 400, "cannot unmarshal array"),
        ("POST", CM, "text", "application/json", 400, "cannot unmarshal string"),
        ("POST", CM, {"metadata": "x"}, "application/json", 400, "metadata of type v1.ObjectMeta"),
        (
            "POST",
            CM,
            {"metadata": {"name": 7}},
            "application/json",
            400,
            "metadata.name of type string",
        ),
        (
            "POST",
            CM,
            {"metadata": {"name": "b", "labels": "oops"}},
            "application/json",
            400,
            "metadata.labels",
        ),
        (
            "POST",
            CM,
            {"metadata": {"name": "b", "labels": {"a": 1}}},
            "application/json",
            400,
            "metadata.labels.a",
        ),
        (
            "POST",
            CM,
            {"metadata": {"name": "b", "namespace": "other"}},
            "application/json",
            400,
            "does not match the namespace",
        ),
        (
            "PUT",
            f"{CM}/c",
            {"metadata": {"name": "other"}},
            "application/json",
            400,
            "does not match the name on the URL",
        ),
        ("PUT", f"{CM}/c", {"metadata": None}, "application/json", 200, ""),
        ("PATCH", DEPLOYMENT, [1], MERGE, 400, "cannot unmarshal array"),
        ("PATCH", DEPLOYMENT, {"spec": "x"}, MERGE, 400, "spec of type struct"),
        (
            "PATCH",
            DEPLOYMENT,
            {"spec": {"replicas": "three"}},
            MERGE,
            400,
            "spec.replicas of type int32",
        ),
        (
            "PATCH",
            DEPLOYMENT,
            {"spec": {"replicas": 10**30}},
            MERGE,
            400,
            "spec.replicas of type int32",
        ),
        ("PATCH", DEPLOYMENT, {"spec": {"replicas": -1}}, MERGE, 422, "greater than or equal to 0"),
        (
            "PATCH",
            DEPLOYMENT,
            [{"op": "add", "path": 5, "value": 1}],
            JSON_PATCH,
            400,
            "bad json patch operation",
        ),
        (
            "PATCH",
            DEPLOYMENT,
            [{"op": "move", "path": "/x"}],
            JSON_PATCH,
            400,
            "bad json patch operation",
        ),
        (
            "PATCH",
            DEPLOYMENT,
            [{"op": "add", "path": "/spec/template/spec/containers/abc", "value": {}}],
            JSON_PATCH,
            422,
            "bad list index",
        ),
        (
            "PATCH",
            DEPLOYMENT,
            [{"op": "replace", "path": "", "value": 5}],
            JSON_PATCH,
            400,
            "cannot unmarshal number",
        ),
        (
            "PATCH",
            DEPLOYMENT,
            [{"op": "remove", "path": ""}],
            JSON_PATCH,
            422,
            "the whole document",
        ),
        (
            "PATCH",
            DEPLOYMENT,
            [{"op": "test", "path": "/x", "value": 1}] * 10_001,
            JSON_PATCH,
            413,
            "maximum operations",
        ),
        ("PATCH", f"{CM}/c", _copies(40), JSON_PATCH, 422, "accumulated size of copied values"),
        ("PUT", f"{DEPLOYMENT}/scale", [], "application/json", 400, "cannot unmarshal array"),
        (
            "PATCH",
            f"{DEPLOYMENT}/scale",
            {"spec": {"replicas": 10**30}},
            MERGE,
            400,
            "of type int32",
        ),
        (
            "PATCH",
            f"{DEPLOYMENT}/scale",
            [{"op": "replace", "path": "", "value": 5}],
            JSON_PATCH,
            400,
            "cannot unmarshal number",
        ),
        (
            "POST",
            SAR,
            {"spec": "x"},
            "application/json",
            400,
            "spec of type v1.SubjectAccessReviewSpec",
        ),
        (
            "POST",
            SAR,
            {"spec": {"groups": 5}},
            "application/json",
            400,
            "spec.groups of type []string",
        ),
        (
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {"metadata": {"name": "b"}, "subjects": "oops"},
            "application/json",
            400,
            "subjects of type []v1.Subject",
        ),
        (
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            {"metadata": {"name": "r"}, "rules": [{"verbs": "get"}]},
            "application/json",
            400,
            "rules.0.verbs of type []string",
        ),
        (
            "POST",
            LEASES,
            {"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 2**40}},
            "application/json",
            400,
            "of type int32",
        ),
        (
            "GET",
            f"{CM}?limit=99999999999999999999999",
            None,
            "application/json",
            400,
            "invalid limit",
        ),
        (
            "GET",
            f"{CM}?resourceVersion=%C2%B2",
            None,
            "application/json",
            400,
            "invalid resourceVersion",
        ),
        (
            "GET",
            f"{CM}?watch=1&resourceVersion=%C2%B2",
            None,
            "application/json",
            400,
            "invalid resourceVersion",
        ),
    ],
)
def test_what_kube_apiserver_refuses_is_a_4xx_status(
    server: FakeApiServer,
    method: str,
    path: str,
    body: Any,
    content_type: str,
    code: int,
    text: str,
) -> None:
    """Each of these was a 500 and a logged traceback, or (the int32s, a label that is not
    a string) a 2xx that broke later readers: selector lists, RBAC, the lab's cluster."""
    status, answer = call(server, method, path, body, content_type=content_type)
    assert status == code, answer
    if code >= 400:
        assert answer["kind"] == "Status" and answer["code"] == code
        assert text in answer["message"]


@pytest.mark.parametrize(
    ("method", "path", "content_type", "code"),
    [
        ("POST", CM, "text/plain", 415),
        ("POST", CM, "application/yaml", 415),  # kube-apiserver's, not decoded here
        ("POST", SAR, "application/x-www-form-urlencoded", 415),
        ("PUT", f"{CM}/c", "text/plain", 415),
        ("DELETE", f"{CM}/c", "text/plain", 415),
        ("POST", CM, "application/json; charset=utf-8", 201),
        ("POST", CM, "Application/JSON", 201),
    ],
)
def test_a_body_kube_apiserver_cannot_decode_by_its_type_is_a_415(
    server: FakeApiServer, method: str, path: str, content_type: str, code: int
) -> None:
    """Every body was decoded as JSON whatever its Content-Type: a client sending another
    type passed here and got 415 UnsupportedMediaType from kube-apiserver."""
    bodies = {
        CM: {"metadata": {"name": re.sub("[^a-z0-9]+", "-", content_type.lower())}},
        SAR: {"spec": {"user": "u", "resourceAttributes": {"verb": "get"}}},
        f"{CM}/c": {"metadata": {"name": "c"}} if method == "PUT" else {},
    }
    status, answer = call(server, method, path, bodies[path], content_type=content_type)
    assert status == code, answer
    if code == 415:
        assert answer["reason"] == "UnsupportedMediaType"
        assert answer["message"].startswith("the body of the request was in an unknown format")


@pytest.mark.parametrize(
    ("path", "code"),
    [
        (f"{CM}?fieldSelector=data%3Dx", 400),
        (f"{CM}?watch=1&fieldSelector=no.such.field%3Dx", 400),
        (f"{CM}?fieldSelector=metadata.name%3Dc", 200),
        ("/api/v1/pods?fieldSelector=spec.nodeName%21%3Dn1", 200),
        ("/api/v1/pods?fieldSelector=spec.containers%3Dx", 400),
        ("/api/v1/nodes?fieldSelector=metadata.namespace%3Dx", 400),
        ("/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Dgpu.nvidia.com", 200),
    ],
)
def test_a_field_selector_kube_apiserver_does_not_serve_is_a_400(
    server: FakeApiServer, path: str, code: int
) -> None:
    """Every field was taken, so a daemon selecting on one no strategy serves passed here
    and failed on a cluster."""
    status, answer = call(server, "GET", path)
    assert status == code, answer
    if code == 400:
        assert answer["message"].startswith("field label not supported: ")


def test_a_body_past_3_mib_or_json_too_deep_is_refused(server: FakeApiServer) -> None:
    status, answer = call(server, "POST", CM, raw=b" " * (MAX_BODY_BYTES + 1))
    assert (status, answer["reason"]) == (413, "RequestEntityTooLarge")
    assert answer["message"] == f"Request entity too large: limit is {MAX_BODY_BYTES}"
    status, answer = call(server, "POST", CM, raw=_deep(100_000))
    assert (status, answer["message"]) == (400, "invalid JSON: exceeded max depth")


def test_a_refused_label_leaves_selector_lists_working(server: FakeApiServer) -> None:
    """A ConfigMap labelled "oops" was stored: every list and watch of ConfigMaps with a
    label selector then answered 500."""
    assert call(server, "POST", CM, {"metadata": {"name": "s", "labels": {"app": "s"}}})[0] == 201
    assert call(server, "POST", CM, {"metadata": {"name": "p", "labels": "oops"}})[0] == 400
    status, answer = call(server, "GET", f"{CM}?labelSelector=app%3Ds")
    assert status == 200 and [i["metadata"]["name"] for i in answer["items"]] == ["s"]


def test_a_refused_binding_leaves_rbac_answering(server: FakeApiServer) -> None:
    server.add_user("alice-token", "alice")
    bad = {
        "metadata": {"name": "poison"},
        "subjects": "oops",
        "roleRef": {"kind": "ClusterRole", "name": "x"},
    }
    assert (
        call(server, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", bad)[0]
        == 400
    )
    status, _ = call(server, "GET", CM, headers={"Authorization": "Bearer alice-token"})
    assert status == 403  # RBAC still evaluated: alice holds no role


def test_an_update_without_a_resource_version_is_refused_where_kube_apiserver_does(
    server: FakeApiServer,
) -> None:
    """A Lease's and a custom resource's strategies allow no unconditional update; a
    ConfigMap's does."""
    lease = {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}}
    assert call(server, "POST", LEASES, lease)[0] == 201
    status, answer = call(server, "PUT", f"{LEASES}/l", lease)
    assert status == 422
    assert "metadata.resourceVersion: Invalid value: 0x0: must be specified" in answer["message"]
    assert call(server, "PUT", f"{CM}/c", {"metadata": {"name": "c"}})[0] == 200


def test_what_nothing_foresaw_is_one_500_each_and_a_few_log_lines(
    server: FakeApiServer, monkeypatch, caplog
) -> None:
    """Such a request was aiohttp's text/plain 500 and a traceback logged every time."""
    caplog.set_level(logging.ERROR, logger=server_module.__name__)

    async def broken(state, request):
        raise RuntimeError("a bug")

    monkeypatch.setattr(server_module, "_answer", broken)
    for _ in range(3 * LOG_BURST):
        status, answer = call(server, "GET", "/version")
        assert (status, answer["reason"]) == (500, "InternalError")
        assert answer["message"] == "Internal error occurred: RuntimeError: a bug"
    assert len(caplog.records) == LOG_BURST
    assert caplog.records[0].exc_info is not None
    monkeypatch.undo()
    assert call(server, "GET", "/version")[0] == 200
    assert sum(r.status == 500 for r in server.requests) == 3 * LOG_BURST


def test_a_watch_ends_when_its_client_goes(server: FakeApiServer) -> None:
    """aiohttp cancels no handler when a client disconnects, and a quiet collection writes
    nothing that would fail: each such watch ran on for its 30 minutes."""

    async def tasks() -> int:
        return len(asyncio.all_tasks())

    before = server.run_async(tasks())
    port = int(server.url.rsplit(":", 1)[1])
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(
                b"GET /api/v1/namespaces/default/events?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n"
            )
            assert sock.recv(64).startswith(b"HTTP/1.1 200")
    wait_for(lambda: server.run_async(tasks()) <= before, what="the watches ended")


def test_a_watch_that_stops_reading_does_not_stop_the_stop() -> None:
    """Its handler, blocked writing to a full socket, made stop raise TimeoutError with
    the loop still running, and the next start ran a second one."""
    with FakeApiServer() as server:
        port = int(server.url.rsplit(":", 1)[1])
        stalled = socket.create_connection(("127.0.0.1", port))
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.sendall(
            b"GET /api/v1/namespaces/default/configmaps?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        big = {"metadata": {"name": "big"}, "data": {"k": "x" * 500_000}}
        assert call(server, "POST", CM, big)[0] == 201
        for i in range(20):  # more than the socket buffers: the watch blocks on the writes
            patch = {"data": {"k": str(i) * 500_000}}
            assert call(server, "PATCH", f"{CM}/big", patch, content_type=MERGE)[0] == 200
        server.stop()
        server.start()
        assert call(server, "GET", "/version")[0] == 200
        stalled.close()


def test_a_connection_stalled_before_its_request_is_closed_and_a_watch_is_not(
    monkeypatch,
) -> None:
    """aiohttp kept a connection that never sent a request for an hour: about a thousand of
    them held every descriptor of the lab's process. kube-apiserver closes them (its idle
    and read-header timeouts); a watch, a request in progress, outlives both."""
    monkeypatch.setattr(server_module, "IDLE_SECONDS", 0.3)
    with FakeApiServer() as server:
        port = int(server.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as watch:
            watch.sendall(
                b"GET /api/v1/namespaces/default/configmaps?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n"
            )
            assert watch.recv(64).startswith(b"HTTP/1.1 200")
            assert stalled_connections_answer(port) == (b"", b"")  # the watch is older still
            assert call(server, "POST", CM, {"metadata": {"name": "late"}})[0] == 201
            seen = b""
            while b'"late"' not in seen:
                chunk = watch.recv(4096)
                assert chunk, "the watch was closed"
                seen += chunk


def test_events_since_reads_the_newest_events_only() -> None:
    store = ObjectStore(event_history=5)
    namespaces = server_module._NAMESPACES
    for i in range(12):
        store.create(namespaces, "", {"metadata": {"name": f"n{i}"}})
    assert store.events_since(12) == () and store.events_since(40) == ()
    assert [e.version for e in store.events_since(9)] == [10, 11, 12]
    assert [e.version for e in store.events_since(7)] == [8, 9, 10, 11, 12]
    assert store.events_since(6) is None  # version 7 is no longer kept: 410
