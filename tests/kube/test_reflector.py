"""A collection kept by list then watch, over the fake API server's real REST and watch
streams: it follows every write with one list, lists again when its version is gone, keeps
the last objects through an outage, and says so once they are too old to act on."""

import json
import logging
import threading
import time
from collections.abc import Callable, Container, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl

import pytest
from helpers import wait_for
from helpers.chart_rbac import client_with
from helpers.kube import api_client
from helpers.serving import serving
from kubernetes import client

from gpufleet.core.watch_state import Skipped
from gpufleet.kube import reflector as reflector_module
from gpufleet.kube.custom_objects import cluster_custom_objects
from gpufleet.kube.errors import KubeError, KubeErrorKind
from gpufleet.kube.reflector import Reflector
from gpufleet.lab.kubeapi.resources import RESOURCES
from gpufleet.lab.kubeapi.server import FakeApiServer

NS = "default"
PODS = next(r for r in RESOURCES if (r.group, r.plural) == ("", "pods"))


def pod(name: str, team: Any = "red") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"team": team}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }


def team(obj: dict[str, Any]) -> tuple[str, str]:
    label = obj["metadata"]["labels"]["team"]
    if label == "bad":  # an object of a shape its reader cannot use
        raise ValueError("a bad team")
    return obj["metadata"]["name"], label


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as fake:
        yield fake


@pytest.fixture
def watching(server: FakeApiServer) -> Iterator[tuple[Reflector, client.CoreV1Api]]:
    with api_client(server.url) as api:
        core = client.CoreV1Api(api)
        reflector = Reflector("pods", core.list_pod_for_all_namespaces, team, retry_seconds=0.05)
        reflector.start()
        try:
            yield reflector, core
        finally:
            reflector.stop()
            assert not reflector.thread.is_alive()


def teams(reflector: Reflector, stale_after: float = 60.0) -> dict[str, str] | None:
    """Name -> team; None while the reflector refuses to answer."""
    try:
        return dict(reflector.items(stale_after=stale_after))
    except KubeError:
        return None


def test_one_list_then_every_write_through_the_watch(watching) -> None:
    reflector, core = watching
    core.create_namespaced_pod(NS, pod("a"))
    assert wait_for(lambda: teams(reflector) == {"a": "red"})
    core.create_namespaced_pod(NS, pod("b", "blue"))
    core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"team": "gold"}}})
    wait_for(lambda: teams(reflector) == {"a": "gold", "b": "blue"})
    core.delete_namespaced_pod("b", NS, grace_period_seconds=0)
    wait_for(lambda: teams(reflector) == {"a": "gold"})
    assert reflector.lists == 1
    assert reflector.mapping() == {(NS, "a"): ("a", "gold")}


def test_a_version_the_server_no_longer_has_is_listed_again() -> None:
    """More writes between two polls of the watch than the server keeps: 410, a list."""
    with FakeApiServer(event_history=2) as server, api_client(server.url) as api:
        core = client.CoreV1Api(api)
        reflector = Reflector("pods", core.list_pod_for_all_namespaces, team)
        reflector.start()
        try:
            wait_for(lambda: teams(reflector) == {})
            wait_for(lambda: reflector.watches == 1)
            for i in range(20):  # on the store: no round trip between them
                server.store.create(PODS, NS, pod(f"p{i}"))
            wait_for(lambda: len(teams(reflector)) == 20)
            assert reflector.lists >= 2
        finally:
            reflector.stop()


