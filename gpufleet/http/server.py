"""The daemons' HTTP(S) server, on asyncio streams: exporter-toolkit's web config (basic
auth, extra headers, rate limit) on every route, dcgm-exporter's 10 s read (idle) and write
timeouts, TLS from the web config, self-metrics counters, and bounded logging of bad
requests and failed accepts (`abuse`). Unknown paths get 404, another method on a known
path 405, like any other response.

Exists so every daemon's port behaves the same: each hands `new_app` its routes, a GET
handler per path (HEAD is answered from it), and none of this knows what a route serves.
It must never log per request. Its own HTTP/1.1 (`wire`) rather than aiohttp's server: the
routes serve prebuilt bodies, and aiohttp cost the exporter 10-13 MiB of RSS (issue 15).
Keep-alive and pipelined requests are served in order; no route reads a body, so request
bodies over 64 KiB and Transfer-Encoding are refused.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpufleet.core.ratelimit import TokenBucket
from gpufleet.core.server_stats import ServerStats
from gpufleet.http.abuse import AcceptErrorHandler, RequestErrorLog
from gpufleet.http.wire import (
    MAX_HEAD_BYTES,
    BadRequest,
    Request,
    http_date,
    parse_request_head,
    response_head,
)

if TYPE_CHECKING:  # loaded only when serving TLS or with --web-config-file
    import ssl

    from gpufleet.http.webconfig import WebConfig

log = logging.getLogger(__name__)

_PLAIN = "text/plain; charset=utf-8"
_OTHER = "other"  # the route label of unknown paths: they must not grow the key set
_REALM = 'Basic realm="gpufleet"'
_METHODS = ("GET", "HEAD")  # what a route serves: HEAD is answered from the GET handler


@dataclass(frozen=True, slots=True)
class Response:
    """What a handler answers; Date, Content-Length and Connection are the server's."""

    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Awaitable[Response]]


def plain(status: int, text: str, headers: Mapping[str, str] | None = None) -> Response:
    """A short text/plain answer."""
    return Response(status, text.encode(), {"Content-Type": _PLAIN, **(headers or {})})


class App:
    """GET routes behind the web config's rate limit, basic auth and headers; `stats`
    holds the counters. `clock` (monotonic seconds) drives the rate limiter and the
    request durations."""

    def __init__(
        self,
        routes: Mapping[str, Handler],
        *,
        web_config: WebConfig | None,
        stats: ServerStats,
        clock: Callable[[], float],
        write_timeout_seconds: float,
    ) -> None:
        self.stats = stats
        self.clock = clock
        self.write_timeout_seconds = write_timeout_seconds
        self._routes = dict(routes)
        self.extra_headers = dict(web_config.headers) if web_config is not None else {}
        self._auth = web_config if web_config is not None and web_config.auth_required else None
        limit = web_config.rate_limit if web_config is not None else None
        # exporter-toolkit: rate.NewLimiter(rate.Every(interval), burst).
        self._limiter = (
            TokenBucket(
                rate_per_second=1.0 / limit.interval_seconds, burst=limit.burst, clock=clock
            )
            if limit is not None
            else None
        )

    def route(self, request: Request) -> str:
        """The request's label in the counters: its path when a route serves it, else
        "other" (unknown paths and methods must not grow the key set)."""
        served = request.path in self._routes and request.method in _METHODS
        return request.path if served else _OTHER

    async def respond(self, request: Request) -> Response:
        """The answer: 429, 401, 404 and 405 before any handler runs."""
        if self._limiter is not None and not self._limiter.take():
            return plain(429, "Too Many Requests")
        if self._auth is not None:
            header = request.headers.get("authorization")
            # Repeat scrapes hit the cache on the loop; only a miss pays for bcrypt, in a thread.
            if not self._auth.check_basic_auth_cached(header) and not await asyncio.to_thread(
                self._auth.check_basic_auth, header
            ):
                return plain(401, "Unauthorized", {"WWW-Authenticate": _REALM})
        handler = self._routes.get(request.path)
        if handler is None:
            return plain(404, "Not Found")
        if request.method not in _METHODS:
            return plain(405, "Method Not Allowed", {"Allow": ", ".join(_METHODS)})
        return await handler(request)

    def head(self, response: Response, connection: str | None) -> bytes:
        """The response's status line and header fields, the web config's included."""
        return response_head(
            response.status,
            [*response.headers.items(), *self.extra_headers.items()],
            content_length=len(response.body),
            date=_http_date(int(time.time())),
            connection=connection,
        )


