"""The Prometheus client against a real loopback HTTP server: answers, and errors by kind
(a stand-in server, to answer what Prometheus would not), and real Prometheus's own NaN and
infinities."""

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest
from aiohttp import web
from helpers import wait_for
from helpers.e2e import Prometheus
from helpers.tools import require
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.autoscaler.prom.client import (
    NATIVE_HISTOGRAMS,
    PromClient,
    PromError,
    PromErrorKind,
    parse_matrix,
)

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


Handler = Callable[[web.Request], Awaitable[web.Response]]


@pytest.fixture
async def stand_in() -> AsyncIterator[Callable[[str, Handler], Awaitable[str]]]:
    """A stand-in Prometheus answering `path` (any method) with a handler: its URL."""
    runners: list[web.AppRunner] = []

    async def start(path: str, handler: Handler) -> str:
        app = web.Application(client_max_size=4 * 2**20)  # a long query's form
        app.router.add_route("*", path, handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    yield start
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
def serve(stand_in) -> Callable[[web.Response | None, float], Awaitable[str]]:
    """A stand-in whose range queries answer `response` (None: MATRIX) after `delay`."""

    def start(response: web.Response | None, delay: float = 0.0) -> Awaitable[str]:
        async def handler(request: web.Request) -> web.Response:
            await asyncio.sleep(delay)
            return web.json_response(MATRIX) if response is None else response

        return stand_in("/api/v1/query_range", handler)

    return start


@pytest.fixture(scope="module")
def real_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Prometheus, once for the module (a target that never answers): its URL."""
    require("prometheus")
    prometheus = Prometheus(tmp_path_factory.mktemp("prom"), "127.0.0.1:1")
    try:
        wait_for(lambda: prometheus.query("vector(1)"), timeout=30, what="Prometheus")
        yield f"http://127.0.0.1:{prometheus.port}"
    finally:
        prometheus.stop()


async def test_a_matrix_answer_drops_nan_and_inf(serve) -> None:
    client = PromClient(await serve(None))
    try:
        (series,) = await client.query_range("up", start=0, end=30, step=5)
    finally:
        await client.close()
    assert dict(series.labels) == {"namespace": "a", "pod": "p"}
    assert series.samples == ((10.0, 1.5), (25.0, 2.0))


@pytest.mark.prometheus
async def test_real_prometheus_nan_and_infinities_are_dropped(real_prometheus: str) -> None:
    """0/0 and 1/0 as Prometheus itself writes them ("NaN", "+Inf") leave no sample."""
    client = PromClient(real_prometheus)
    try:
        expr = " or ".join(
            f'label_replace({value}, "kind", "{kind}", "", "")'
            for kind, value in (
                ("nan", "vector(0) / vector(0)"),
                ("inf", "vector(1) / vector(0)"),
                ("-inf", "vector(-1) / vector(0)"),
                ("two", "vector(2)"),
            )
        )
        now = time.time()
        series = await client.query_range(expr, start=now - 30, end=now, step=5)
    finally:
        await client.close()
    samples = {s.labels["kind"]: s.samples for s in series}
    assert samples.keys() == {"nan", "inf", "-inf", "two"}
    assert samples["nan"] == samples["inf"] == samples["-inf"] == ()
    assert [value for _, value in samples["two"]] == [2.0] * 7


@pytest.mark.prometheus
async def test_real_prometheus_answers_a_query_too_long_for_a_request_line(
    real_prometheus: str,
) -> None:
    """A 1.1 MB `signals.queries` override: Prometheus answered 431 to it as GET."""
    client = PromClient(real_prometheus)
    try:
        now = time.time()
        query = "vector(2) # " + "x" * 1_100_000  # a PromQL comment, to the end of the line
        (series,) = await client.query_range(query, start=now - 10, end=now, step=5)
    finally:
        await client.close()
    assert [value for _, value in series.samples] == [2.0] * 3


@pytest.mark.prometheus
async def test_real_prometheus_tells_its_time(real_prometheus: str) -> None:
    client = PromClient(real_prometheus)
    try:
        sent = time.time()
        server = await client.server_time()
        received = time.time()
    finally:
        await client.close()
    assert sent - 0.001 <= server <= received + 0.001  # milliseconds, as it writes them


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({"resultType": "vector", "result": []}, id="an-empty-vector"),
        pytest.param(
            {"resultType": "vector", "result": [{"metric": {}, "value": [1, "1"]}] * 2},
            id="a-vector-of-two",
        ),
        pytest.param({"resultType": "vector", "result": [{"metric": {}}]}, id="no-sample"),
        pytest.param({"resultType": "matrix", "result": [[1, "1"]]}, id="a-matrix"),
        pytest.param({"resultType": "scalar", "result": [1, "NaN"]}, id="nan"),
        pytest.param({"resultType": "scalar", "result": [1, "soon"]}, id="not-a-number"),
        pytest.param({"resultType": "scalar", "result": [1, 10**400]}, id="past-a-float"),
        pytest.param({"resultType": "scalar", "result": [1]}, id="no-value"),
        pytest.param({"resultType": "scalar"}, id="no-result"),
        pytest.param(["scalar"], id="not-an-object"),
        pytest.param(None, id="no-data"),
    ],
)
async def test_a_time_that_is_not_a_number_is_a_bad_response(stand_in, data) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"status": "success", "data": data})

    client = PromClient(await stand_in("/api/v1/query", handler))
    try:
        with pytest.raises(PromError) as err:
            await client.server_time()
    finally:
        await client.close()
    assert err.value.kind is PromErrorKind.BAD_RESPONSE


async def test_a_time_answered_as_victoriametrics_answers_it_is_read(stand_in) -> None:
    """VictoriaMetrics answers every instant query as a vector, `time()` too: a reading
    that failed for good left the loop on this machine's clock."""

    async def handler(request: web.Request) -> web.Response:
        now = "1796180000.25"
        data = {"resultType": "vector", "result": [{"metric": {}, "value": [1796180000, now]}]}
        return web.json_response({"status": "success", "data": data})

    client = PromClient(await stand_in("/api/v1/query", handler))
    try:
        assert await client.server_time() == 1796180000.25
    finally:
        await client.close()


async def test_a_short_query_is_a_get_and_a_long_one_a_form_post(stand_in) -> None:
    """GET as before wherever it fits (a read-only proxy may pass nothing else); the same
    parameters in the body where they would not fit a request line."""
    asked: list[tuple[str, dict[str, str]]] = []

    async def handler(request: web.Request) -> web.Response:
        form = await request.post() if request.method == "POST" else request.query
        asked.append((request.method, dict(form)))
        return web.json_response(MATRIX)

    client = PromClient(await stand_in("/api/v1/query_range", handler))
    long = "up # " + "x" * 100_000
    try:
        for query in ("up", long):
            (series,) = await client.query_range(query, start=0, end=30, step=5)
            assert series.samples == ((10.0, 1.5), (25.0, 2.0))
    finally:
        await client.close()
    params = {"start": "0.000", "end": "30.000", "step": "5"}
    assert asked == [("GET", {"query": "up", **params}), ("POST", {"query": long, **params})]


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
        pytest.param(  # Prometheus' own --query.timeout: api.go answers 503 "timeout"
            web.json_response(
                {"status": "error", "errorType": "timeout", "error": "query timed out"},
                status=503,
            ),
            0.0,
            PromErrorKind.TIMEOUT,
            id="prometheus-query-timeout",
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
        # json.loads raises RecursionError, not ValueError: out of the gather, the tick
        pytest.param(
            web.Response(text="[" * 100_000 + "]" * 100_000),
            0.0,
            PromErrorKind.BAD_RESPONSE,
            id="nested-too-deep",
        ),
    ],
)
async def test_errors_have_a_kind(serve, response, delay: float, kind: PromErrorKind) -> None:
    # 0.2 s only where the answer is meant to be late: a loaded machine (a full suite on two
    # cores) once took longer than that over an immediate 503, a timeout, not unavailable
    client = PromClient(await serve(response, delay), timeout_seconds=0.2 if delay else 30.0)
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


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.just(10**400)  # JSON's numbers have no bound; a float's do
    | st.floats()
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3)
    ),
    max_leaves=12,
)
_SAMPLE = st.lists(_JSON | st.text("0123456789.eNaInf+-"), max_size=3)
_SERIES = st.fixed_dictionaries(
    {},
    optional={
        "metric": _JSON | st.dictionaries(st.text(max_size=5), st.text(max_size=5)),
        "values": _JSON | st.lists(_SAMPLE, max_size=3),
        "histograms": _JSON,
    },
)