def test_an_outage_keeps_the_last_objects_until_they_are_too_old(server, watching) -> None:
    reflector, core = watching
    core.create_namespaced_pod(NS, pod("a"))
    wait_for(lambda: teams(reflector) == {"a": "red"})
    server.stop()
    server.store.patch(  # while it is down (the store outlives the server)
        PODS,
        NS,
        "a",
        {"metadata": {"labels": {"team": "gold"}}},
        content_type="application/merge-patch+json",
    )

    def refused() -> KubeError | None:
        try:
            reflector.items(stale_after=0)
        except KubeError as err:
            return err
        return None

    err = wait_for(refused, what="the outage seen")
    assert err.kind is KubeErrorKind.UNAVAILABLE
    assert str(err).startswith("pods: watch down for ")
    assert teams(reflector) == {"a": "red"}  # within a reader's minute: the last objects
    server.start()
    wait_for(lambda: teams(reflector, stale_after=0) == {"a": "gold"}, what="caught up")


def test_a_first_read_that_cannot_list_says_why_at_once() -> None:
    with api_client("http://127.0.0.1:9") as api:
        reflector = Reflector("pods", client.CoreV1Api(api).list_pod_for_all_namespaces, team)
        reflector.start()
        try:
            with pytest.raises(KubeError) as caught:
                reflector.items(stale_after=60)
        finally:
            reflector.stop()
    assert caught.value.kind is KubeErrorKind.UNAVAILABLE
    assert str(caught.value).startswith("pods: never listed: ")


def test_an_object_that_does_not_reduce_costs_only_itself(server) -> None:
    skipped: list[Skipped] = []
    with api_client(server.url) as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod(NS, pod("a"))
        core.create_namespaced_pod(NS, pod("odd", "bad"))
        reflector = Reflector(
            "pods", core.list_pod_for_all_namespaces, team, on_skip=skipped.append
        )
        reflector.start()
        try:
            assert teams(reflector) == {"a": "red"}
            core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"team": "bad"}}})
            wait_for(lambda: teams(reflector) == {})
        finally:
            reflector.stop()
    assert skipped == [
        Skipped((NS, "odd"), "ValueError: a bad team"),
        Skipped((NS, "a"), "ValueError: a bad team"),
    ]


def test_a_reader_that_does_not_watch_lists_each_time(server) -> None:
    with api_client(server.url) as api:
        core = client.CoreV1Api(api)
        reflector = Reflector("pods", core.list_pod_for_all_namespaces, team)
        core.create_namespaced_pod(NS, pod("a"))
        assert reflector.read() == (("a", "red"),)
        core.delete_namespaced_pod("a", NS, grace_period_seconds=0)
        assert reflector.read() == ()
        assert (reflector.lists, reflector.watches) == (2, 0)
    # the newest, one answer each (as --watch=false did before pages)
    assert lists_asked(server) == [{}, {}]


