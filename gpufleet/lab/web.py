"""The lab's web page: the dashboards' key panels (GPU utilization by node and pod,
replicas against demand, idle cost by namespace, firing alerts), for a user with no Grafana.

The page is static HTML and plain JS (`page/`), drawing inline SVG from Prometheus' HTTP
API. The lab forwards only the read-only query endpoints it uses, so the page needs no CORS
and can never change anything in Prometheus.
"""

from importlib import resources

import aiohttp
from aiohttp import web

# Prometheus' HTTP API endpoints the page reads; nothing else is forwarded.
READ_ONLY = ("query", "query_range", "alerts")
_PAGE = resources.files("gpufleet.lab") / "page"
_TYPES = {"index.html": "text/html", "page.js": "text/javascript"}
TIMEOUT_SECONDS = 10.0  # a query the page waits for
# The daemons' read timeout: a browser's idle connection, or one that never sends, is closed.
IDLE_SECONDS = 10.0


def page_app(prometheus_url: str, *, timeout_seconds: float = TIMEOUT_SECONDS) -> web.Application:
    """An app serving the page at `/` and `page.js`, and `/api/v1/{query,query_range,alerts}`
    forwarded to `prometheus_url` (GET only; Prometheus' answer and status as they are, 502
    when it cannot be reached)."""
    app = web.Application()
    session: list[aiohttp.ClientSession] = []

    async def open_session(_: web.Application) -> None:
        session.append(aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_seconds)))

    async def close_session(_: web.Application) -> None:
        for s in session:
            await s.close()

    async def static(request: web.Request) -> web.Response:
        name = request.match_info.get("name") or "index.html"
        if name not in _TYPES:
            raise web.HTTPNotFound()
        text = (_PAGE / name).read_text(encoding="utf-8")
        return web.Response(text=text, content_type=_TYPES[name], charset="utf-8")

    async def forward(request: web.Request) -> web.Response:
        endpoint = request.match_info["endpoint"]
        if endpoint not in READ_ONLY:
            raise web.HTTPNotFound()
        url = f"{prometheus_url}/api/v1/{endpoint}"
        try:
            async with session[0].get(url, params=request.query) as answer:
                body = await answer.read()
                # Its own type: a Prometheus starting up answers 503 in plain text.
                return web.Response(
                    body=body, status=answer.status, content_type=answer.content_type
                )
        except (aiohttp.ClientError, TimeoutError) as err:
            why = str(err) or f"no answer within {timeout_seconds:g} s"  # a timeout says nothing
            return web.json_response(
                {"status": "error", "error": f"Prometheus at {prometheus_url}: {why}"},
                status=502,
            )

    app.on_startup.append(open_session)
    app.on_cleanup.append(close_session)
    app.router.add_get("/", static)
    app.router.add_get("/{name}", static)
    app.router.add_get("/api/v1/{endpoint}", forward)
    return app


async def serve_page(prometheus_url: str, host: str, port: int) -> web.AppRunner:
    """Serve `page_app` on host:port until the returned runner is cleaned up. Raises OSError
    when the address cannot be bound."""
    # aiohttp's keep-alive timer also closes a connection that never sends a request: without
    # it, such a connection held its socket for an hour.
    app = page_app(prometheus_url)
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=IDLE_SECONDS)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError:
        await runner.cleanup()
        raise
    return runner
