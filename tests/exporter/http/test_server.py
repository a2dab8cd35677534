"""The exporter's HTTP server over real loopback sockets: negotiation, health, auth, TLS."""

import asyncio
import base64
import dataclasses
import gzip
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import bcrypt
import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID
from helpers.clock import ManualClock
from helpers.pki import issue, write_pair

from gpufleet.exporter.core.render import Exposition
from gpufleet.exporter.http.server import (
    OPENMETRICS_CONTENT_TYPE,
    TEXT_CONTENT_TYPE,
    App,
    RunningServer,
    accepts_gzip,
    build_app,
    start_server,
    wants_openmetrics,
)
from gpufleet.exporter.http.store import TEXT_GZIP_DEMAND_SECONDS, ExpositionStore
from gpufleet.http.server import Response
from gpufleet.http.webconfig import WebConfig, load_web_config
from gpufleet.http.wire import Request

TEXT = b'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 41\n'
OPENMETRICS = b'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 41\n# EOF\n'


def exposition(*, collected_monotonic: float = 100.0, text: bytes = TEXT) -> Exposition:
    return Exposition(
        text=text,
        text_gzip=gzip.compress(text, mtime=0),
        openmetrics=OPENMETRICS,
        openmetrics_gzip=gzip.compress(OPENMETRICS, mtime=0),
        collected_at=1_700_000_000.0,
        collected_monotonic=collected_monotonic,
    )


@asynccontextmanager
async def serving(
    app: App, *, ssl_context: ssl.SSLContext | None = None, **kwargs: float
) -> AsyncIterator[RunningServer]:
    server = await start_server(app, host="127.0.0.1", port=0, ssl_context=ssl_context, **kwargs)
    try:
        yield server
    finally:
        await server.close()


def url(server: RunningServer, path: str, *, scheme: str = "http") -> str:
    return f"{scheme}://127.0.0.1:{server.port}{path}"


@asynccontextmanager
async def client(**kwargs: object) -> AsyncIterator[aiohttp.ClientSession]:
    # No automatic Accept/Accept-Encoding and no decompression: tests see the raw exchange.
    async with aiohttp.ClientSession(
        auto_decompress=False, skip_auto_headers=("Accept", "Accept-Encoding"), **kwargs
    ) as session:
        yield session


def published_store() -> ExpositionStore:
    store = ExpositionStore()
    store.publish(exposition())
    return store


PROMETHEUS_2 = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
PROMETHEUS_3 = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;"
    "escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