class _HeldWatch(BaseHTTPRequestHandler):
    """A list of one pod, then a watch that sends a blank line and one event and then
    holds the connection open, silent: a proxy that stopped passing anything."""

    release = threading.Event()

    def do_GET(self) -> None:
        if "sendInitialEvents=" in self.path:  # as kube-apiserver 1.33 does by default
            self.send_response(422)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if "watch=" not in self.path:
            body = json.dumps({"metadata": {"resourceVersion": "1"}, "items": [pod("a")]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        event = json.dumps({"type": "ADDED", "object": pod("b", "blue")}).encode()
        for data in (b"\n", event + b"\n"):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()
        self.release.wait(30)

    def log_message(self, *args: object) -> None:
        pass


def test_a_watch_held_open_and_silent_counts_as_down_once_overdue() -> None:
    """The server should have ended it by its timeoutSeconds; still open, it is stuck, and
    the objects are refused then, not after the read timeout minutes later."""
    now = [0.0]
    with serving(_HeldWatch) as url, api_client(url) as api:
        core = client.CoreV1Api(api)
        reflector = Reflector(
            "pods",
            core.list_pod_for_all_namespaces,
            team,
            watch_seconds=60,
            clock=lambda: now[0],
        )
        reflector.start()
        try:
            # the blank line is skipped, the event after it applied
            wait_for(lambda: teams(reflector) == {"a": "red", "b": "blue"})
            now[0] = 60 + 10  # its shortest timeout (1x to 2x 60 s) and the grace
            assert teams(reflector, stale_after=0) == {"a": "red", "b": "blue"}
            now[0] = 120 + 10  # past the longest: overdue
            with pytest.raises(KubeError, match=r"^pods: watch down for \d+ s$"):
                reflector.items(stale_after=0)
            assert teams(reflector, stale_after=60) is not None
        finally:
            _HeldWatch.release.set()
            reflector.stop()


def test_a_stop_while_it_lists_opens_no_watch() -> None:
    with FakeApiServer(watch_list=False) as server, api_client(server.url) as api:
        server.faults.delay_seconds = 1.0
        reflector = Reflector("pods", client.CoreV1Api(api).list_pod_for_all_namespaces, team)
        reflector.start()
        reflector.stop(timeout_seconds=0)  # in its first request, most likely: not waited for
        reflector.thread.join(10)
        assert not reflector.thread.is_alive()
    assert "WATCH" not in [r.method for r in server.requests if r.path == "/api/v1/pods"]


@pytest.mark.parametrize("bookmark_seconds", [0.1, 60.0], ids=["bookmarks", "none"])
def test_bookmarks_spare_a_list_when_other_resources_fill_the_window(
    bookmark_seconds: float,
) -> None:
    """Writes to other resources pass the server's event window while no pod changes: a
    watch reopened from its last pod event is 410 and lists again; one reopened from a
    bookmark's version resumes."""
    with (
        FakeApiServer(event_history=3, bookmark_seconds=bookmark_seconds) as server,
        api_client(server.url) as api,
    ):
        core = client.CoreV1Api(api)
        core.create_namespaced_pod(NS, pod("a"))
        reflector = Reflector("pods", core.list_pod_for_all_namespaces, team, watch_seconds=1)
        reflector.start()
        try:
            wait_for(lambda: reflector.watches == 1)
            for i in range(10):  # past the window, none of them a pod's
                core.create_namespace({"metadata": {"name": f"team-{i}"}})
                time.sleep(0.2)  # apart: an open watch passes each (a burst overflows it)
            wait_for(lambda: reflector.watches >= 3, what="two watches ended by the server")
            assert teams(reflector) == {"a": "red"}
        finally:
            reflector.stop()
    if bookmark_seconds < 1:
        assert reflector.lists == 1
    else:  # each watch reopened past the window
        assert reflector.lists >= 2


def lists_asked(server: FakeApiServer) -> list[dict[str, str]]:
    """The query of each list of pods the server answered, in order."""
    return [
        dict(parse_qsl(r.query))
        for r in server.requests
        if r.path == "/api/v1/pods" and "watch=" not in r.query
    ]


def writes_while_down(server: FakeApiServer, names: list[str]) -> None:
    """Pods the open watch never sees, past the server's event window: its next is 410."""
    server.stop()
    for name in names:
        server.store.create(PODS, NS, pod(name))
    server.start()


def test_lists_ask_as_client_gos_reflector() -> None:
    """WatchList off (kube-apiserver 1.33's default): the streaming list is refused (422),
    once. The first list at "0", whole from the watch cache; after a 410 at the last
    version seen, not older than it (the cache again: no limit, which would send it to
    etcd), without asking for a streaming list again."""
    with (
        FakeApiServer(event_history=2, watch_list=False) as server,
        api_client(server.url) as api,
    ):
        core = client.CoreV1Api(api)
        reflector = Reflector("pods", core.list_pod_for_all_namespaces, team)
        reflector.start()
        try:
            wait_for(lambda: reflector.watches == 1)
            writes_while_down(server, [f"p{i}" for i in range(5)])
            wait_for(lambda: teams(reflector) is not None and len(teams(reflector)) == 5)
        finally:
            reflector.stop()
        asked = lists_asked(server)
        refused = [r for r in server.requests if r.status == 422]
    assert len(refused) == 1 and "sendInitialEvents=true" in refused[0].query
    assert asked[0] == {"resourceVersion": "0", "limit": "500"}
    assert asked[1:] == [{"resourceVersion": "2"}]  # the namespaces' two writes


def test_a_server_that_pages_the_first_list_gets_every_list_in_pages(monkeypatch) -> None:
    """No watch cache: the first list comes in pages, and a relist at the version last seen
    asks for pages too, so exactly that version, which the server no longer has: it lists
    the newest then."""
    monkeypatch.setattr(reflector_module, "PAGE_SIZE", 2)
    with (
        FakeApiServer(event_history=3, watch_cache=False, watch_list=False) as server,
        api_client(server.url) as api,
    ):
        core = client.CoreV1Api(api)
        for i in range(5):
            core.create_namespaced_pod(NS, pod(f"p{i}"))
        reflector = Reflector("pods", core.list_pod_for_all_namespaces, team)
        reflector.start()
        try:
            wait_for(lambda: reflector.watches == 1)
            assert len(teams(reflector)) == 5
            writes_while_down(server, [f"p{i}" for i in range(5, 10)])
            wait_for(lambda: teams(reflector) is not None and len(teams(reflector)) == 10)
        finally:
            reflector.stop()
        asked = lists_asked(server)
    assert [q.get("resourceVersion") for q in asked[:3]] == ["0", None, None]  # 3 pages
    assert all(q["limit"] == "2" for q in asked)
    assert asked[3] == {"resourceVersion": "7", "limit": "2"}  # 410: compacted
    assert [q.get("resourceVersion") for q in asked[4:]] == [None] * 5  # the newest, paged


def test_a_version_the_server_has_not_reached_lists_the_newest() -> None:
    """The API server came back from an etcd backup, older than the version the reflector
    has: the watch and the list at that version are 504 ResourceVersionTooLarge, and it
    lists the newest."""
    with FakeApiServer(watch_list=False) as first, api_client(first.url) as api:
        core = client.CoreV1Api(api)
        for i in range(5):
            core.create_namespaced_pod(NS, pod(f"p{i}"))
        reflector = Reflector("pods", core.list_pod_for_all_namespaces, team, retry_seconds=0.05)
        reflector.start()
        try:
            wait_for(lambda: reflector.watches == 1)
            first.stop()
            port = int(first.url.rsplit(":", 1)[1])
            with FakeApiServer(port=port, watch_list=False) as restored:
                restored.store.create(PODS, NS, pod("only"))
                wait_for(lambda: teams(reflector, stale_after=0) == {"only": "red"})
                asked = lists_asked(restored)
        finally:
            reflector.stop()
    assert asked[0] == {"resourceVersion": "7"}  # the version last seen: too large
    assert asked[1] == {"limit": "500"}  # the newest, from etcd


def watches_asked(server: FakeApiServer) -> list[dict[str, str]]:
    return [dict(parse_qsl(r.query)) for r in server.requests if r.method == "WATCH"]


def test_the_first_objects_come_by_a_streaming_list(server) -> None:
    """Where the server streams lists: no list at all, one watch that sends the objects,
    marks their end, and goes on with the changes."""
    with api_client(server.url) as api:
        core = client.CoreV1Api(api)
        for name in ("a", "b"):
            core.create_namespaced_pod(NS, pod(name))
        reflector = Reflector("pods", core.list_pod_for_all_namespaces, team)
        reflector.start()
        try:
            assert teams(reflector) == {"a": "red", "b": "red"}
            core.create_namespaced_pod(NS, pod("c", "blue"))
            wait_for(lambda: teams(reflector) == {"a": "red", "b": "red", "c": "blue"})
            assert (reflector.lists, reflector.watches) == (1, 1)
        finally:
            reflector.stop()
    assert lists_asked(server) == []
    (asked,) = watches_asked(server)
    assert asked["sendInitialEvents"] == "true" and not asked.get("resourceVersion")
    assert asked["resourceVersionMatch"] == "NotOlderThan"
    assert asked["allowWatchBookmarks"] == "true"


class _SlowStream(BaseHTTPRequestHandler):
    """A streaming list that sends two pods, then waits for `release` before the bookmark
    marking their end (or, with `end_early`, ends there without one); lists answer one
    pod, and plain watches hold, silent."""

    sent = threading.Event()
    release = threading.Event()
    end_early = False

    def do_GET(self) -> None:
        if "watch=" not in self.path:
            body = json.dumps({"metadata": {"resourceVersion": "9"}, "items": [pod("x")]})
            self._answer(body.encode())
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if "sendInitialEvents=" in self.path:
            for name in ("a", "b"):
                self._chunk({"type": "ADDED", "object": pod(name)})
            self.sent.set()
            self.release.wait(30)
            if self.end_early:
                self.wfile.write(b"0\r\n\r\n")
                return
            meta = {"resourceVersion": "7", "annotations": {"k8s.io/initial-events-end": "true"}}
            self._chunk({"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": meta}})
        self.release.wait(30)

    def _chunk(self, event: dict) -> None:
        data = json.dumps(event).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_stream() -> Iterator[tuple[type[_SlowStream], str]]:
    handler = type("Handler", (_SlowStream,), {"sent": threading.Event(),
                   "release": threading.Event()})  # fmt: skip
    with serving(handler) as url:
        yield handler, url
        handler.release.set()


@pytest.mark.parametrize("end_early", [False, True], ids=["ended", "cut-short"])
def test_a_streaming_lists_objects_are_kept_apart_until_their_end(slow_stream, end_early) -> None:
    """Readers see the last objects (none yet) until the bookmark marking the end; a stream
    that ends before it is no streaming list, and the collection is listed."""
    handler, url = slow_stream
    handler.end_early = end_early
    expected = {"x": "red"} if end_early else {"a": "red", "b": "red"}

    def check(reflector: Reflector) -> bool:
        if not handler.release.is_set():
            assert handler.sent.wait(10)
            time.sleep(0.2)  # the client has read both pods by now
            assert reflector.mapping() == {} and reflector.lists == 0
            handler.release.set()
        return teams(reflector) == expected and reflector.lists == 1

    run_pods(url, check)


def test_rbac_without_watch_still_lists(caplog) -> None:
    """A role with `list` but not `watch` (a chart from before): the streaming list is
    403, so each attempt lists instead, and readers get the objects (their watch failing
    is counted and retried)."""
    failures: list[KubeError] = []
    with FakeApiServer() as server, api_client(server.url) as admin:
        rbac = client.RbacAuthorizationV1Api(admin)
        rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}
        rbac.create_cluster_role({"metadata": {"name": "list-pods"}, "rules": [rule]})
        rbac.create_cluster_role_binding(
            {
                "metadata": {"name": "list-pods"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "list-pods"},
                "subjects": [{"kind": "User", "name": "lister"}],
            }
        )  # fmt: skip
        client.CoreV1Api(admin).create_namespaced_pod(NS, pod("a"))
        server.add_user("listers", "lister")
        with client_with(server, "listers") as api:
            call = client.CoreV1Api(api).list_pod_for_all_namespaces
            reflector = Reflector(
                "pods", call, team, on_failure=failures.append, retry_seconds=0.02
            )
            reflector.start()
            try:
                assert teams(reflector) == {"a": "red"}
                wait_for(lambda: len(failures) >= 3, what="the watch's 403s")
            finally:
                reflector.stop()
    assert {f.kind for f in failures} == {KubeErrorKind.FORBIDDEN}
    # a line for the first streaming list refused, none for the same refusal again
    assert caplog.text.count("pods: streaming list failed, listed instead: 403") == 1


