"""The live path's parsing and join lose nothing the replay's policies decide on.

The replay's pipeline scrapes a simulated workload; the same samples, written as the range
query answers Prometheus would give (JSON, one series per signal for the workload's pod),
go through the live controller's parser and join into a fresh SignalHistory. A policy fed
from each path decides the same, tick by tick. The answers are written here, not computed
by Prometheus: the presets' queries on real Prometheus are test_presets.py's, and the whole
live loop over real Prometheus is the controller's and the daemon's tests.
"""

import json

from gpufleet.autoscaler.core.factory import GPUFLEET, HPA, KEDA, Tuning, make_policy
from gpufleet.autoscaler.core.gather import workload_sums
from gpufleet.autoscaler.core.history import SIGNALS, SignalHistory
from gpufleet.autoscaler.core.observation import Replica, ReplicaState
from gpufleet.autoscaler.core.workload import WorkloadConfig
from gpufleet.autoscaler.prom.client import parse_matrix
from gpufleet.autoscaler.replay.core.model import PipelineModel
from gpufleet.autoscaler.replay.core.pipeline import Pipeline

POD = ("llm", "vllm-0")
REPLICAS = (Replica(name="vllm-0", state=ReplicaState.READY, since=0.0, created=0.0),)


def scraped_pipeline() -> Pipeline:
    """Ten minutes of a workload whose load ramps up and falls back, scraped every 5 s."""
    pipeline = Pipeline(PipelineModel())
    requests = 0
    for step in range(1, 121):
        now = step * 5.0
        rate = 4 + (step if step < 60 else 120 - step) // 6  # requests per second
        for _ in range(rate * 5):
            pipeline.first_token(0.2 + step / 600, prompt_tokens=800, prefill_seconds=0.05)
        requests += rate * 5
        pipeline.scrape(
            now,
            arrived=requests,
            completed=requests,
            queue_depth=max(0, rate - 10),
            in_flight=rate,
            busy_seconds=(),
        )
    return pipeline


def recorded_answers(pipeline: Pipeline) -> dict[str, str]:
    """Each signal's samples as Prometheus' JSON answer to a range query."""
    everything = pipeline.history.observe(1800.0, REPLICAS)  # the whole 10 minutes
    answers = {}
    for signal in SIGNALS:
        series = getattr(everything, signal)
        answers[signal] = json.dumps(
            {
                "status": "success",
                "data": {
                    "resultType": "matrix",
                    "result": [
                        {
                            "metric": {"namespace": POD[0], "pod": POD[1]},
                            "values": [
                                [t, repr(v)]
                                for t, v in zip(series.times, series.values, strict=True)
                            ],
                        }
                    ],
                },
            }
        )
    return answers


def live_history(answers: dict[str, str], delay_seconds: float) -> SignalHistory:
    history = SignalHistory(history_seconds=1800.0, delay_seconds=delay_seconds)
    for signal, text in answers.items():
        matrix = parse_matrix(json.loads(text)["data"])
        for t, value in workload_sums(matrix, {POD: "chat"}).get("chat", ()):
            history.add(signal, t, value)
    return history


def test_both_paths_decide_alike() -> None:
    pipeline = scraped_pipeline()
    live = live_history(recorded_answers(pipeline), pipeline.delay_seconds)
    workload = WorkloadConfig(name="chat", max_replicas=50, batch_slots=64)
    for name in (GPUFLEET, HPA, KEDA):
        replayed, controlled = (make_policy(name, workload, Tuning()) for _ in range(2))
        decisions = 0
        now = 0.0
        while now <= 600.0:
            a = replayed.decide(pipeline.history.observe(now, REPLICAS))
            b = controlled.decide(live.observe(now, REPLICAS))
            assert (a.desired, a.reason, a.message, a.headroom) == (
                b.desired,
                b.reason,
                b.message,
                b.headroom,
            ), (name, now)
            decisions += 1
            now += replayed.interval_seconds
        assert decisions > 30