def new_app(
    routes: Mapping[str, Handler],
    *,
    web_config: WebConfig | None,
    stats: ServerStats | None = None,
    clock: Callable[[], float] = time.monotonic,
    write_timeout_seconds: float = 10.0,
) -> App:
    """An application serving `routes` (path -> GET handler); `app.stats` holds its
    counters."""
    return App(
        routes,
        web_config=web_config,
        stats=stats if stats is not None else ServerStats(),
        clock=clock,
        write_timeout_seconds=write_timeout_seconds,
    )


# --- connections ---


class _Connection:
    """One client connection: requests read, answered and written in order until the
    client closes, asks to, goes idle past the read timeout, or the server closes."""

    def __init__(
        self,
        app: App,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        read_timeout_seconds: float,
        errors: RequestErrorLog,
    ) -> None:
        self._app = app
        self._reader = reader
        self._writer = writer
        self._read_timeout_seconds = read_timeout_seconds
        self._errors = errors
        self.idle = True  # waiting for a request: closing the server may drop it
        self.closing = False

    async def serve(self) -> None:
        # No buffering beyond the kernel's: drain() then means every byte was handed
        # over, so the write timeout covers the whole response. A TLS transport pauses
        # at size >= high, a plain one at size > high: 1 there means 0 here.
        tls = self._writer.get_extra_info("sslcontext") is not None
        self._writer.transport.set_write_buffer_limits(high=1 if tls else 0, low=0)
        try:
            while not self.closing and await self._one():
                pass
        except OSError:
            # The client left, broke its TLS (ssl.SSLError) or stalled past a timeout
            # (TimeoutError): nothing to answer.
            pass
        finally:
            self._writer.close()

    async def _one(self) -> bool:
        """Serve one request; False when the connection should close."""
        self.idle = True
        try:
            async with asyncio.timeout(self._read_timeout_seconds):
                first = await self._reader.readexactly(1)
                self.idle = False  # a request has begun: closing the server waits for it
                head = first + await self._reader.readuntil(b"\r\n\r\n")
                request = parse_request_head(head)
                if request.content_length:
                    if request.expects_continue:
                        self._writer.write(_CONTINUE)
                    await self._reader.readexactly(request.content_length)
        except asyncio.IncompleteReadError:
            return False  # closed before a whole request: nothing to answer
        except asyncio.LimitOverrunError:
            return await self._refuse(BadRequest(431, f"request head over {MAX_HEAD_BYTES} bytes"))
        except BadRequest as exc:
            return await self._refuse(exc)
        started = self._app.clock()
        try:
            response = await self._app.respond(request)
            keep, head = self._head(request, response)
        except Exception:  # a bug in a handler, or a header it gave that cannot be sent
            self._errors.handler_error(request.method, request.path)
            response = plain(500, "Internal Server Error")
            keep, head = self._head(request, response)
        await self._write(head, b"" if request.method == "HEAD" else response.body)
        route = self._app.route(request)
        stats = self._app.stats
        key = (route, response.status)
        stats.requests_total[key] = stats.requests_total.get(key, 0) + 1
        seconds = stats.request_seconds_total.get(route, 0.0)
        stats.request_seconds_total[route] = seconds + self._app.clock() - started
        return keep

    def _head(self, request: Request, response: Response) -> tuple[bool, bytes]:
        """(whether the connection stays open, the response's head)."""
        keep = request.keep_alive and not self.closing  # the server may close meanwhile
        # HTTP/1.1 keeps the connection and HTTP/1.0 closes it unless the field says else.
        connection = None if keep == (request.version == (1, 1)) else _CONNECTION[keep]
        return keep, self._app.head(response, connection)

    async def _refuse(self, exc: BadRequest) -> bool:
        self._errors.bad_request(_peer(self._writer), exc)
        response = plain(exc.status, exc.reason)
        await self._write(self._app.head(response, "close"), response.body)
        return False

    async def _write(self, head: bytes, body: bytes) -> None:
        """Write a response within the write timeout; a client that does not take it in
        time is dropped and counted."""
        try:
            async with asyncio.timeout(self._app.write_timeout_seconds):
                self._writer.write(head)
                self._writer.write(body)
                await self._writer.drain()
        except TimeoutError:
            self._app.stats.write_timeouts_total += 1
            self._writer.transport.abort()
            raise


