"""The Prometheus client against a real loopback HTTP server: answers, and errors by kind."""

import asyncio
import json
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from gpufleet.autoscaler.prom.client import PromClient, PromError, PromErrorKind

MATRIX = {
    "status": "success",
    "data": {
        "resultType": "matrix",
        "result": [
            {
                "metric": {"namespace": "a", "pod": "p"},
                "values": [[10, "1.5"], [15, "NaN"], [20, "+Inf"], [25, "2"]],
            }
        ],
    },
}


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[web.Response | None, float], str]]:
    runners: list[web.AppRunner] = []

    async def start(response: web.Response | None, delay: float = 0.0) -> str:
        seen: list = []

        async def handler(request: web.Request) -> web.Response:
            seen.append(dict(request.query))
            await asyncio.sleep(delay)
            if response is None:
                return web.json_response(MATRIX)
            return response

        app = web.Application()
        app.router.add_get("/api/v1/query_range", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    yield start
    for runner in runners:
        await runner.cleanup()


async def test_a_matrix_answer_drops_nan_and_inf(serve) -> None:
    client = PromClient(await serve(None))
    try:
        (series,) = await client.query_range("up", start=0, end=30, step=5)
    finally:
        await client.close()
    assert dict(series.labels) == {"namespace": "a", "pod": "p"}
    assert series.samples == ((10.0, 1.5), (25.0, 2.0))


@pytest.mark.parametrize(
    ("response", "delay", "kind"),
    [
        pytest.param(
            web.json_response(
                {"status": "error", "errorType": "bad_data", "error": "parse error"}, status=400
            ),
            0.0,
            PromErrorKind.BAD_QUERY,
            id="bad-promql",
        ),
        pytest.param(
            web.Response(status=503, text="down"), 0.0, PromErrorKind.UNAVAILABLE, id="5xx-not-json"
        ),
        pytest.param(web.Response(text="<html>"), 0.0, PromErrorKind.BAD_RESPONSE, id="not-json"),
        pytest.param(
            web.json_response(
                {"status": "success", "data": {"resultType": "vector", "result": []}}
            ),
            0.0,
            PromErrorKind.BAD_RESPONSE,
            id="not-a-matrix",
        ),
        pytest.param(None, 1.0, PromErrorKind.TIMEOUT, id="slow"),
    ],
)
async def test_errors_have_a_kind(serve, response, delay: float, kind: PromErrorKind) -> None:
    client = PromClient(await serve(response, delay), timeout_seconds=0.2)
    try:
        with pytest.raises(PromError) as err:
            await client.query_range("up", start=0, end=30, step=5)
    finally:
        await client.close()
    assert err.value.kind is kind


async def test_nothing_listening_is_unavailable() -> None:
    client = PromClient("http://127.0.0.1:9")
    try:
        with pytest.raises(PromError) as err:
            await client.query_range("up", start=0, end=30, step=5)
    finally:
        await client.close()
    assert err.value.kind is PromErrorKind.UNAVAILABLE
    assert json.dumps(str(err.value))
