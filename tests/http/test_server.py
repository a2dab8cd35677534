"""The daemons' shared HTTP server over real loopback sockets, at the byte level: keep-alive,
pipelining, HTTP/1.0, HEAD, request bodies, and a graceful close. What each daemon serves
is tested with the daemon (the exporter's routes in tests/exporter/http)."""

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from gpufleet.http.server import Response, RunningServer, new_app, start_server
from gpufleet.http.wire import Request


async def _hello(request: Request) -> Response:
    return Response(200, b"hello", {"Content-Type": "text/plain"})


@asynccontextmanager
async def serving(**routes) -> AsyncIterator[RunningServer]:
    app = new_app({"/hello": _hello, **routes}, web_config=None)
    server = await start_server(app, host="127.0.0.1", port=0, shutdown_timeout_seconds=5.0)
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
            b"GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n",
        )
    first, second = replies.split(b"HTTP/1.1 200 OK", 2)[1:]
    assert b"Content-Length: 5\r\n" in first and first.endswith(b"\r\n\r\n")
    assert second.endswith(b"\r\n\r\nhello")


async def test_a_small_request_body_is_read_and_dropped() -> None:
    async with serving() as server:
        replies = await _exchange(
            server.port,
            b"POST /hello HTTP/1.1\r\nContent-Length: 10\r\n\r\nGET /x\r\n\r\n"
            b"GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n",
        )
    # The body, which looks like a request, is not served as one.
    assert _statuses(replies) == [405, 200]
    assert b"Allow: GET, HEAD\r\n" in replies


async def test_a_refused_request_closes_the_connection() -> None:
    async with serving() as server:
        replies = await _exchange(
            server.port,
            b"POST /hello HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"0\r\n\r\nGET /hello HTTP/1.1\r\n\r\n",
        )
    assert _statuses(replies) == [501]
    assert b"Connection: close\r\n" in replies


async def test_a_header_a_handler_should_not_send_is_a_500() -> None:
    async def injected(request: Request) -> Response:
        return Response(200, b"", {"X-Evil": "a\r\nSet-Cookie: b"})

    async with serving(**{"/evil": injected}) as server:
        replies = await _exchange(server.port, b"GET /evil HTTP/1.1\r\nConnection: close\r\n\r\n")
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
    idle_writer.write(b"GET /hello HTTP/1.1\r\n\r\n")
    await asyncio.wait_for(idle_reader.readuntil(b"hello"), timeout=10)
    busy_reader, busy_writer = await asyncio.open_connection("127.0.0.1", server.port)
    busy_writer.write(b"GET /slow HTTP/1.1\r\n\r\n")
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
