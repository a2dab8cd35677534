"""The exporter's HTTP(S) endpoints: `/metrics`, `/health` and a landing page at `/`.

Exists to serve what the collector already rendered: a scrape is a dict lookup, a choice
between up to four prebuilt byte strings and a write (gzip text is built only while
scrapers ask for it: `store`). It must never collect, render, call NVML or
the kubelet, or log per request.

Decisions:
- Before the first collection `/metrics` answers 503 (dcgm-exporter sends an empty 200
  while it reloads); a 503 makes Prometheus' `up` honest instead of recording "no GPUs".
- Prometheus text 0.0.4 by default, as dcgm-exporter: Prometheus asks for OpenMetrics
  first, and there dcgm's counters (no `_total`) can only be `unknown`. With `openmetrics`
  on, negotiation follows RFC 9110 q-values: OpenMetrics 1.0.0 when the client ranks it
  above text, text otherwise (including when nothing matches; never 406).
- With a web config every route is protected, `/health` included, as exporter-toolkit does,
  and dcgm-exporter's 10 s read and write timeouts apply: both from the shared server
  (`gpufleet.http.server`), which also listens.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from gpufleet.core.server_stats import ServerStats
from gpufleet.exporter.http.store import ExpositionStore
from gpufleet.http.server import App, Handler, Response, RunningServer, new_app, start_server
from gpufleet.http.server import plain as _plain
from gpufleet.http.wire import TEXT_CONTENT_TYPE, Request

if TYPE_CHECKING:  # loaded only with --web-config-file (YAML, bcrypt, TLS setup)
    from gpufleet.http.webconfig import WebConfig

# Re-exported: the exporter's daemon and tests reach the server through this module.
__all__ = ["App", "RunningServer", "build_app", "start_server"]

OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
_LANDING_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>gpufleet exporter</title></head><body>\n"
    b"<h1>gpufleet exporter</h1>\n"
    b'<p><a href="metrics">Metrics</a></p>\n<p><a href="health">Health</a></p>\n'
    b"</body></html>\n"
)
_METRICS_HEADERS = {
    (openmetrics, gzip): {
        "Content-Type": OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE,
        "Vary": "Accept, Accept-Encoding",
        **({"Content-Encoding": "gzip"} if gzip else {}),
    }
    for openmetrics in (False, True)
    for gzip in (False, True)
}


def build_app(
    store: ExpositionStore,
    *,
    web_config: WebConfig | None,
    stale_after_seconds: float,
    clock: Callable[[], float] = time.monotonic,
    extra_routes: Mapping[str, Handler] | None = None,
    stats: ServerStats | None = None,
    write_timeout_seconds: float = 10.0,
    openmetrics: bool = False,
) -> App:
    """The exporter's application; `app.stats` holds its counters.

    `clock` is monotonic seconds, compared with `Exposition.collected_monotonic` by
    `/health` and driving the rate limiter. `extra_routes` get the same auth and headers.
    `openmetrics` lets clients negotiate OpenMetrics (the collector must render it).
    """
    routes = _routes(
        store, clock=clock, stale_after_seconds=stale_after_seconds, openmetrics=openmetrics
    )
    return new_app(
        {**routes, **(extra_routes or {})},
        web_config=web_config,
        stats=stats,
        clock=clock,
        write_timeout_seconds=write_timeout_seconds,
    )


def _routes(
    store: ExpositionStore,
    *,
    clock: Callable[[], float],
    stale_after_seconds: float,
    openmetrics: bool,
) -> dict[str, Handler]:
    """`/metrics`, `/health` and `/`: each reads `store`; none renders or collects."""

    async def metrics(request: Request) -> Response:
        exposition = store.latest()
        if exposition is None:
            return _plain(503, "no collection yet")
        om = (
            openmetrics
            and exposition.openmetrics is not None
            and wants_openmetrics(request.headers.get("accept", ""))
        )
        gzip = accepts_gzip(request.headers.get("accept-encoding", ""))
        if om:
            plain, packed = exposition.openmetrics, exposition.openmetrics_gzip
        else:
            plain, packed = exposition.text, exposition.text_gzip
            if gzip and packed is None:
                store.want_text_gzip(clock())
        if not gzip or packed is None:  # not built for this snapshot: serve it plain
            return Response(200, plain, _METRICS_HEADERS[(om, False)])
        return Response(200, packed, _METRICS_HEADERS[(om, True)])

    async def health(request: Request) -> Response:
        exposition = store.latest()
        if exposition is None:
            return _plain(503, "no collection yet")
        age_seconds = clock() - exposition.collected_monotonic
        if age_seconds > stale_after_seconds:
            return _plain(503, f"snapshot stale: last collection {age_seconds:.0f} s ago")
        return _plain(200, "OK")

    async def landing(request: Request) -> Response:
        return Response(200, _LANDING_PAGE, {"Content-Type": "text/html; charset=utf-8"})

    return {"/metrics": metrics, "/health": health, "/": landing}


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
