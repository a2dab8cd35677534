"""The daemons' shared HTTP server over real loopback sockets, at the byte level: keep-alive,
pipelining, HTTP/1.0, HEAD, request bodies, and a graceful close. What each daemon serves
is tested with the daemon (the exporter's routes in tests/exporter/http)."""

import asyncio
import contextlib
import logging
import os
import re
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID
from helpers.pki import issue, write_pair
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.http.server import Response, RunningServer, new_app, start_server
from gpufleet.http.webconfig import load_web_config
from gpufleet.http.wire import MAX_HEAD_BYTES, Request


async def _hello(request: Request) -> Response:
    return Response(200, b"hello", {"Content-Type": "text/plain"})


@asynccontextmanager
async def serving(*, web_config=None, **options) -> AsyncIterator[RunningServer]:
    app = new_app({"/hello": _hello}, web_config=web_config)
    server = await start_server(app, host="127.0.0.1", port=0, **options)
    try:
        yield server
    finally:
        await server.close()


async def _exchange(port: int, data: bytes) -> bytes:
    """Send `data`, then read until the server closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    try:
        return await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()


def _statuses(replies: bytes) -> list[int]:
    return [int(s) for s in re.findall(rb"HTTP/1\.1 (\d{3}) ", replies)]


async def test_pipelined_requests_are_answered_in_order_on_one_connection() -> None:
    async with serving() as server:
        replies = await _exchange(
            server.port,
            b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
    assert _statuses(replies) == [200, 404, 200]
    assert replies.count(b"hello") == 2
    assert replies.endswith(b"Connection: close\r\n\r\nhello")  # then the server closed


async def test_a_kept_connection_serves_requests_sent_apart() -> None:
    async with serving() as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        for _ in range(3):
            writer.write(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
            assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection" not in head
            assert re.search(rb"\r\nDate: \w{3}, \d\d \w{3} \d{4} [\d:]{8} GMT\r\n", head)
            assert await reader.readexactly(5) == b"hello"
        writer.close()


async def test_http_1_0_closes_unless_kept_alive() -> None:
    async with serving() as server:
        closed = await _exchange(server.port, b"GET /hello HTTP/1.0\r\n\r\n")
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" * 2)
        kept = b""
        while kept.count(b"hello") < 2:
            kept += await asyncio.wait_for(reader.read(4096), timeout=10)
        writer.close()
    assert closed.startswith(b"HTTP/1.1 200 OK\r\n") and closed.endswith(b"\r\n\r\nhello")
    assert b"Connection" not in closed  # HTTP/1.0 closes by default: nothing to say
    assert kept.count(b"Connection: keep-alive\r\n") == 2


async def test_head_sends_the_length_and_no_body() -> None:
    async with serving() as server:
        replies = await _exchange(
            server.port,
            b"HEAD /hello HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
    first, second = replies.split(b"HTTP/1.1 200 OK", 2)[1:]
    assert b"Content-Length: 5\r\n" in first and first.endswith(b"\r\n\r\n")
    assert second.endswith(b"\r\n\r\nhello")


async def test_a_small_request_body_is_read_and_dropped() -> None:
    async with serving() as server:
        replies = await _exchange(
            server.port,
            b"POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nGET /x\r\n\r\n"
            b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
    # The body, which looks like a request, is not served as one.
    assert _statuses(replies) == [405, 200]
    assert b"Allow: GET, HEAD\r\n" in replies


async def test_a_refused_request_closes_the_connection() -> None:
    async with serving() as server:
        replies = await _exchange(
            server.port,
            b"POST /hello HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"0\r\n\r\nGET /hello HTTP/1.1\r\nHost: x\r\n\r\n",
        )
    assert _statuses(replies) == [501]
    assert b"Connection: close\r\n" in replies


async def test_a_header_a_handler_should_not_send_is_a_500() -> None:
    async def injected(request: Request) -> Response:
        return Response(200, b"", {"X-Evil": "a\r\nSet-Cookie: b"})

    app = new_app({"/evil": injected}, web_config=None)
    server = await start_server(app, host="127.0.0.1", port=0)
    try:
        replies = await _exchange(
            server.port, b"GET /evil HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
    finally:
        await server.close()
    assert _statuses(replies) == [500] and b"Set-Cookie" not in replies


async def test_close_finishes_a_request_in_flight_and_drops_idle_connections() -> None:
    entered = asyncio.Event()
    release = asyncio.Event()

    async def slow(request: Request) -> Response:
        entered.set()
        await release.wait()
        return Response(200, b"late")

    app = new_app({"/slow": slow, "/hello": _hello}, web_config=None)
    server = await start_server(app, host="127.0.0.1", port=0)
    idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", server.port)
    idle_writer.write(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.wait_for(idle_reader.readuntil(b"hello"), timeout=10)
    busy_reader, busy_writer = await asyncio.open_connection("127.0.0.1", server.port)
    busy_writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.wait_for(entered.wait(), timeout=10)

    closing = asyncio.create_task(server.close())
    assert await asyncio.wait_for(idle_reader.read(), timeout=10) == b""  # dropped at once
    assert not closing.done()  # waiting for the request in flight
    release.set()
    reply = await asyncio.wait_for(busy_reader.read(), timeout=10)
    await asyncio.wait_for(closing, timeout=10)
    # Answered whole, told the connection closes, and closed.
    assert reply.startswith(b"HTTP/1.1 200 OK\r\n") and reply.endswith(b"\r\n\r\nlate")
    assert b"Connection: close\r\n" in reply
    idle_writer.close()
    busy_writer.close()
    # Nothing listens any more.
    try:
        await asyncio.open_connection("127.0.0.1", server.port)
        refused = False
    except ConnectionRefusedError:
        refused = True
    assert refused


async def test_expect_100_continue_is_answered_before_the_body() -> None:
    async with serving() as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(
            b"POST /hello HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Content-Length: 4\r\nConnection: close\r\n\r\n"
        )
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        writer.write(b"body")
        final = await asyncio.wait_for(reader.read(), timeout=10)
        writer.close()
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert _statuses(final) == [405]


async def test_a_head_over_the_limit_is_refused_431() -> None:
    async with serving() as server:
        replies = await _exchange(
            server.port,
            b"GET /hello HTTP/1.1\r\nHost: x\r\n" + b"X: y\r\n" * (MAX_HEAD_BYTES // 6) + b"\r\n",
        )
    assert _statuses(replies) == [431]


async def test_a_body_that_never_comes_is_dropped_at_the_read_timeout() -> None:
    async with serving(read_timeout_seconds=0.2) as server:
        replies = await _exchange(
            server.port, b"POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n"
        )
    assert replies == b""


async def test_close_waits_for_a_request_whose_head_has_begun() -> None:
    """Like Go's Shutdown: a connection is active from a request's first byte."""
    app = new_app({"/hello": _hello}, web_config=None)
    server = await start_server(app, host="127.0.0.1", port=0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /hello HTTP/1.1\r\nHo")
    async with asyncio.timeout(10):  # until the server has read the first byte
        while not [c for c in server._connections.values() if not c.idle]:
            await asyncio.sleep(0.01)
    closing = asyncio.create_task(server.close())
    async with asyncio.timeout(10):  # until close() has begun
        while not server._closing:
            await asyncio.sleep(0.01)
    writer.write(b"st: x\r\n\r\n")
    reply = await asyncio.wait_for(reader.read(), timeout=10)
    await asyncio.wait_for(closing, timeout=10)
    writer.close()
    assert reply.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close\r\n" in reply


async def test_a_web_config_header_beyond_latin_1_goes_out_as_utf_8(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    policy = "default-src 'self' \u2014 metrics"  # an em dash, pasted from a document
    path.write_text(
        f'http_server_config:\n  headers:\n    Content-Security-Policy: "{policy}"\n',
        encoding="utf-8",
    )
    async with serving(web_config=load_web_config(path)) as server:
        replies = await _exchange(
            server.port, b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
    assert f"Content-Security-Policy: {policy}\r\n".encode() in replies
    assert replies.endswith(b"hello")


# --- TLS ---


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(the server's context, a client context trusting it)."""
    directory = tmp_path_factory.mktemp("pki")
    ca = issue("test CA")
    ca_path, _ = write_pair(directory, "ca", ca)
    cert, key = write_pair(
        directory, "server", issue("server", issuer=ca, usage=ExtendedKeyUsageOID.SERVER_AUTH)
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    return server, ssl.create_default_context(cafile=ca_path)


async def test_tls_responses_are_written_whole_without_waiting_for_the_timeout(tls) -> None:
    """A TLS transport pauses writing at a buffer size >= its high-water mark: with the
    plain transport's 0 every response waited out the write timeout."""
    server_context, client_context = tls
    app = new_app({"/hello": _hello}, web_config=None, write_timeout_seconds=30.0)
    server = await start_server(app, host="127.0.0.1", port=0, ssl_context=server_context)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=client_context)
        writer.write(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n" * 2)
        writer.write(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        replies = await asyncio.wait_for(reader.read(), timeout=10)  # far under 30 s
        writer.close()
    finally:
        await server.close()
    assert _statuses(replies) == [200, 200, 200] and replies.endswith(b"hello")
    assert app.stats.write_timeouts_total == 0
    assert app.stats.requests_total == {("/hello", 200): 3}


def _broken_tls_client(port: int, client_context: ssl.SSLContext, request: bytes) -> None:
    """Complete the handshake, send `request`, then a record the server cannot decrypt."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        wrapped = client_context.wrap_socket(raw, server_hostname="127.0.0.1")
        wrapped.sendall(request)
        with socket.socket(fileno=os.dup(wrapped.fileno())) as same:
            same.sendall(b"\x17\x03\x03\x00\x20" + b"A" * 32)  # application data, bad MAC
            same.settimeout(10)
            while same.recv(4096):  # until the server closes
                pass


@pytest.mark.parametrize(
    "request_bytes",
    [b"GET /hello HTTP/1.1\r\n", b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"],
    ids=["mid-head", "between requests"],
)
async def test_a_broken_tls_record_closes_the_connection_and_logs_nothing(
    tls, caplog, request_bytes: bytes
) -> None:
    server_context, client_context = tls
    async with serving(ssl_context=server_context) as server:
        with caplog.at_level(logging.DEBUG):
            await asyncio.to_thread(_broken_tls_client, server.port, client_context, request_bytes)
            await asyncio.sleep(0.1)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert "Traceback" not in caplog.text


# --- any bytes a client sends ---

_PIECES = st.sampled_from(
    [b"GET", b"HEAD", b"POST", b" ", b"/hello", b"/", b"?a=b", b"HTTP/1.1", b"HTTP/1.0",
     b"\r\n", b"\r\n\r\n", b"\n", b"Host: x", b"Content-Length: 3", b"Content-Length: -1",
     b"Transfer-Encoding: chunked", b"Connection: close", b"Expect: 100-continue", b"abc",
     b"\x00", b"\xff", b"\x16\x03\x01"]
)  # fmt: skip


class _Errors(logging.Handler):
    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.binary(max_size=16)), max_size=24))
def test_any_bytes_get_answers_or_a_close_and_never_a_logged_error(chunks: list[bytes]) -> None:
    """Whatever a client sends, the server answers with whole HTTP/1.1 responses or closes,
    logs nothing at ERROR, and serves the next client."""

    async def run() -> tuple[bytes, bytes, list[logging.LogRecord]]:
        handler = _Errors(logging.ERROR)
        logging.getLogger().addHandler(handler)
        try:
            async with serving(read_timeout_seconds=0.2) as server:
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(b"".join(chunks))
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
                reply = await asyncio.wait_for(reader.read(), timeout=10)
                writer.close()
                after = await _exchange(
                    server.port, b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                )
        finally:
            logging.getLogger().removeHandler(handler)
        return reply, after, handler.records

    reply, after, records = asyncio.run(run())
    assert not records, [r.getMessage() for r in records]
    assert reply == b"" or reply.startswith(b"HTTP/1.1 "), reply[:80]
    assert _statuses(after) == [200]