@given(
    _JSON
    | st.fixed_dictionaries(
        {"resultType": st.just("matrix")}, optional={"result": _JSON | st.lists(_SERIES)}
    )
)
def test_any_answer_is_series_or_a_bad_response(data) -> None:
    """Whatever a Prometheus (or a proxy before it) answers: series with finite samples,
    or PromError BAD_RESPONSE (the tick's MissingMetrics), or BAD_QUERY for native
    histograms, never another exception."""
    try:
        series = parse_matrix(data)
    except PromError as err:
        assert err.kind is PromErrorKind.BAD_RESPONSE or str(err) == NATIVE_HISTOGRAMS
        return
    assert all(math.isfinite(v) for s in series for _, v in s.samples)
    assert all(type(v) is str for s in series for v in s.labels.values())


@pytest.mark.parametrize("sample", [[10**400, "1"], [1, 10**400]], ids=["time", "value"])
def test_a_number_past_a_float_is_a_bad_response(sample) -> None:
    """An integer past a float's range (a broken backend): one bad answer, not an
    OverflowError failing the tick for every workload."""
    data = {"resultType": "matrix", "result": [{"metric": {}, "values": [sample]}]}
    with pytest.raises(PromError) as err:
        parse_matrix(data)
    assert err.value.kind is PromErrorKind.BAD_RESPONSE