class _Expiring(BaseHTTPRequestHandler):
    """Lists answer one pod; every watch is answered 410 at once. Streaming lists send
    the pod and mark its end, or, those numbered in `cut` (from 1), end before (with
    `fail`, on that ERROR event); without `streams` they are 422, as 1.33's. `on_list`
    runs as each list is answered."""

    asked: list[str]
    cut: Container[int] = ()
    fail: dict | None = None
    streams = True
    on_list: Callable[[], None] = staticmethod(lambda: None)

    def do_GET(self) -> None:
        if "watch=" not in self.path:
            self.asked.append("list")
            self.on_list()
            body = json.dumps({"metadata": {"resourceVersion": "9"}, "items": [pod("a")]})
            _answer(self, body.encode())
            return
        streaming = "sendInitialEvents=" in self.path
        self.asked.append("stream" if streaming else "watch")
        if streaming and not self.streams:
            self.send_response(422)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        events = [{"type": "ERROR", "object": {"code": 410, "message": "too old"}}]
        if streaming:
            meta = {"resourceVersion": "9", "annotations": {"k8s.io/initial-events-end": "true"}}
            events = [{"type": "ADDED", "object": pod("a")}]
            if self.asked.count("stream") not in self.cut:
                events.append({"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": meta}})
            elif self.fail is not None:
                events.append({"type": "ERROR", "object": self.fail})
        _answer(self, b"".join(json.dumps(e).encode() + b"\n" for e in events))

    def log_message(self, *args: object) -> None:
        pass


