"""An aiohttp server as the daemons serve one: exporter-toolkit's web config (basic auth,
extra headers, rate limit) on every route, dcgm-exporter's 10 s read (idle) and write
timeouts, TLS from the web config, self-metrics counters, and bounded logging of bad
requests and failed accepts (`abuse`). Unknown paths get 404, like any other response.

Exists so every daemon's port behaves the same: each builds its routes and hands them to
`new_app`; none of this knows what a route serves. It must never log per request (aiohttp's
access log is off unless asked for).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware

from gpufleet.core.ratelimit import TokenBucket
from gpufleet.core.server_stats import ServerStats
from gpufleet.http.abuse import AcceptErrorHandler, RequestErrorLog

if TYPE_CHECKING:  # loaded only with --web-config-file (YAML, bcrypt, TLS setup)
    from gpufleet.http.webconfig import WebConfig

log = logging.getLogger(__name__)

_PLAIN = "text/plain; charset=utf-8"
_MAX_REQUEST_BODY_BYTES = 64 * 1024  # no route reads a body

SERVER_STATS = web.AppKey("gpufleet_server_stats", ServerStats)


def new_app(
    routes: Iterable[web.AbstractRouteDef],
    *,
    web_config: WebConfig | None,
    stats: ServerStats | None = None,
    clock: Callable[[], float] = time.monotonic,
    write_timeout_seconds: float = 10.0,
) -> web.Application:
    """An application serving `routes` behind the web config's auth, headers and rate limit;
    `app[SERVER_STATS]` holds its counters. `clock` (monotonic seconds) drives the rate
    limiter and the request durations."""
    stats = stats if stats is not None else ServerStats()
    middleware = _middleware(
        web_config=web_config, stats=stats, clock=clock, write_timeout_seconds=write_timeout_seconds
    )
    app = web.Application(client_max_size=_MAX_REQUEST_BODY_BYTES, middlewares=[middleware])
    app[SERVER_STATS] = stats
    app.add_routes(routes)
    return app


def _middleware(
    *,
    web_config: WebConfig | None,
    stats: ServerStats,
    clock: Callable[[], float],
    write_timeout_seconds: float,
) -> Middleware:
    extra_headers = dict(web_config.headers) if web_config is not None else {}
    auth = web_config if web_config is not None and web_config.auth_required else None
    limit = web_config.rate_limit if web_config is not None else None
    # exporter-toolkit: rate.NewLimiter(rate.Every(interval), burst).
    limiter = (
        TokenBucket(rate_per_second=1.0 / limit.interval_seconds, burst=limit.burst, clock=clock)
        if limit is not None
        else None
    )

    @web.middleware
    async def serve(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = clock()
        response = await _respond(request, handler, auth=auth, limiter=limiter)
        response.headers.update(extra_headers)
        try:
            # Written here, not after we return, so the write timeout covers it; aiohttp
            # then finds the response already sent.
            async with asyncio.timeout(write_timeout_seconds):
                await response.prepare(request)
                await response.write_eof()
        except TimeoutError:
            stats.write_timeouts_total += 1
            if request.transport is not None:
                request.transport.abort()
        except ConnectionError:
            pass  # the client left; aiohttp sees the closed transport and drops it
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "other"
        key = (route, response.status)
        stats.requests_total[key] = stats.requests_total.get(key, 0) + 1
        seconds = stats.request_seconds_total.get(route, 0.0)
        stats.request_seconds_total[route] = seconds + clock() - started
        return response

    return serve


async def _respond(
    request: web.Request,
    handler: Handler,
    *,
    auth: WebConfig | None,
    limiter: TokenBucket | None,
) -> web.StreamResponse:
    if limiter is not None and not limiter.take():
        return plain(429, "Too Many Requests")
    if auth is not None:
        header = request.headers.get(hdrs.AUTHORIZATION)
        # Repeat scrapes hit the cache on the loop; only a miss pays for bcrypt, in a thread.
        if not auth.check_basic_auth_cached(header) and not await asyncio.to_thread(
            auth.check_basic_auth, header
        ):
            return plain(401, "Unauthorized", {hdrs.WWW_AUTHENTICATE: 'Basic realm="gpufleet"'})
    try:
        return await handler(request)
    except web.HTTPException as exc:  # the router's 404/405: answered like any response
        return web.Response(
            status=exc.status, reason=exc.reason, text=exc.text, headers=exc.headers
        )


def plain(status: int, text: str, headers: dict[str, str] | None = None) -> web.Response:
    """A short text/plain answer."""
    return web.Response(
        status=status, body=text.encode(), headers={hdrs.CONTENT_TYPE: _PLAIN, **(headers or {})}
    )


# --- listening ---


class RunningServer:
    """A listening server; `close()` stops accepting and waits for in-flight requests."""

    __slots__ = ("_runner", "addresses")

    def __init__(self, runner: web.AppRunner) -> None:
        self._runner = runner
        # Bound (host, port, ...) socket names; port 0 was replaced by the real port.
        self.addresses: list[tuple[str, int]] = [
            (address[0], address[1]) for address in runner.addresses
        ]

    @property
    def port(self) -> int:
        return self.addresses[0][1]

    async def close(self) -> None:
        await self._runner.cleanup()


async def start_server(
    app: web.Application,
    *,
    host: str | None,
    port: int,
    ssl_context: ssl.SSLContext | None = None,
    read_timeout_seconds: float = 10.0,
    shutdown_timeout_seconds: float = 5.0,
    access_log: bool = False,
) -> RunningServer:
    """Listen on host:port (host None: every interface), with TLS when `ssl_context` is set.

    `read_timeout_seconds` closes connections idle or stuck before a complete request
    (dcgm-exporter's 10 s). Requests that do not parse and failed accept() calls are
    counted in `app[SERVER_STATS]` and logged rate-limited (`abuse`): this installs an
    exception handler on the running event loop, which stays (see AcceptErrorHandler).
    Raises OSError naming the address when it cannot listen.
    """
    stats = app[SERVER_STATS]
    runner = web.AppRunner(
        app,
        handle_signals=False,
        shutdown_timeout=shutdown_timeout_seconds,
        keepalive_timeout=read_timeout_seconds,
        access_log=logging.getLogger("aiohttp.access") if access_log else None,
        logger=RequestErrorLog(stats),
    )
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
    except OSError as exc:
        await runner.cleanup()
        where = f"[{host}]:{port}" if host and ":" in host else f"{host or ''}:{port}"
        raise OSError(exc.errno, f"cannot listen on {where}: {exc.strerror or exc}") from exc
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(AcceptErrorHandler(stats, loop.get_exception_handler()))
    server = RunningServer(runner)
    scheme = "https" if ssl_context is not None else "http"
    log.info("listening on %s (%s)", server.addresses, scheme)
    return server
