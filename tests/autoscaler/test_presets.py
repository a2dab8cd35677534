"""Every engine preset's queries on real Prometheus, over series with that engine's real names.

One pod serves all five engines' metrics (their names do not overlap); each preset's
queries must return a value for it, joined to its workload as the controller joins them.
"""

import asyncio
import math
import time
from collections.abc import Iterator

import pytest
from helpers import wait_for
from helpers.e2e import Prometheus
from helpers.serving import MetricsServer
from helpers.tools import require

from gpufleet.autoscaler.core.gather import workload_buckets, workload_quantiles, workload_sums
from gpufleet.autoscaler.core.signals import PRESETS, model_selector
from gpufleet.autoscaler.prom.client import PromClient

pytestmark = pytest.mark.prometheus
POD = ("llm", "engines-0")
BUCKETS = ("0.1", "0.5", "1", "+Inf")


def histogram(name: str, t: float, *, scale: float = 1.0) -> str:
    """A histogram whose observations grow 10/s, a third under 0.1 (x scale), all under 1."""
    n = 10 * t
    counts = (n / 3, n * 2 / 3, n, n)
    lines = [f"# TYPE {name} histogram"]
    for le, c in zip(BUCKETS, counts, strict=True):
        bound = le if le == "+Inf" else f"{float(le) * scale:g}"
        lines.append(f'{name}_bucket{{le="{bound}"}} {c:.3f}')
    lines += [f"{name}_sum {n * 0.4 * scale:.3f}", f"{name}_count {n:.3f}"]
    return "\n".join(lines)


def engines(started: float) -> str:
    t = time.time() - started
    return (
        "\n".join(
            [
                "# TYPE vllm:num_requests_waiting gauge",
                'vllm:num_requests_waiting{model_name="m"} 7',
                "# TYPE vllm:num_requests_running gauge",
                'vllm:num_requests_running{model_name="m"} 3',
                "# TYPE vllm:request_success_total counter",
                f'vllm:request_success_total{{model_name="m",finished_reason="stop"}} {5 * t:.3f}',
                "# TYPE vllm:prompt_tokens_total counter",
                f'vllm:prompt_tokens_total{{model_name="m"}} {5000 * t:.3f}',
                histogram("vllm:time_to_first_token_seconds", t),
                histogram("vllm:request_prefill_time_seconds", t),
                histogram("vllm:request_prompt_tokens", t, scale=1000),
                "# TYPE sglang:num_queue_reqs gauge",
                "sglang:num_queue_reqs 7",
                "# TYPE sglang:num_running_reqs gauge",
                "sglang:num_running_reqs 3",
                "# TYPE sglang:num_requests_total counter",
                f"sglang:num_requests_total {5 * t:.3f}",
                "# TYPE sglang:prompt_tokens_total counter",
                f"sglang:prompt_tokens_total {5000 * t:.3f}",
                histogram("sglang:time_to_first_token_seconds", t),
                histogram("sglang:prompt_tokens_histogram", t, scale=1000),
                "# TYPE tgi_queue_size gauge",
                "tgi_queue_size 7",
                "# TYPE tgi_batch_current_size gauge",
                "tgi_batch_current_size 3",
                "# TYPE tgi_request_success counter",
                f"tgi_request_success {5 * t:.3f}",
                histogram("tgi_request_input_length", t, scale=1000),
                "# TYPE nv_inference_pending_request_count gauge",
                'nv_inference_pending_request_count{model="m",version="1"} 7',
                "# TYPE nv_inference_request_success counter",
                f'nv_inference_request_success{{model="m",version="1"}} {5 * t:.3f}',
                histogram("nv_inference_first_response_histogram_ms", t, scale=1000),
                "# TYPE ts_inference_requests_total counter",
                f'ts_inference_requests_total{{model_name="m"}} {5 * t:.3f}',
                "# TYPE ts_queue_latency_microseconds counter",
                f'ts_queue_latency_microseconds{{model_name="m"}} {2e6 * t:.1f}',
                "# TYPE ts_inference_latency_microseconds counter",
                f'ts_inference_latency_microseconds{{model_name="m"}} {3e6 * t:.1f}',
            ]
        )
        + "\n"
    )


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory) -> Iterator[str]:
    require("prometheus")
    started = time.time()
    pod = MetricsServer(lambda: engines(started))
    server = Prometheus(
        tmp_path_factory.mktemp("prom"), pod.address, labels={"namespace": POD[0], "pod": POD[1]}
    )
    try:
        wait_for(
            lambda: server.query("count_over_time(tgi_queue_size[1m]) >= 4"),
            timeout=30,
            what="four scrapes",
        )
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()
        pod.stop()


@pytest.mark.parametrize(
    ("preset", "signal"), [(p, s) for p, signals in PRESETS.items() for s in signals]
)
def test_each_preset_query_answers_on_real_prometheus(
    prometheus_url: str, preset: str, signal: str
) -> None:
    query = PRESETS[preset][signal]
    text = query.render(selector="", window="5s")

    async def fetch():
        client = PromClient(prometheus_url)
        try:
            now = time.time()
            return await client.query_range(text, start=now - 10, end=now, step=1)
        finally:
            await client.close()

    answer = asyncio.run(fetch())
    owners = {POD: "w"}
    if query.kind == "buckets":
        samples = workload_buckets(answer, owners).get("w", ())
        assert samples, f"{preset} {signal}: no samples for {text}"
        # 10 requests/s, a third up to 100 tokens, all up to 1000: cumulative by bound.
        rates = dict(samples[-1][1])
        assert rates[100.0] == pytest.approx(10 / 3, rel=0.15), rates
        assert rates[1000.0] == rates[math.inf] == pytest.approx(10.0, rel=0.15), rates
        return
    joined = (
        workload_quantiles(answer, owners, query.quantile)
        if query.kind == "quantile"
        else workload_sums(answer, owners)
    )
    values = [v * query.scale for _, v in joined.get("w", ())]
    assert values, f"{preset} {signal}: no samples for {text}"
    latest = values[-1]
    assert math.isfinite(latest) and latest >= 0
    expected = {
        "queue_depth": 2.0 if preset == "torchserve" else 7.0,  # TorchServe: Little's law
        "in_flight": 3.0,
        "completion_rate": 5.0,
        # vLLM and SGLang count arrivals as first tokens (the TTFT histogram grows 10/s here)
        "arrival_rate": 10.0 if preset in ("vllm", "sglang") else 5.0,
        "ttft_p90_seconds": 0.85,  # 90% of 0.5..1 interpolated
    }
    if signal in expected:
        assert latest == pytest.approx(expected[signal], rel=0.15), (preset, signal, values)


@pytest.mark.parametrize("preset", [p for p in PRESETS if model_selector(p, "m")])
def test_any_model_name_makes_queries_prometheus_runs(prometheus_url: str, preset: str) -> None:
    """A newline in `signals.model` went into the PromQL string raw, and every query of the
    workload was a parse error; a name holding `{{window}}` had it replaced by the window."""
    model = 'line\nbreak "quoted" back\\slash\ttab {{window}}'
    selector = model_selector(preset, model)
    assert "{{window}}" in PRESETS[preset]["queue_depth"].render(selector=selector, window="5s")

    async def fetch_all():
        client = PromClient(prometheus_url)
        try:
            now = time.time()
            for query in PRESETS[preset].values():
                text = query.render(selector=selector, window="5s")
                await client.query_range(text, start=now - 10, end=now, step=1)  # no PromError
        finally:
            await client.close()

    asyncio.run(fetch_all())
