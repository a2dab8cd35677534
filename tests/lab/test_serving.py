"""Simulated vLLM pods: the engine follows the replay's service model, each Ready pod serves
its own /metrics in vLLM's names, and a trace replays (sped up) until every request is done."""

import asyncio
import json
import urllib.request
from pathlib import Path

from helpers import stalled_connections_answer

from gpufleet.autoscaler.replay.core.model import ServiceModel
from gpufleet.autoscaler.replay.core.trace import trace_from_arrays
from gpufleet.lab import serving
from gpufleet.lab.kubeapi.resources import RESOURCES
from gpufleet.lab.kubeapi.store import ObjectStore
from gpufleet.lab.serving import ServingFleet, VllmEngine

RES = {(r.group, r.plural): r for r in RESOURCES}
MODEL = ServiceModel(
    batch_slots=2,
    prefill_tokens_per_second=1000.0,
    decode_seconds_per_token=0.01,
    decode_seconds_per_token_per_sequence=0.0,
)
PODS = RES[("", "pods")]
READY_POD = {
    "metadata": {"name": "vllm-0", "labels": {"app": "vllm"}},
    "spec": {"containers": [{"name": "vllm", "image": "x"}]},
    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
}


def with_namespace() -> ObjectStore:
    """A store at time 0 holding the namespace `llm`."""
    store = ObjectStore(clock=lambda: 0.0)
    store.create(RES[("", "namespaces")], "", {"metadata": {"name": "llm"}})
    return store


def test_the_engine_queues_beyond_its_batch_slots_and_prefills_one_at_a_time() -> None:
    engine = VllmEngine(MODEL)
    for _ in range(3):
        engine.submit(0.0, 500, 10)  # 0.5 s of prefill each, then 0.1 s of decode
    assert (engine.running, engine.in_flight) == (2, 3)  # the third waits for a slot
    engine.advance(0.5)
    assert engine.ttft.n == 1 and engine.success == 0
    engine.advance(0.6)
    assert engine.success == 1  # decode done: the waiting request takes the slot
    engine.advance(10.0)
    assert (engine.success, engine.in_flight, engine.prompt_tokens) == (3, 0, 1500)
    text = engine.metrics()
    assert 'vllm:num_requests_waiting{model_name="model",engine="0"} 0' in text
    assert 'vllm:time_to_first_token_seconds_count{model_name="model",engine="0"} 3' in text
    assert (
        'vllm:request_success_total{model_name="model",engine="0",finished_reason="stop"} 3' in text
    )
    # Bucket bounds as prometheus_client formats them, so rules/slo.rules.yml's le="1.0" matches.
    for le in ("0.001", "1.0", "2560.0", "+Inf"):
        assert (
            f'vllm:time_to_first_token_seconds_bucket{{model_name="model",engine="0",le="{le}"}}'
            in text
        )
    # The prompt lengths of the finished requests, in vLLM's 1-2-5 buckets: 500 <= le="500.0".
    prompts = 'vllm:request_prompt_tokens_bucket{model_name="model",engine="0",le='
    assert f'{prompts}"200.0"}} 0' in text and f'{prompts}"500.0"}} 3' in text
    assert f'{prompts}"100000.0"}} 3' in text and f'{prompts}"+Inf"}} 3' in text


async def test_a_trace_replays_sped_up_on_ready_pods_and_prometheus_can_find_them(
    tmp_path: Path,
) -> None:
    store = with_namespace()
    store.create(PODS, "llm", READY_POD)
    trace = trace_from_arrays([0.0, 1.0, 2.0, 3.0, 4.0], [500] * 5, [10] * 5)
    targets = tmp_path / "targets.json"
    fleet = ServingFleet(
        store,
        namespace="llm",
        labels={"app": "vllm"},
        targets_file=targets,
        model=MODEL,
        trace=trace,
        speed=20.0,
    )
    fleet.start()
    try:
        for _ in range(200):
            await asyncio.sleep(0.02)
            engines = [p.engine for p in fleet.pods.values()]
            if fleet.trace_done and engines and engines[0].success == 5:
                break
        (group,) = json.loads(targets.read_text())
        assert group["labels"] == {"namespace": "llm", "pod": "vllm-0"}
        url = f"http://{group['targets'][0]}/metrics"
        text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read())
    finally:
        await fleet.stop()
    assert (
        b'vllm:request_success_total{model_name="model",engine="0",finished_reason="stop"} 5'
        in text
    )


