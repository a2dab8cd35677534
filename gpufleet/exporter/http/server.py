"""The exporter's HTTP(S) endpoints: `/metrics`, `/health` and a landing page at `/`.

Exists to serve what the collector already rendered: a scrape is a dict lookup, a choice
between four prebuilt byte strings and a write. It must never collect, render, call NVML or
the kubelet, or log per request (aiohttp's access log is off unless asked for).

Decisions:
- Before the first collection `/metrics` answers 503 (dcgm-exporter sends an empty 200
  while it reloads); a 503 makes Prometheus' `up` honest instead of recording "no GPUs".
- Prometheus text 0.0.4 by default, as dcgm-exporter: Prometheus asks for OpenMetrics
  first, and there dcgm's counters (no `_total`) can only be `unknown`. With `openmetrics`
  on, negotiation follows RFC 9110 q-values: OpenMetrics 1.0.0 when the client ranks it
  above text, text otherwise (including when nothing matches; never 406).
- With a web config every route is protected, `/health` included, as exporter-toolkit does.
- dcgm-exporter's 10 s HTTP read and write timeouts: the read side is aiohttp's idle timer,
  which also runs before the first request; the write side bounds sending the response.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware

from gpufleet.core.ratelimit import TokenBucket
from gpufleet.exporter.core.selfmetrics import ServerStats
from gpufleet.exporter.http.abuse import AcceptErrorHandler, RequestErrorLog
from gpufleet.exporter.http.store import ExpositionStore

if TYPE_CHECKING:  # loaded only with --web-config-file (YAML, bcrypt, TLS setup)
    from gpufleet.exporter.http.webconfig import WebConfig

log = logging.getLogger(__name__)

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
_PLAIN = "text/plain; charset=utf-8"
_MAX_REQUEST_BODY_BYTES = 64 * 1024  # no route reads a body
_LANDING_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>gpufleet exporter</title></head><body>\n"
    b"<h1>gpufleet exporter</h1>\n"
    b'<p><a href="metrics">Metrics</a></p>\n<p><a href="health">Health</a></p>\n'
    b"</body></html>\n"
)
_METRICS_HEADERS = {
    (openmetrics, gzip): {
        hdrs.CONTENT_TYPE: OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE,
        hdrs.VARY: "Accept, Accept-Encoding",
        **({hdrs.CONTENT_ENCODING: "gzip"} if gzip else {}),
    }
    for openmetrics in (False, True)
    for gzip in (False, True)
}


SERVER_STATS = web.AppKey("gpufleet_server_stats", ServerStats)


def build_app(
    store: ExpositionStore,
    *,
    web_config: WebConfig | None,
    stale_after_seconds: float,
    clock: Callable[[], float] = time.monotonic,
    extra_routes: Iterable[web.AbstractRouteDef] = (),
    stats: ServerStats | None = None,
    write_timeout_seconds: float = 10.0,
    openmetrics: bool = False,
) -> web.Application:
    """The exporter's aiohttp application; `app[SERVER_STATS]` holds its counters.

    `clock` is monotonic seconds, compared with `Exposition.collected_monotonic` by
    `/health` and driving the rate limiter. `extra_routes` get the same auth and headers.
    `openmetrics` lets clients negotiate OpenMetrics (the collector must render it).
    """
    stats = stats if stats is not None else ServerStats()
    middleware = _middleware(
        web_config=web_config, stats=stats, clock=clock, write_timeout_seconds=write_timeout_seconds
    )
    app = web.Application(client_max_size=_MAX_REQUEST_BODY_BYTES, middlewares=[middleware])
    app[SERVER_STATS] = stats
    app.add_routes(
        _routes(
            store, clock=clock, stale_after_seconds=stale_after_seconds, openmetrics=openmetrics
        )
    )
    app.add_routes(extra_routes)
    return app


def _routes(
    store: ExpositionStore,
    *,
    clock: Callable[[], float],
    stale_after_seconds: float,
    openmetrics: bool,
) -> list[web.RouteDef]:
    """`/metrics`, `/health` and `/`: each reads `store`; none renders or collects."""

    async def metrics(request: web.Request) -> web.Response:
        exposition = store.latest()
        if exposition is None:
            return _plain(503, "no collection yet")
        om = (
            openmetrics
            and exposition.openmetrics is not None
            and wants_openmetrics(request.headers.get(hdrs.ACCEPT, ""))
        )
        gzip = accepts_gzip(request.headers.get(hdrs.ACCEPT_ENCODING, ""))
        if om:
            plain, packed = exposition.openmetrics, exposition.openmetrics_gzip
        else:
            plain, packed = exposition.text, exposition.text_gzip
            if gzip and packed is None:
                store.want_text_gzip(clock())
        if not gzip or packed is None:  # not built for this snapshot: serve it plain
            return web.Response(body=plain, headers=_METRICS_HEADERS[(om, False)])
        return web.Response(body=packed, headers=_METRICS_HEADERS[(om, True)])

    async def health(request: web.Request) -> web.Response:
        exposition = store.latest()
        if exposition is None:
            return _plain(503, "no collection yet")
        age_seconds = clock() - exposition.collected_monotonic
        if age_seconds > stale_after_seconds:
            return _plain(503, f"snapshot stale: last collection {age_seconds:.0f} s ago")
        return _plain(200, "OK")

    async def landing(request: web.Request) -> web.Response:
        return web.Response(body=_LANDING_PAGE, content_type="text/html", charset="utf-8")

    return [web.get("/metrics", metrics), web.get("/health", health), web.get("/", landing)]


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
        return _plain(429, "Too Many Requests")
    if auth is not None:
        header = request.headers.get(hdrs.AUTHORIZATION)
        # Repeat scrapes hit the cache on the loop; only a miss pays for bcrypt, in a thread.
        if not auth.check_basic_auth_cached(header) and not await asyncio.to_thread(
            auth.check_basic_auth, header
        ):
            return _plain(401, "Unauthorized", {hdrs.WWW_AUTHENTICATE: 'Basic realm="gpufleet"'})
    try:
        return await handler(request)
    except web.HTTPException as exc:  # the router's 404/405: answered like any response
        return web.Response(
            status=exc.status, reason=exc.reason, text=exc.text, headers=exc.headers
        )


def _plain(status: int, text: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status, body=text.encode(), headers={hdrs.CONTENT_TYPE: _PLAIN, **(headers or {})}
    )


# --- content negotiation: pure, memoised because scrapers repeat the same header ---

_OPENMETRICS = ("application", "openmetrics-text", "1.0.0")
_TEXT = ("text", "plain", "0.0.4")


@functools.lru_cache(maxsize=64)
def wants_openmetrics(accept: str) -> bool:
    """True when `accept` ranks OpenMetrics 1.0.0 above Prometheus text 0.0.4.

    Each format takes the q of the most specific range that matches it (a `version`
    parameter must equal the format's; other parameters are ignored). OpenMetrics wins
    on a higher q, then on a more specific match, then on being listed first; a tie
    on the same range (e.g. `*/*`) and q=0 leave the text format.
    """
    ranges = [r for part in accept.split(",") if (r := _media_range(part)) is not None]
    best = {}
    for fmt in (_OPENMETRICS, _TEXT):
        matches = [
            (specificity, -position, q)
            for position, (kind, subtype, version, q) in enumerate(ranges)
            if (specificity := _specificity(fmt, kind, subtype, version)) >= 0
        ]
        specificity, position, q = max(matches, default=(-1, 0, 0.0))
        best[fmt] = (q, specificity, position)
    return best[_OPENMETRICS][0] > 0 and best[_OPENMETRICS] > best[_TEXT]


@functools.lru_cache(maxsize=64)
def accepts_gzip(accept_encoding: str) -> bool:
    """True when `Accept-Encoding` allows gzip: `gzip` (or else `*`) with q > 0."""
    found: dict[str, float] = {}
    for part in accept_encoding.split(","):
        coding, *params = part.split(";")
        q = _qvalue(params)
        if q is not None:
            found[coding.strip().lower()] = q
    q = found.get("gzip", found.get("x-gzip", found.get("*", 0.0)))
    return q > 0


def _media_range(part: str) -> tuple[str, str, str | None, float] | None:
    """(type, subtype, version, q) of one Accept element; None when malformed."""
    media, *params = part.split(";")
    kind, slash, subtype = media.strip().lower().partition("/")
    q = _qvalue(params)
    if not slash or not kind or not subtype or q is None:
        return None
    version = None
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "version":
            version = value.strip().strip('"')
    return kind, subtype, version, q


def _specificity(fmt: tuple[str, str, str], kind: str, subtype: str, version: str | None) -> int:
    """How precisely a media range names `fmt`: 3 with version, 2, 1 for type/*, 0 for */*."""
    fmt_kind, fmt_subtype, fmt_version = fmt
    if kind == "*" and subtype == "*":
        return 0
    if kind != fmt_kind:
        return -1
    if subtype == "*":
        return 1
    if subtype != fmt_subtype or version not in (None, fmt_version):
        return -1
    return 3 if version is not None else 2


def _qvalue(params: list[str]) -> float | None:
    """The q parameter (default 1); None when it is not a number in [0, 1]."""
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            try:
                q = float(value.strip())
            except ValueError:
                return None
            return q if 0.0 <= q <= 1.0 else None
    return 1.0


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