_CONNECTION = {True: "keep-alive", False: "close"}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_http_date = functools.lru_cache(maxsize=1)(http_date)  # the Date field, built once a second


def _peer(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)


# --- listening ---


class RunningServer:
    """A listening server; `close()` stops accepting, drops idle connections and waits
    for requests in flight, up to the shutdown timeout."""

    def __init__(
        self,
        app: App,
        *,
        read_timeout_seconds: float,
        shutdown_timeout_seconds: float,
    ) -> None:
        self._app = app
        self._read_timeout_seconds = read_timeout_seconds
        self._shutdown_timeout_seconds = shutdown_timeout_seconds
        self._errors = RequestErrorLog(app.stats)
        self._connections: dict[asyncio.Task[None], _Connection] = {}
        self._server: asyncio.Server | None = None
        self._closing = False
        # Bound (host, port) socket names; port 0 was replaced by the real port.
        self.addresses: list[tuple[str, int]] = []

    @property
    def port(self) -> int:
        return self.addresses[0][1]

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._closing:  # accepted, or through its TLS handshake, after close() began
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        connection = _Connection(
            self._app,
            reader,
            writer,
            read_timeout_seconds=self._read_timeout_seconds,
            errors=self._errors,
        )
        self._connections[task] = connection
        try:
            await connection.serve()
        except asyncio.CancelledError:
            # close() dropped it. Ending cancelled would make Python 3.11's streams log
            # a traceback: its callback asks a cancelled task for its exception.
            pass
        except Exception:  # a bug of ours: asyncio would log it unthrottled
            self._errors.connection_error(_peer(writer))
            writer.transport.abort()
        finally:
            del self._connections[task]

    async def close(self) -> None:
        if self._server is None:
            return
        self._closing = True  # connections register synchronously: this set is final
        self._server.close()
        for task, connection in list(self._connections.items()):
            connection.closing = True
            if connection.idle:
                task.cancel()
        if self._connections:
            _, late = await asyncio.wait(
                list(self._connections), timeout=self._shutdown_timeout_seconds
            )
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)
        await self._server.wait_closed()
        self._server = None


async def start_server(
    app: App,
    *,
    host: str | None,
    port: int,
    ssl_context: ssl.SSLContext | None = None,
    read_timeout_seconds: float = 10.0,
    shutdown_timeout_seconds: float = 5.0,
) -> RunningServer:
    """Listen on host:port (host None: every interface), with TLS when `ssl_context` is set.

    `read_timeout_seconds` closes connections idle or stuck before a complete request
    (dcgm-exporter's 10 s). Requests that do not parse and failed accept() calls are
    counted in `app.stats` and logged rate-limited (`abuse`): this installs an exception
    handler on the running event loop, which stays (see AcceptErrorHandler).
    Raises OSError naming the address when it cannot listen.
    """
    server = RunningServer(
        app,
        read_timeout_seconds=read_timeout_seconds,
        shutdown_timeout_seconds=shutdown_timeout_seconds,
    )
    try:
        # The reader's limit bounds a request head: readuntil() fails past it.
        listening = await asyncio.start_server(
            server._accepted, host, port, ssl=ssl_context, limit=MAX_HEAD_BYTES
        )
    except OSError as exc:
        where = f"[{host}]:{port}" if host and ":" in host else f"{host or ''}:{port}"
        # asyncio's own strerror repeats the address: "error while attempting to bind..."
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise OSError(exc.errno, f"cannot listen on {where}: {reason}") from exc
    server._server = listening
    server.addresses = [(s.getsockname()[0], s.getsockname()[1]) for s in listening.sockets]
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(AcceptErrorHandler(app.stats, loop.get_exception_handler()))
    scheme = "https" if ssl_context is not None else "http"
    log.info("listening on %s (%s)", server.addresses, scheme)
    return server