def test_native_histogram_samples_are_a_bad_query_that_says_so() -> None:
    """`rate(vllm:time_to_first_token_seconds[1m])` over a native histogram answers
    histogram samples (the API's `histograms`, not `values`): read as no samples, its
    workloads held on MissingMetrics with nothing to say why."""
    histogram = {"count": "4", "sum": "1.5", "buckets": [[0, "0.5", "1", "4"]]}
    series = {"metric": {"pod": "p"}, "histograms": [[10, histogram], [15, histogram]]}
    with pytest.raises(PromError) as err:
        parse_matrix({"resultType": "matrix", "result": [series]})
    assert err.value.kind is PromErrorKind.BAD_QUERY
    assert "native histogram" in str(err.value) and "histogram_quantile()" in str(err.value)


@pytest.mark.parametrize(
    "labels",
    [{"namespace": "a", "pod": ["p"]}, {"namespace": {"x": 1}}, {"le": [0.5]}, {"pod": 3}],
)
def test_a_label_value_that_is_not_a_string_is_a_bad_response(labels) -> None:
    """A series with `"pod": ["x"]` raised TypeError deep in the tick, which stopped every
    workload, and the daemon exited."""
    data = {"resultType": "matrix", "result": [{"metric": labels, "values": [[10, "1"]]}]}
    with pytest.raises(PromError) as err:
        parse_matrix(data)
    assert err.value.kind is PromErrorKind.BAD_RESPONSE
    assert "a label value is not a string" in str(err.value)


@pytest.mark.parametrize("ts", [1e12, "+Inf", "NaN", 5])
def test_a_sample_outside_the_querys_range_is_dropped(ts) -> None:
    """A sample timestamped in the future (1e12, +Inf) was kept, and every later sample
    was then "not newer" than it: the workload's history stood still, and KEDA's policy
    read a queue of 0 against a real 20."""
    data = {"resultType": "matrix", "result": [{"values": [[ts, "7"], [20, "1"], [30, "2"]]}]}
    (series,) = parse_matrix(data, start=10, end=30)
    assert series.samples == ((20.0, 1.0), (30.0, 2.0))


async def test_an_error_text_is_bounded(serve) -> None:
    """A 200 KB error page became a 200 KB log line and every workload's condition."""
    body = {"status": "error", "errorType": "execution", "error": "x" * 200_000}
    client = PromClient(await serve(web.json_response(body, status=422)))
    try:
        with pytest.raises(PromError) as err:
            await client.query_range("up", start=0, end=30, step=5)
    finally:
        await client.close()
    assert len(str(err.value)) <= 500 and str(err.value).endswith("...")
