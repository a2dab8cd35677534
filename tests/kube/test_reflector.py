"""A collection kept by list then watch, over the fake API server's real REST and watch
streams: it follows every write with one list, lists again when its version is gone, keeps
the last objects through an outage, and says so once they are too old to act on."""

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from helpers import wait_for
from helpers.kube import api_client
from kubernetes import client

from gpufleet.core.watch_state import Skipped
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


class _HeldWatch(BaseHTTPRequestHandler):
    """A list of one pod, then a watch that sends a blank line and one event and then
    holds the connection open, silent: a proxy that stopped passing anything."""

    release = threading.Event()

    def do_GET(self) -> None:
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
    http = ThreadingHTTPServer(("127.0.0.1", 0), _HeldWatch)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{http.server_address[1]}"
    try:
        with api_client(url) as api:
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
    finally:
        http.shutdown()


def test_a_stop_while_it_lists_opens_no_watch(server) -> None:
    server.faults.delay_seconds = 1.0
    with api_client(server.url) as api:
        reflector = Reflector("pods", client.CoreV1Api(api).list_pod_for_all_namespaces, team)
        reflector.start()
        reflector.stop(timeout_seconds=0)  # in its list, most likely: not waited for
        reflector.thread.join(10)
        assert not reflector.thread.is_alive()
    assert [r.method for r in server.requests if r.path == "/api/v1/pods"] in ([], ["GET"])


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