async def test_the_gateway_holds_requests_until_a_pod_is_ready_and_counts_their_wait(
    tmp_path: Path,
) -> None:
    """Issue 18 §3, scale to zero: with no ready pod the gateway holds the requests (its
    gauge says how many, on a target without a pod label) and sends them on when a pod
    turns Ready; their TTFT counts from their arrival, the wait for the pod included."""
    store = with_namespace()
    targets = tmp_path / "targets.json"
    fleet = ServingFleet(
        store,
        namespace="llm",
        labels={"app": "vllm"},
        targets_file=targets,
        model=MODEL,
        rate_rps=0.0,
        gateway=True,
        max_held=2,
    )
    try:
        await fleet.step(0.0)
        for t in (0.0, 0.1, 0.2):  # the third finds the gateway full: dropped, counted
            fleet.send(t, 500, 10)
        (group,) = json.loads(targets.read_text())
        assert group["labels"] == {"namespace": "llm", "job": "gateway"}
        url = f"http://{group['targets'][0]}/metrics"
        text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read())
        assert b"\nlab_gateway_requests_waiting 2\n" in text
        assert fleet.unserved == 1
        store.create(PODS, "llm", READY_POD)
        await fleet.step(10.0)  # Ready at 10: both go to it
        assert not fleet.held
        engine = fleet.pods["vllm-0"].engine
        engine.advance(20.0)
        # First token at 10.5 and 11.0, counted from arrivals at 0.0 and 0.1.
        assert (engine.ttft.n, round(engine.ttft.total, 6)) == (2, 10.5 + 10.9)
    finally:
        await fleet.stop()


async def test_a_connection_stalled_before_its_request_is_closed_at_vllms_keep_alive(
    tmp_path: Path, monkeypatch
) -> None:
    """aiohttp kept a connection that never sent a request for an hour, on every pod and on
    the gateway: about a thousand of them held every descriptor of the lab's process."""
    monkeypatch.setattr(serving, "KEEP_ALIVE_SECONDS", 0.3)
    store = with_namespace()
    store.create(PODS, "llm", READY_POD)
    targets = tmp_path / "targets.json"
    fleet = ServingFleet(
        store,
        namespace="llm",
        labels={"app": "vllm"},
        targets_file=targets,
        model=MODEL,
        rate_rps=0.0,
        gateway=True,
    )
    try:
        await fleet.step(0.0)
        groups = json.loads(targets.read_text())
        assert {g["labels"].get("job", "pod") for g in groups} == {"gateway", "pod"}
        for group in groups:
            port = int(group["targets"][0].rsplit(":", 1)[1])
            answers = await asyncio.to_thread(stalled_connections_answer, port)
            assert answers == (b"", b"")
    finally:
        await fleet.stop()


async def test_the_requests_of_a_pod_that_goes_are_counted_unserved(tmp_path: Path) -> None:
    """They were counted neither served nor unserved: a closed loop that lost them passed."""
    store = with_namespace()
    store.create(PODS, "llm", READY_POD)
    fleet = ServingFleet(
        store,
        namespace="llm",
        labels={"app": "vllm"},
        targets_file=tmp_path / "targets.json",
        model=MODEL,
        rate_rps=0.0,
    )
    try:
        await fleet.step(0.0)
        for _ in range(5):  # 0.5 s of prefill each, one at a time, then 0.1 s of decode
            fleet.send(0.0, 500, 10)
        await fleet.step(0.55)
        engine = fleet.pods["vllm-0"].engine
        assert (engine.success, engine.in_flight) == (0, 5)  # the first decodes until 0.6
        store.delete(PODS, "llm", "vllm-0")
        await fleet.step(0.65)
        assert not fleet.pods
        assert (engine.success, fleet.unserved) == (1, 4)  # served before it went; lost
    finally:
        await fleet.stop()