def _answer(handler: BaseHTTPRequestHandler, body: bytes) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@pytest.fixture
def expiring() -> Iterator[tuple[type[_Expiring], str]]:
    handler = type("Handler", (_Expiring,), {"asked": []})
    with serving(handler) as url:
        yield handler, url


def run_pods(url: str, until: Callable[[Reflector], object], **kw: Any) -> None:
    """A pods reflector against `url`, running until `until(reflector)` holds (or, where
    it returns None, once it has returned), then stopped."""
    with api_client(url) as api:
        reflector = Reflector("pods", client.CoreV1Api(api).list_pod_for_all_namespaces, team, **kw)
        reflector.start()
        try:
            wait_for(lambda: until(reflector) is not False)
        finally:
            reflector.stop()


def test_a_watch_answered_410_at_once_backs_off(expiring) -> None:
    """Not a hot loop of lists: a 410 that comes at once counts as a failure in a row."""
    handler, url = expiring
    handler.streams = False
    run_pods(url, lambda _: time.sleep(1.5), retry_seconds=0.2)
    assert 2 <= handler.asked.count("list") <= 6


def test_a_stream_cut_short_is_listed_that_time_and_streamed_again(expiring, caplog) -> None:
    """Listed instead with a line, as client-go warns; a line again for the next one cut
    short once a stream has worked between them."""
    handler, url = expiring
    handler.cut = {1, 3}
    run_pods(url, lambda _: handler.asked.count("stream") >= 4, retry_seconds=0.05)
    assert handler.asked[:4] == ["stream", "list", "watch", "stream"]
    said = "pods: streaming list failed, listed instead: it ended before the bookmark"
    assert caplog.text.count(said) == 2


