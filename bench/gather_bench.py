"""What the live controller's Prometheus gather costs per tick when workloads join queries
others already send, against the same gather's steady tick.

N GPUAutoscalers send the vLLM preset's queries (shared: one query per signal for all),
one pod each; a stand-in Prometheus in this process answers every range query with one
series per pod, and the CPU it spends building answers is left out. Rows:
- steady: every workload in every tick;
- one joins: one more GPUAutoscaler made, from the tick it first takes part until it
  holds its whole 30-minute history (fetched beside the fresh fetches, a query at a time);
- sat out: every other tick 2% of the workloads sit it out (their target could not be
  read), and come back the next, with the times they missed fetched for them.

`--latency-ms` holds each answer that long: a backfill asks only while the fresh fetches
do, so how many ticks a joiner takes depends on how long Prometheus takes to answer.

    python3 -m bench.gather_bench [--workloads 1000] [--ticks 20] [--latency-ms 0]
"""

import argparse
import asyncio
import random
import time

from bench.entry import exit_with
from gpufleet.autoscaler.controller.prom_gather import PromGather
from gpufleet.autoscaler.controller.stats import Stats
from gpufleet.autoscaler.controller.workload import Tick, Workload, new_workload
from gpufleet.autoscaler.core.gather import RangeSeries
from gpufleet.autoscaler.core.replicas import PodState
from gpufleet.autoscaler.core.spec import parse_spec

STEP, HISTORY = 5.0, 1800.0
# the vLLM preset's summed signals, each answered at every step by the stand-in (its
# histogram ones have no `le` series here)
PRESET_SIGNALS = (
    "arrival_rate",
    "queue_depth",
    "in_flight",
    "completion_rate",
    "prompt_tokens_rate",
    "ttft_sum_rate",
    "prefill_sum_rate",
)


class StandIn:
    """Every step of every query answered, one series per pod; counts its own CPU."""

    def __init__(self, latency_seconds: float) -> None:
        self.latency = latency_seconds
        self.pods: list[tuple[str, str]] = []
        self.cpu = 0.0
        self.queries = 0

    async def query_range(self, text: str, *, start: float, end: float, step: float):
        begun = time.process_time()
        self.queries += 1
        times = [start + i * step for i in range(round((end - start) / step) + 1)]
        samples = tuple((t, 1.0) for t in times)
        answer = tuple(
            RangeSeries(labels={"namespace": ns, "pod": name}, samples=samples)
            for ns, name in self.pods
        )
        self.cpu += time.process_time() - begun
        await asyncio.sleep(self.latency)  # an answer comes over the network
        return answer


def autoscaler(namespace: str) -> Workload:
    obj = {
        "apiVersion": "autoscaling.gpufleet.dev/v1alpha1",
        "kind": "GPUAutoscaler",
        "metadata": {"namespace": namespace, "name": "chat", "uid": namespace, "generation": 1},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
            "maxReplicas": 8,
            "policy": "keda",
            "keda": {"queueTarget": 10},
        },
    }
    return new_workload(
        parse_spec(obj),
        1,
        None,
        {},
        rate_window="5s",
        history_seconds=HISTORY,
        gpufleet_headroom=None,
        placeholders=False,
    )


def tick(w: Workload) -> Tick:
    ns = w.key[0]
    return Tick(workload=w, pods=[PodState(namespace=ns, name=f"{ns}-0", ready_since=0.0)])


class Run:
    def __init__(self, n: int, latency_seconds: float) -> None:
        self.prom = StandIn(latency_seconds)
        self.gather = PromGather(
            self.prom, Stats(), step_seconds=STEP, history_seconds=HISTORY, wait_seconds=60
        )
        self.workloads = {w.key: w for w in (autoscaler(f"ns{i}") for i in range(n))}
        self.prom.pods = [(ns, f"{ns}-0") for ns, _ in self.workloads]
        self.now = 1_000_000.0

    async def tick(self, present: list[Workload]) -> tuple[float, int]:
        """One gather tick a step after the last: its CPU less the stand-in's, its queries."""
        ticks = [tick(w) for w in present]
        cpu, stand_in, queries = time.process_time(), self.prom.cpu, self.prom.queries
        await self.gather.gather(ticks, self.workloads, self.now, monotonic=self.now)
        spent = time.process_time() - cpu - (self.prom.cpu - stand_in)
        self.now += STEP
        return spent, self.prom.queries - queries


async def measure(n: int, ticks: int, latency_seconds: float) -> list[tuple[str, float, float]]:
    run = Run(n, latency_seconds)
    everyone = list(run.workloads.values())
    for _ in range(3):  # the first ticks fetch the whole history for everyone
        await run.tick(everyone)
    steady = [await run.tick(everyone) for _ in range(ticks)]
    joiner = autoscaler("joiner")
    run.workloads[joiner.key] = joiner
    run.prom.pods.append(("joiner", "joiner-0"))
    everyone.append(joiner)
    full = round(HISTORY / STEP) + 1

    def lacking() -> bool:
        obs = joiner.history.observe(run.now - STEP, ())
        return any(len(getattr(obs, s).times) < full for s in PRESET_SIGNALS)

    join = [await run.tick(everyone)]
    while lacking():
        join.append(await run.tick(everyone))
    rng = random.Random(1)
    out = []
    for _ in range(ticks):
        sat = {w.key for w in everyone if rng.random() < 0.02}
        out.append(await run.tick([w for w in everyone if w.key not in sat]))
        out.append(await run.tick(everyone))  # back: what they missed is fetched for them
    run.gather.close()

    def mean(rows: list[tuple[float, int]]) -> tuple[float, float]:
        return (
            1000 * sum(r[0] for r in rows) / len(rows),
            sum(r[1] for r in rows) / len(rows),
        )

    return [
        ("steady", *mean(steady)),
        (f"one joins: the {len(join)} ticks until it holds {full} samples of each", *mean(join)),
        ("2% sat out the tick before", *mean(out)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument(
        "--latency-ms", type=float, default=0.0, help="how long each answer is held"
    )
    args = parser.parse_args()
    if args.latency_ms < 0:
        parser.error(f"--latency-ms: {args.latency_ms:g} is below 0")
    rows = asyncio.run(measure(args.workloads, args.ticks, args.latency_ms / 1000))
    held = f", each answer held {args.latency_ms:g} ms" if args.latency_ms else ""
    print(f"# gpufleet gather benchmark: {args.workloads:,} workloads{held}\n")
    print("| tick | gather CPU ms / tick | queries / tick | x steady |")
    print("|---|---:|---:|---:|")
    base = rows[0][1]
    for name, cpu, queries in rows:
        print(f"| {name} | {cpu:.1f} | {queries:.1f} | {cpu / base:.2f} |")


if __name__ == "__main__":
    exit_with(main)
