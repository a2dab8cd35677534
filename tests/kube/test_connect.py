"""Configuring the Kubernetes client: every bad source is one ValueError naming it; a
timeout, when asked for, bounds every call."""

import socket

import pytest
import urllib3
from kubernetes import client

from gpufleet.kube.connect import api_client
from gpufleet.lab.kubeapi.server import FakeApiServer


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("clusters: [unclosed", id="not YAML"),
        pytest.param("just a string", id="a string"),
        pytest.param("clusters: 5", id="a list that is a number"),
        pytest.param("current-context: x\ncontexts: []\n", id="no such context"),
        pytest.param(b"\x00\x85\xff\xfe", id="binary"),
        pytest.param("", id="empty"),
    ],
)
def test_a_bad_kubeconfig_is_one_line_naming_the_file(text, tmp_path):
    path = tmp_path / "kubeconfig"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(ValueError) as caught:
        api_client(kubeconfig=str(path))
    message = str(caught.value)
    assert message.startswith(f"cannot configure the Kubernetes client from {path}: ")
    assert "\n" not in message
    assert "object is not" not in message  # not Python's ("'int' object is not iterable")


@pytest.mark.parametrize("url", ["notaurl", "ftp://host", "http://", "127.0.0.1:6443"])
def test_a_url_that_is_not_http_is_refused(url):
    with pytest.raises(ValueError, match=f"--kube-url {url}: not an http:// or https:// URL"):
        api_client(url=url)


def test_an_http_url_is_taken_as_it_is():
    assert api_client(url="http://127.0.0.1:8001").configuration.host == "http://127.0.0.1:8001"


def test_a_timeout_bounds_every_call_that_sets_none() -> None:
    """The autoscaler's client: a hung API server held its tick as long as it did not
    answer. A call's own timeout still wins (the lease's renew deadline)."""
    with FakeApiServer() as server:
        server.faults.delay_seconds = 3.0
        with api_client(url=server.url, timeout_seconds=0.5) as timed:
            core = client.CoreV1Api(timed)
            with pytest.raises(urllib3.exceptions.ReadTimeoutError):
                core.read_namespace("default")
            assert core.read_namespace("default", _request_timeout=10).metadata.name == "default"


def test_connections_keep_alive_as_client_gos() -> None:
    """A watch through a proxy that dropped it silently waited out its timeout, minutes."""
    with api_client(url="http://127.0.0.1:8001") as api:
        pool = api.rest_client.pool_manager.connection_from_url("http://127.0.0.1:8001")
        options = {(level, name): value for level, name, value in pool.conn_kw["socket_options"]}
    assert options[(socket.SOL_SOCKET, socket.SO_KEEPALIVE)] == 1
    assert options[(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)] == 30