def test_a_stream_whose_objects_never_end_is_listed(slow_stream, monkeypatch, caplog) -> None:
    """A server that holds the stream and never marks the end of its objects: given up at
    SYNC_SECONDS, and listed."""
    monkeypatch.setattr(reflector_module, "SYNC_SECONDS", 0.5)
    run_pods(slow_stream[1], lambda r: teams(r) == {"x": "red"})  # the list's pod
    assert "listed instead: its objects had not ended within 0.5 s" in caplog.text


def test_a_crd_removed_while_watched_is_not_installed_not_a_failure() -> None:
    failures: list[KubeError] = []
    buffers = ("autoscaling.x-k8s.io", "v1beta1", "capacitybuffers")
    with (
        FakeApiServer(install=("capacitybuffers.autoscaling.x-k8s.io",)) as server,
        api_client(server.url) as api,
    ):
        reflector = Reflector(
            "capacitybuffers",
            cluster_custom_objects(api, *buffers),
            lambda obj: obj["metadata"]["name"],
            on_failure=failures.append,
            absent_ok=True,
        )
        reflector.start()
        try:
            assert reflector.items(stale_after=60) == ()
            server.uninstall("capacitybuffers.autoscaling.x-k8s.io")

            def not_installed() -> bool:
                try:
                    reflector.items(stale_after=60)
                except KubeError as err:
                    return err.kind is KubeErrorKind.NOT_FOUND
                return False

            wait_for(not_installed, what="the CRD's 404")
        finally:
            reflector.stop()
    assert failures == []


