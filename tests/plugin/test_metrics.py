"""The plugin's self-metrics port, on the exporter's server (issue 16 §4): only `/metrics`
and `/health` answer, idle connections are closed, and a web config brings TLS and basic
auth. Real loopback HTTP(S) against the real plugin on the fake kubelet."""

import base64
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID
from helpers.pki import issue, write_pair
from prometheus_client.core import CollectorRegistry

from gpufleet.http.webconfig import load_web_config
from gpufleet.plugin.metrics import MetricsServer, SelfMetrics


@pytest.fixture
def serve(make_node):
    servers: list[MetricsServer] = []

    def start(**kwargs) -> MetricsServer:
        node = make_node(mig_strategy="mixed")
        registry = CollectorRegistry(auto_describe=False)
        registry.register(SelfMetrics(node.plugin))
        servers.append(MetricsServer(registry, host="127.0.0.1", port=0, **kwargs))
        servers[-1].start()
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def get(url: str, **kwargs) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10, **kwargs) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.parametrize(
    ("path", "status", "body"),
    [
        ("/metrics", 200, b"gpufleet_plugin_devices{"),
        ("/health", 200, b"OK"),
        ("/", 404, b""),
        ("/debug/pprof/", 404, b""),
        ("/metrics/extra", 404, b""),
    ],
)
def test_only_metrics_and_health_answer(serve, path: str, status: int, body: bytes):
    """prometheus_client's server answered metrics on every path, /debug/pprof/ included."""
    server = serve()
    got_status, got_body = get(f"http://127.0.0.1:{server.port}{path}")
    assert got_status == status
    assert body in got_body


def test_metrics_are_text_format_0_0_4(serve):
    """prometheus_client 0.22+ labels the same bytes `version=1.0.0` (CONTENT_TYPE_LATEST),
    whatever the scraper asked for; the exporter's port says 0.0.4, as the bytes are."""
    server = serve()
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.port}/metrics", headers={"Accept": "text/plain;version=0.0.4"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"


def test_an_idle_connection_is_closed_after_the_read_timeout(serve):
    """prometheus_client's server kept 500 idle connections (and a thread each) open."""
    server = serve(read_timeout_seconds=0.2)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        assert conn.recv(1024) == b""


def test_a_web_config_brings_tls_and_basic_auth(serve, tmp_path: Path):
    ca = issue("gpufleet test CA")
    ca_path, _ = write_pair(tmp_path, "ca", ca)
    cert, key = write_pair(
        tmp_path, "server", issue("plugin", issuer=ca, usage=ExtendedKeyUsageOID.SERVER_AUTH)
    )
    hashed = bcrypt.hashpw(b"scrape-me", bcrypt.gensalt(rounds=4)).decode()
    path = tmp_path / "web.yml"
    path.write_text(
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        f"basic_auth_users:\n  prometheus: {hashed}\n"
    )
    server = serve(web_config=load_web_config(path))
    url = f"https://127.0.0.1:{server.port}/metrics"
    context = ssl.create_default_context(cafile=ca_path)
    assert get(url, context=context)[0] == 401
    token = base64.b64encode(b"prometheus:scrape-me").decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    status, body = get(request, context=context)  # type: ignore[arg-type]
    assert status == 200 and b"gpufleet_plugin_registered" in body
    with pytest.raises(OSError):  # plain HTTP is not served (the server hangs up)
        get(f"http://127.0.0.1:{server.port}/metrics")


def test_a_request_that_does_not_parse_is_counted_on_the_port(serve):
    """The port's own counters, named as the exporter's and the autoscaler's."""
    server = serve()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
        conn.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        assert b" 400 " in conn.recv(1024).split(b"\r\n")[0]
    _, body = get(f"http://127.0.0.1:{server.port}/metrics")
    assert b"gpufleet_plugin_http_bad_requests_total 1.0" in body
