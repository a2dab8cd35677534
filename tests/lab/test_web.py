"""The lab's web page server over real loopback HTTP: the page, and only Prometheus'
read-only query endpoints forwarded (the page in a browser is tested in test_main.py)."""

from aiohttp.test_utils import TestClient, TestServer
from helpers import free_port

from gpufleet.lab.web import page_app


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