@pytest.mark.parametrize("code", [500, 410])
def test_a_streaming_list_failing_before_its_end_is_listed_that_time(
    expiring, code, caplog
) -> None:
    """An ERROR event before the objects' end (a 410 too): that time a list answers. A
    line says why, but for a 410: the version is gone, a routine relist."""
    handler, url = expiring
    handler.cut, handler.fail = {1}, {"code": code, "message": "injected"}
    run_pods(url, lambda r: teams(r) == {"a": "red"}, retry_seconds=0.05)
    assert handler.asked[:2] == ["stream", "list"]
    said = "pods: streaming list failed, listed instead: WatchFailed: 500: injected"
    assert caplog.text.count(said) == (code == 500)


def test_a_410_at_once_after_a_slow_list_backs_off(expiring) -> None:
    """Short is measured from the watch's start, not the list's: a list of a large
    cluster takes seconds (here on the reflector's clock, moved on by each list)."""
    handler, url = expiring
    now = [0.0]

    def slow() -> None:
        now[0] += 2.0

    handler.streams, handler.on_list = False, staticmethod(slow)
    run_pods(url, lambda _: time.sleep(1.0), retry_seconds=0.05, clock=lambda: now[0])
    assert 2 <= handler.asked.count("list") <= 7  # 0.05 s doubling; unbounded before


def test_streams_cut_short_three_times_in_a_row_are_given_up(expiring, caplog) -> None:
    caplog.set_level(logging.INFO, logger="gpufleet.kube.reflector")
    handler, url = expiring
    handler.cut = range(1, 100)
    run_pods(url, lambda _: handler.asked.count("list") >= 5, retry_seconds=0.01)
    assert handler.asked.count("stream") == reflector_module.CUT_SHORT_LIMIT == 3
    assert caplog.text.count("listed instead: it ended before the bookmark") == 1
    assert "pods: listed from now on, not streamed: 3 streaming lists" in caplog.text


class _DownThenUp(BaseHTTPRequestHandler):
    """Lists fail with 500 `down` times, then answer one pod; streaming lists are 422 (so
    each failure is one request), and watches are held until the client leaves."""

    down = 0
    lists = 0

    def do_GET(self) -> None:
        if "sendInitialEvents=" in self.path:
            status = 422
        elif "watch=" in self.path:
            time.sleep(1)
            status = 200
        else:
            type(self).lists += 1
            status = 500 if self.lists <= self.down else 200
        if status != 200 or "watch=" in self.path:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps({"metadata": {"resourceVersion": "9"}, "items": [pod("a")]})
        _answer(self, body.encode())

    def log_message(self, *args: object) -> None:
        pass


def test_the_thread_outlives_any_number_of_failures_in_a_row() -> None:
    """Its wait doubled as a float: at the 1,025th failure in a row the product overflowed
    and the thread died, so the objects froze for good (about 85 minutes of an API server
    down for the exporter, retrying every 5 s)."""
    handler = type("Handler", (_DownThenUp,), {"down": 1100, "lists": 0})
    with serving(handler) as url:
        run_pods(url, lambda r: teams(r) == {"a": "red"}, retry_seconds=1e-4,
                 max_retry_seconds=1e-4)  # fmt: skip
    assert handler.lists == 1101
