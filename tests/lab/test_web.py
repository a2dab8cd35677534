"""The lab's web page server over real loopback HTTP: the page, and only Prometheus'
read-only query endpoints forwarded (the page in a browser is tested in test_main.py)."""

import asyncio

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from helpers import free_port, stalled_connections_answer
from helpers.chromium import Panels, chromium
from helpers.tools import require

from gpufleet.lab import web as lab_web
from gpufleet.lab.web import page_app, serve_page


async def client_for(prometheus_url: str) -> TestClient:
    client = TestClient(TestServer(page_app(prometheus_url)))
    await client.start_server()
    return client


async def test_it_serves_the_page_and_its_script() -> None:
    client = await client_for("http://127.0.0.1:9")
    try:
        page = await client.get("/")
        assert page.status == 200 and page.content_type == "text/html"
        assert '<script src="page.js">' in await page.text()
        script = await client.get("/page.js")
        assert script.status == 200 and script.content_type == "text/javascript"
        assert "api/v1/" in await script.text()  # relative: answered by the lab, not the net
        assert (await client.get("/prometheus.yml")).status == 404
    finally:
        await client.close()


async def test_it_forwards_no_write_and_no_other_endpoint() -> None:
    client = await client_for("http://127.0.0.1:9")
    try:
        admin = await client.get("/api/v1/admin/tsdb/delete_series")
        assert admin.status == 404
        assert (await client.get("/api/v1/targets")).status == 404
        assert (await client.post("/api/v1/query", data={"query": "up"})).status == 405
    finally:
        await client.close()


async def test_prometheus_down_is_a_json_error_the_page_shows() -> None:
    client = await client_for(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    try:
        answer = await client.get("/api/v1/query", params={"query": "up"})
        assert answer.status == 502
        body = await answer.json()
        assert body["status"] == "error" and "Prometheus at http://127.0.0.1:" in body["error"]
    finally:
        await client.close()


async def prometheus_answering(handler) -> TestServer:
    """A stand-in Prometheus whose /api/v1/query answers with `handler`."""
    app = web.Application()
    app.router.add_get("/api/v1/query", handler)
    server = TestServer(app)
    await server.start_server()
    return server


async def test_a_prometheus_starting_up_is_forwarded_as_it_answers() -> None:
    """Prometheus answers 503 in plain text while it starts: the lab called it JSON, and
    the page showed "SyntaxError: ... is not valid JSON"."""

    async def starting(_: web.Request) -> web.Response:
        return web.Response(status=503, text="Service Unavailable")

    prometheus = await prometheus_answering(starting)
    client = await client_for(str(prometheus.make_url("")).rstrip("/"))
    try:
        answer = await client.get("/api/v1/query", params={"query": "up"})
        assert (answer.status, answer.content_type) == (503, "text/plain")
        assert await answer.text() == "Service Unavailable"
    finally:
        await client.close()
        await prometheus.close()


async def test_a_hung_prometheus_is_an_error_that_says_so() -> None:
    """A timeout's own text is empty: the page said "Prometheus at ...: " and nothing."""

    async def hung(_: web.Request) -> web.Response:
        await asyncio.sleep(30)
        return web.Response(text="{}")

    prometheus = await prometheus_answering(hung)
    client = TestClient(
        TestServer(page_app(str(prometheus.make_url("")).rstrip("/"), timeout_seconds=0.2))
    )
    await client.start_server()
    try:
        answer = await client.get("/api/v1/query", params={"query": "up"})
        assert answer.status == 502
        assert (await answer.json())["error"].endswith(": no answer within 0.2 s")
    finally:
        await client.close()
        await prometheus.close()


async def test_with_prometheus_down_each_panel_keeps_its_title_and_one_error_line(
    tmp_path,
) -> None:
    """The page opened with Prometheus down had untitled panels and a new error line every
    5 s (35 after 30 s); after a failure the old chart stayed under "now"."""
    require("chromium")
    client = await client_for(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    try:
        # 15 s of the page's virtual time: three refreshes
        dom = await asyncio.to_thread(chromium, tmp_path, str(client.make_url("/")), "--dump-dom")
    finally:
        await client.close()
    panels = Panels()
    panels.feed(dom)
    assert len(panels.sections) == 5
    for name, attributes in panels.sections.items():
        assert attributes.get("data-error", "").startswith("Error: Prometheus at"), name
        body = dom.split(f'id="{name}"', 1)[1].split("</section>", 1)[0]
        assert body.count("<h2>") == 1 and body.count('class="empty"') == 1, (name, body)
        assert "<svg" not in body


async def test_an_exporter_down_is_said_under_the_idle_cost(tmp_path) -> None:
    """A node whose exporter is down has no pods in the idle-cost sum: the bars halved with
    one of the lab's two exporters down, and nothing said why."""
    require("chromium")

    async def query(request: web.Request) -> web.Response:
        expr = request.query["query"]
        if expr.startswith("namespace:gpufleet_idle_gpu_cost"):
            result = [{"metric": {"namespace": "llm"}, "value": [0, "12.5"]}]
        elif expr.startswith("up{"):
            result = [{"metric": {"job": "gpufleet-exporter", "instance": "b"}, "value": [0, "0"]}]
        else:
            result = []
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return web.json_response(body)

    prometheus = await prometheus_answering(query)
    client = await client_for(str(prometheus.make_url("")).rstrip("/"))
    try:
        dom = await asyncio.to_thread(chromium, tmp_path, str(client.make_url("/")), "--dump-dom")
    finally:
        await client.close()
        await prometheus.close()
    panels = Panels()
    panels.feed(dom)
    assert panels.sections["idle-cost"].get("data-exporters-down") == "1"
    assert "1 exporter down: their nodes' idle cost is missing" in dom


async def test_a_connection_stalled_before_its_request_is_closed(monkeypatch) -> None:
    """aiohttp kept a connection that never sent a request for an hour: about a thousand of
    them held every descriptor of the lab's process, its exporter's included."""
    monkeypatch.setattr(lab_web, "IDLE_SECONDS", 0.3)
    port = free_port()
    runner = await serve_page("http://127.0.0.1:9", "127.0.0.1", port)
    try:
        assert await asyncio.to_thread(stalled_connections_answer, port) == (b"", b"")
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/") as page,
        ):
            assert page.status == 200
    finally:
        await runner.cleanup()