PROMETHEUS_TEXT_ONLY = "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
PROTOBUF_FIRST = (
    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
    "encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)

NEGOTIATION = [
    (None, False, "no-accept-header"),
    ("*/*", False, "anything"),
    (PROMETHEUS_2, True, "prometheus-2"),
    (PROMETHEUS_3, True, "prometheus-3"),
    (PROMETHEUS_TEXT_ONLY, False, "prometheus-text-only"),
    (PROTOBUF_FIRST, False, "protobuf-preferred-falls-back-to-text"),
    ("application/openmetrics-text", True, "openmetrics-no-version"),
    ("application/openmetrics-text; version=1.0.0; charset=utf-8", True, "openmetrics-1.0.0"),
    ("application/openmetrics-text;version=0.0.1", False, "openmetrics-0.0.1-only"),
    ("application/openmetrics-text;q=0", False, "openmetrics-q0"),
    ("application/openmetrics-text;q=0, */*", False, "openmetrics-refused-wildcard"),
    ("text/plain;q=0.5, application/openmetrics-text;q=0.7", True, "openmetrics-higher-q"),
    ("application/openmetrics-text;q=0.3, */*;q=0.5", False, "wildcard-outranks"),
    ("application/*", True, "application-wildcard"),
    ("text/plain, application/openmetrics-text", False, "tie-first-listed-text"),
    ("application/openmetrics-text, text/plain", True, "tie-first-listed-openmetrics"),
    ("APPLICATION/OpenMetrics-Text", True, "case-insensitive"),
    ("application/openmetrics-text;q=high", False, "malformed-q-ignored"),
    ("garbage, ,;", False, "garbage"),
]


@pytest.mark.parametrize(
    ("accept", "openmetrics"), [r[:2] for r in NEGOTIATION], ids=[r[2] for r in NEGOTIATION]
)
async def test_metrics_content_negotiation(accept: str | None, openmetrics: bool) -> None:
    app = build_app(published_store(), web_config=None, stale_after_seconds=60, openmetrics=True)
    headers = {"Accept": accept} if accept is not None else {}

    async with (
        serving(app) as server,
        client() as session,
        session.get(url(server, "/metrics"), headers=headers) as response,
    ):
        body = await response.read()

    assert response.status == 200
    assert response.headers["Content-Type"] == (
        OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE
    )
    assert body == (OPENMETRICS if openmetrics else TEXT)
    assert "Content-Encoding" not in response.headers
    assert response.headers["Vary"] == "Accept, Accept-Encoding"


@pytest.mark.parametrize(
    "accept", [PROMETHEUS_2, PROMETHEUS_3], ids=["prometheus-2", "prometheus-3"]
)
async def test_text_by_default_even_when_prometheus_prefers_openmetrics(accept: str) -> None:
    # Issue 15: served OpenMetrics, where dcgm's counters can only be `unknown`, so
    # Prometheus' metadata lost their counter type. dcgm-exporter always serves text.
    app = build_app(published_store(), web_config=None, stale_after_seconds=60)

    async with (
        serving(app) as server,
        client() as session,
        session.get(url(server, "/metrics"), headers={"Accept": accept}) as response,
    ):
        body = await response.read()

    assert response.headers["Content-Type"] == TEXT_CONTENT_TYPE
    assert body == TEXT


GZIP = [
    (None, False, "no-header"),
    ("gzip", True, "gzip"),
    ("gzip, deflate, br", True, "browser-like"),
    ("gzip;q=0", False, "gzip-q0"),
    ("gzip;q=0, *", False, "gzip-refused-wildcard-allowed"),
    ("deflate", False, "deflate-only"),
    ("identity", False, "identity"),
    ("*", True, "wildcard"),
    ("*;q=0", False, "wildcard-q0"),
    ("br, GZIP;q=0.5", True, "case-and-q"),
    ("x-gzip", True, "x-gzip"),
    ("gzip;q=nope", False, "malformed-q"),
]


@pytest.mark.parametrize(
    ("accept_encoding", "gzipped"), [r[:2] for r in GZIP], ids=[r[2] for r in GZIP]
)
@pytest.mark.parametrize("openmetrics", [False, True], ids=["text", "openmetrics"])
async def test_metrics_gzip_serves_the_prebuilt_bytes(
    accept_encoding: str | None, gzipped: bool, openmetrics: bool
) -> None:
    app = build_app(published_store(), web_config=None, stale_after_seconds=60, openmetrics=True)
    headers = {"Accept": "application/openmetrics-text" if openmetrics else "text/plain"}
    if accept_encoding is not None:
        headers["Accept-Encoding"] = accept_encoding

    async with (
        serving(app) as server,
        client() as session,
        session.get(url(server, "/metrics"), headers=headers) as response,
    ):
        body = await response.read()

    plain = OPENMETRICS if openmetrics else TEXT
    assert body == (gzip.compress(plain, mtime=0) if gzipped else plain)
    assert response.headers.get("Content-Encoding") == ("gzip" if gzipped else None)
    assert response.headers["Content-Length"] == str(len(body))


async def test_text_gzip_not_built_yet_is_served_plain_and_requested() -> None:
    """Collections gzip only what scrapes ask for: the first gzip text scrape gets the
    prebuilt plain bytes (no Content-Encoding) and asks the next collection for gzip."""
    store = ExpositionStore()
    store.publish(dataclasses.replace(exposition(), text_gzip=None))
    clock = ManualClock(100.0)
    app = build_app(store, web_config=None, stale_after_seconds=60, clock=clock)
    assert not store.wants_text_gzip(clock.now)
    async with (
        serving(app) as server,
        client() as session,
        session.get(
            url(server, "/metrics"), headers={"Accept": "text/plain", "Accept-Encoding": "gzip"}
        ) as response,
    ):
        body = await response.read()
    assert body == TEXT
    assert response.headers.get("Content-Encoding") is None
    assert store.wants_text_gzip(clock.now)
    assert not store.wants_text_gzip(clock.now + TEXT_GZIP_DEMAND_SECONDS + 1)


def test_negotiation_functions_are_memoised() -> None:
    wants_openmetrics.cache_clear()
    accepts_gzip.cache_clear()

    for _ in range(3):
        assert wants_openmetrics(PROMETHEUS_2)
        assert accepts_gzip("gzip")

    assert wants_openmetrics.cache_info().hits == 2
    assert accepts_gzip.cache_info().hits == 2


async def test_head_metrics_sends_headers_only() -> None:
    app = build_app(published_store(), web_config=None, stale_after_seconds=60)

    async with (
        serving(app) as server,
        client() as session,
        session.head(url(server, "/metrics")) as response,
    ):
        body = await response.read()

    assert response.status == 200
    assert response.headers["Content-Length"] == str(len(TEXT))
    assert body == b""


@pytest.mark.parametrize("path", ["/metrics", "/health"])
async def test_before_first_collection_answers_503(path: str) -> None:
    app = build_app(ExpositionStore(), web_config=None, stale_after_seconds=60)

    async with (
        serving(app) as server,
        client() as session,
        session.get(url(server, path)) as response,
    ):
        body = await response.read()

    assert response.status == 503
    assert body == b"no collection yet"


@pytest.mark.parametrize(
    ("age_seconds", "status", "body"),
    [
        (0.0, 200, b"OK"),
        (60.0, 200, b"OK"),
        (61.0, 503, b"snapshot stale: last collection 61 s ago"),
        (3600.4, 503, b"snapshot stale: last collection 3600 s ago"),
    ],
    ids=["fresh", "at-the-limit", "just-stale", "an-hour-old"],
)
async def test_health_follows_snapshot_age(age_seconds: float, status: int, body: bytes) -> None:
    clock = ManualClock(now=100.0 + age_seconds)
    app = build_app(published_store(), web_config=None, stale_after_seconds=60, clock=clock)

    async with (
        serving(app) as server,
        client() as session,
        session.get(url(server, "/health")) as response,
    ):
        assert (response.status, await response.read()) == (status, body)


async def test_concurrent_scrapes_get_identical_bytes() -> None:
    store = ExpositionStore()
    big_text = b"".join(b'DCGM_FI_DEV_SM_CLOCK{gpu="%d"} 1410\n' % i for i in range(5000))
    store.publish(exposition(text=big_text))
    app = build_app(store, web_config=None, stale_after_seconds=60)

    async def scrape(session: aiohttp.ClientSession) -> bytes:
        async with session.get(url(server, "/metrics")) as response:
            assert response.status == 200
            return await response.read()

    async with serving(app) as server, client() as session:
        bodies = await asyncio.gather(*(scrape(session) for _ in range(50)))

    assert set(bodies) == {big_text}
    assert app.stats.requests_total == {("/metrics", 200): 50}


async def test_landing_page_links_metrics_and_health() -> None:
    app = build_app(ExpositionStore(), web_config=None, stale_after_seconds=60)

    async with (
        serving(app) as server,
        client() as session,
        session.get(url(server, "/")) as response,
    ):
        page = await response.text()

    assert response.status == 200
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    assert 'href="metrics"' in page and 'href="health"' in page


async def test_stats_count_by_route_and_status_with_unknown_paths_pooled() -> None:
    app = build_app(
        published_store(), web_config=None, stale_after_seconds=60, clock=ManualClock(100.0)
    )

    async with serving(app) as server, client() as session:
        for path in ("/metrics", "/metrics", "/nope", "/also-nope", "/health"):
            async with session.get(url(server, path)) as response:
                await response.read()
        async with session.post(url(server, "/metrics")) as response:
            assert response.status == 405

    stats = app.stats
    assert stats.requests_total == {
        ("/metrics", 200): 2,
        ("other", 404): 2,
        ("/health", 200): 1,
        ("other", 405): 1,
    }
    assert set(stats.request_seconds_total) == {"/metrics", "other", "/health"}


# --- web config: basic auth, headers, rate limit ---


@pytest.fixture(scope="module")
def password_hash() -> str:
    return bcrypt.hashpw(b"scrape-me", bcrypt.gensalt(rounds=4)).decode()


def web_config(tmp_path: Path, text: str) -> WebConfig:
    path = tmp_path / "web-config.yml"
    path.write_text(text)
    return load_web_config(path)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


AUTH = [
    (None, 401, "no-credentials"),
    (basic("prometheus", "wrong"), 401, "wrong-password"),
    (basic("nobody", "scrape-me"), 401, "unknown-user"),
    ("Bearer token", 401, "other-scheme"),
    (basic("prometheus", "scrape-me"), 200, "right-password"),
]


@pytest.mark.parametrize(
    ("authorization", "status"), [r[:2] for r in AUTH], ids=[r[2] for r in AUTH]
)
@pytest.mark.parametrize("path", ["/metrics", "/health", "/", "/nope"])
async def test_basic_auth_protects_every_route(
    tmp_path: Path, password_hash: str, authorization: str | None, status: int, path: str
) -> None:
    config = web_config(
        tmp_path,
        f"basic_auth_users:\n  prometheus: '{password_hash}'\n"
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n",
    )
    app = build_app(published_store(), web_config=config, stale_after_seconds=1e9)
    headers = {"Authorization": authorization} if authorization else {}

    async with (
        serving(app) as server,
        client() as session,
        session.get(url(server, path), headers=headers) as response,
    ):
        await response.read()

    expected = 404 if path == "/nope" and status == 200 else status
    assert response.status == expected
    assert response.headers["X-Frame-Options"] == "deny"  # configured headers on every answer
    if status == 401:
        assert response.headers["WWW-Authenticate"] == 'Basic realm="gpufleet"'


async def test_repeat_scrapes_reuse_the_verified_password(
    tmp_path: Path, password_hash: str
) -> None:
    config = web_config(tmp_path, f"basic_auth_users:\n  prometheus: '{password_hash}'\n")
    app = build_app(published_store(), web_config=config, stale_after_seconds=1e9)
    good = {"Authorization": basic("prometheus", "scrape-me")}

    async with serving(app) as server, client() as session:
        for _ in range(3):
            async with session.get(url(server, "/metrics"), headers=good) as response:
                assert response.status == 200

    assert config.check_basic_auth_cached(good["Authorization"])


async def test_extra_routes_are_protected_too(tmp_path: Path, password_hash: str) -> None:
    config = web_config(tmp_path, f"basic_auth_users:\n  prometheus: '{password_hash}'\n")

    async def debug(request: Request) -> Response:
        return Response(200, b"debug")

    app = build_app(
        ExpositionStore(),
        web_config=config,
        stale_after_seconds=60,
        extra_routes={"/debug": debug},
    )

    async with (
        serving(app) as server,
        client() as session,
        session.get(url(server, "/debug")) as response,
    ):
        assert response.status == 401
        headers = {"Authorization": basic("prometheus", "scrape-me")}
        async with session.get(url(server, "/debug"), headers=headers) as response:
            assert (response.status, await response.text()) == (200, "debug")


async def test_rate_limit_answers_429_until_a_token_refills(tmp_path: Path) -> None:
    config = web_config(tmp_path, "rate_limit:\n  burst: 2\n  interval: 10s\n")
    clock = ManualClock(100.0)
    app = build_app(published_store(), web_config=config, stale_after_seconds=1e9, clock=clock)

    async def status() -> int:
        async with session.get(url(server, "/metrics")) as response:
            await response.read()
            return response.status

    async with serving(app) as server, client() as session:
        assert [await status() for _ in range(3)] == [200, 200, 429]
        clock.now += 10.0
        assert [await status() for _ in range(2)] == [200, 429]


# --- timeouts ---


async def test_idle_connection_is_closed_after_the_read_timeout() -> None:
    app = build_app(published_store(), web_config=None, stale_after_seconds=60)

    async with serving(app, read_timeout_seconds=0.2) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        assert await asyncio.wait_for(reader.read(), timeout=10) == b""
        writer.close()


async def test_a_client_that_stops_reading_is_dropped_after_the_write_timeout() -> None:
    store = ExpositionStore()
    store.publish(exposition(text=b"x" * (16 << 20)))  # far more than socket buffers hold
    app = build_app(
        store,
        web_config=None,
        stale_after_seconds=60,
        clock=ManualClock(100.0),
        write_timeout_seconds=0.2,
    )
    stats = app.stats

    async with serving(app) as server:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        async with asyncio.timeout(10):
            while stats.write_timeouts_total == 0:
                await asyncio.sleep(0.01)
        sock.close()
        async with client() as session, session.get(url(server, "/health")) as response:
            assert response.status == 200  # the server carries on

    assert stats.write_timeouts_total == 1


# --- TLS ---


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = issue("gpufleet test CA")
    ca_path, _ = write_pair(directory, "ca", ca)
    server_cert, server_key = write_pair(
        directory, "server", issue("exporter", issuer=ca, usage=ExtendedKeyUsageOID.SERVER_AUTH)
    )
    client_cert, client_key = write_pair(
        directory, "client", issue("prometheus", issuer=ca, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    )
    return Pki(ca_path, server_cert, server_key, client_cert, client_key)


def client_context(pki: Pki, *, with_cert: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=pki.ca)
    if with_cert:
        context.load_cert_chain(pki.client_cert, pki.client_key)
    return context


async def test_tls_serves_metrics_to_a_client_trusting_the_ca(tmp_path: Path, pki: Pki) -> None:
    config = web_config(
        tmp_path,
        f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n",
    )
    app = build_app(published_store(), web_config=config, stale_after_seconds=1e9)

    async with serving(app, ssl_context=config.ssl_context()) as server, client() as session:
        context = client_context(pki, with_cert=False)
        async with session.get(url(server, "/metrics", scheme="https"), ssl=context) as response:
            assert (response.status, await response.read()) == (200, TEXT)


MTLS_CONFIG = """tls_server_config:
  cert_file: {pki.server_cert}
  key_file: {pki.server_key}
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: {pki.ca}
"""


async def test_mtls_accepts_a_client_certificate_signed_by_the_client_ca(
    tmp_path: Path, pki: Pki
) -> None:
    config = web_config(tmp_path, MTLS_CONFIG.format(pki=pki))
    app = build_app(published_store(), web_config=config, stale_after_seconds=1e9)

    async with serving(app, ssl_context=config.ssl_context()) as server, client() as session:
        context = client_context(pki, with_cert=True)
        async with session.get(url(server, "/metrics", scheme="https"), ssl=context) as response:
            assert (response.status, await response.read()) == (200, TEXT)


async def test_mtls_rejects_a_client_without_a_certificate(tmp_path: Path, pki: Pki) -> None:
    config = web_config(tmp_path, MTLS_CONFIG.format(pki=pki))
    app = build_app(published_store(), web_config=config, stale_after_seconds=1e9)

    async with serving(app, ssl_context=config.ssl_context()) as server, client() as session:
        context = client_context(pki, with_cert=False)
        with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
            async with session.get(url(server, "/metrics", scheme="https"), ssl=context) as r:
                await r.read()

    assert app.stats.requests_total == {}


# --- listening ---


async def test_start_server_names_an_address_in_use() -> None:
    app = build_app(ExpositionStore(), web_config=None, stale_after_seconds=60)

    async with serving(app) as first:
        second_app = build_app(ExpositionStore(), web_config=None, stale_after_seconds=60)
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{first.port}"):
            await start_server(second_app, host="127.0.0.1", port=first.port)
