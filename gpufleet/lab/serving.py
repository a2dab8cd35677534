"""Simulated model servers: each Ready pod of a Deployment serves requests as vLLM does and
exposes vLLM's own metric names on its own HTTP port.

A pod's engine follows the service model `gpufleet simulate` replays (`ServiceModel`):
a request takes a batch slot (else it waits: `vllm:num_requests_waiting`), waits for the
pod's prefill stage (one prompt at a time), gets its first token, then decodes while the
time per output token grows with the batch. A load balancer sends each arrival to the ready
pod with the fewest requests; a pod being deleted takes no new ones and drains, and what it
has not served when it goes is counted in `unserved`. Arrivals are Poisson at a rate the
caller sets (and may change), or a request trace's (the format `gpufleet simulate`
replays), in real time or sped up.

With `gateway`, the load balancer is a gateway that holds the requests that find no ready
pod (a Deployment at zero replicas), up to `max_held`, and sends them on, arrival times
kept, as soon as one is Ready, as an activator in front of a scaled-to-zero workload does.
It serves the count it holds as `lab_gateway_requests_waiting` (the lab's own name: no
gateway's metric is a standard) on its own port, a target without a `pod` label: the
signal a GPUAutoscaler's `signals.gatewayQueueDepth` reads. Without it, such requests are
dropped and counted in `unserved`.

Prometheus finds the pods through a file_sd targets file this module rewrites as pods come
and go, each target labelled with its `namespace` and `pod`, as Kubernetes service
discovery labels them.
"""

import asyncio
import contextlib
import dataclasses
import heapq
import json
import math
import random
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from gpufleet.autoscaler.replay.core.model import ServiceModel
from gpufleet.autoscaler.replay.core.pipeline import PROMPT_TOKEN_BOUNDS
from gpufleet.autoscaler.replay.core.trace import Trace
from gpufleet.core.selectors import selector_string
from gpufleet.lab.kubeapi.cluster import is_ready
from gpufleet.lab.kubeapi.resources import RESOURCES
from gpufleet.lab.kubeapi.store import ObjectStore

PODS = next(r for r in RESOURCES if (r.group, r.plural) == ("", "pods"))
# vLLM's HTTP keep-alive (VLLM_HTTP_TIMEOUT_KEEP_ALIVE, its uvicorn timeout_keep_alive).
KEEP_ALIVE_SECONDS = 5.0
# vLLM's TTFT histogram buckets (vllm/v1/metrics/loggers.py), also used for prefill time.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)


@dataclass(slots=True)
class _Request:
    arrival: float
    prompt_tokens: int
    output_tokens: int
    prefill_start: float = 0.0


@dataclass(slots=True)
class _Histogram:
    buckets: tuple[float, ...] = TTFT_BUCKETS
    counts: list[int] = field(init=False)  # per bucket, the last above every bound
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.buckets, value)] += 1  # le: the first bound >= value
        self.total += value
        self.n += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out, cumulative = [f"# TYPE {name} histogram"], 0
        for bound, count in zip((*self.buckets, math.inf), self.counts, strict=True):
            cumulative += count
            # As vLLM's prometheus_client writes it: le="1.0", not "1" (rules match on it).
            le = "+Inf" if math.isinf(bound) else repr(bound)
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {cumulative}')
        out += [f"{name}_sum{{{labels}}} {self.total:.6f}", f"{name}_count{{{labels}}} {self.n}"]
        return out


class VllmEngine:
    """One pod's engine, advanced to a time by `advance`."""

    def __init__(self, model: ServiceModel, *, model_name: str = "model") -> None:
        self.model = model
        self.model_name = model_name
        self._waiting: deque[_Request] = deque()  # no batch slot yet
        self._prefill_queue: deque[_Request] = deque()  # a slot, waiting for the prefill stage
        self._prefilling: tuple[float, _Request] | None = None  # (end, request)
        self._decoding: list[tuple[float, int, _Request]] = []  # heap of (end, seq, request)
        self._seq = 0
        self.success = 0
        self.prompt_tokens = 0
        self.ttft = _Histogram()
        self.prefill = _Histogram()
        self.prompt_lengths = _Histogram(PROMPT_TOKEN_BOUNDS)  # observed as requests finish

    @property
    def running(self) -> int:
        return len(self._prefill_queue) + (self._prefilling is not None) + len(self._decoding)

    @property
    def in_flight(self) -> int:
        return self.running + len(self._waiting)

    def submit(
        self, now: float, prompt_tokens: int, output_tokens: int, *, arrival: float | None = None
    ) -> None:
        """A request reaching the engine at `now`; `arrival` (default `now`) is when it was
        sent, earlier for one a gateway held: its TTFT counts from then."""
        self.advance(now)
        self._waiting.append(
            _Request(now if arrival is None else arrival, prompt_tokens, output_tokens)
        )
        self._admit(now)

    def advance(self, now: float) -> None:
        """Process every prefill and decode that ends by `now`, in time order."""
        while True:
            prefill_end = self._prefilling[0] if self._prefilling else math.inf
            decode_end = self._decoding[0][0] if self._decoding else math.inf
            t = min(prefill_end, decode_end)
            if t > now:
                return
            if prefill_end <= decode_end:
                self._prefill_done(t)
            else:
                _, _, done = heapq.heappop(self._decoding)
                self.success += 1
                self.prompt_lengths.observe(done.prompt_tokens)
                self._admit(t)

    def _admit(self, t: float) -> None:
        while self._waiting and self.running < self.model.batch_slots:
            self._prefill_queue.append(self._waiting.popleft())
        if self._prefilling is None and self._prefill_queue:
            r = self._prefill_queue.popleft()
            r.prefill_start = t
            self._prefilling = (t + r.prompt_tokens / self.model.prefill_tokens_per_second, r)

    def _prefill_done(self, t: float) -> None:
        assert self._prefilling is not None
        _, r = self._prefilling
        self._prefilling = None
        self.ttft.observe(t - r.arrival)
        self.prefill.observe(t - r.prefill_start)
        self.prompt_tokens += r.prompt_tokens
        m = self.model
        per_token = m.decode_seconds_per_token + m.decode_seconds_per_token_per_sequence * len(
            self._decoding
        )
        self._seq += 1
        heapq.heappush(self._decoding, (t + r.output_tokens * per_token, self._seq, r))
        self._admit(t)

    def metrics(self) -> str:
        labels = f'model_name="{self.model_name}",engine="0"'
        lines = [
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{labels}}} {len(self._waiting)}",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {self.running}",
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{{labels},finished_reason="stop"}} {self.success}',
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{labels}}} {self.prompt_tokens}",
            *self.ttft.lines("vllm:time_to_first_token_seconds", labels),
            *self.prefill.lines("vllm:request_prefill_time_seconds", labels),
            *self.prompt_lengths.lines("vllm:request_prompt_tokens", labels),
        ]
        return "\n".join(lines) + "\n"


@dataclass(slots=True)
class _Pod:
    engine: VllmEngine
    runner: web.AppRunner
    address: str
    deleting: bool = False


async def _listen(metrics: Callable[[web.Request], Awaitable[web.Response]]) -> web.AppRunner:
    """Serve `metrics` at /metrics on a loopback port of the system's choosing."""
    app = web.Application()
    app.router.add_get("/metrics", metrics)
    # aiohttp's keep-alive timer also closes a connection that never sends: without it, one
    # held every silent client's socket for an hour.
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=KEEP_ALIVE_SECONDS)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


def gateway_queue_query(namespace: str) -> str:
    """PromQL for the requests the gateway holds for `namespace`: a GPUAutoscaler's
    `signals.gatewayQueueDepth` in the lab."""
    return f'sum(lab_gateway_requests_waiting{{namespace="{namespace}"}})'


class ServingFleet:
    """The serving pods of one Deployment's label selector in one namespace."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        namespace: str,
        labels: dict[str, str],
        targets_file: Path,
        model: ServiceModel | None = None,
        rate_rps: float = 1.0,
        prompt_tokens: int = 500,
        output_tokens: int = 20,
        seed: int = 0,
        trace: Trace | None = None,
        speed: float = 1.0,
        clock: Callable[[], float] = time.time,
        gateway: bool = False,
        max_held: int = 10_000,
    ) -> None:
        """Arrivals are Poisson at `rate_rps` (prompt and output tokens fixed), or `trace`'s
        requests from the first `step` on. `speed` > 1 replays the trace that many times
        faster and makes the pods that much faster too, so the replicas a trace needs stay
        the same (the lab cluster's cold starts are the caller's to shorten alike)."""
        self._store = store
        self._namespace = namespace
        self._labels = labels
        self._targets_file = targets_file
        base = model or ServiceModel(
            batch_slots=8, prefill_tokens_per_second=2000.0, decode_seconds_per_token=0.01
        )
        self._model = dataclasses.replace(
            base,
            prefill_tokens_per_second=base.prefill_tokens_per_second * speed,
            decode_seconds_per_token=base.decode_seconds_per_token / speed,
            decode_seconds_per_token_per_sequence=base.decode_seconds_per_token_per_sequence
            / speed,
        )
        self._trace = trace
        self._speed = speed
        self._trace_start: float | None = None
        self._trace_next = 0
        self.rate_rps = rate_rps
        self._prompt, self._output = prompt_tokens, output_tokens
        self._rng = random.Random(seed)
        self._clock = clock
        self.pods: dict[str, _Pod] = {}
        # Requests lost: arrivals with no ready pod to take them (nor room at the gateway),
        # and those still in flight on a pod that went.
        self.unserved = 0
        self._gateway = gateway
        self._max_held = max_held
        self.held: deque[tuple[float, int, int]] = deque()  # (arrival, prompt, output)
        self._gateway_address = ""  # where the gateway's metrics are served, once started
        self._gateway_runner: web.AppRunner | None = None
        self._next_arrival: float | None = None
        self._task: asyncio.Task | None = None
        self._write_targets()

    def start(self, period_seconds: float = 0.02) -> None:
        async def loop() -> None:
            while True:
                await self.step(self._clock())
                await asyncio.sleep(period_seconds)

        self._task = asyncio.get_running_loop().create_task(loop(), name="lab-serving")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for pod in self.pods.values():
            await pod.runner.cleanup()
        self.pods.clear()
        if self._gateway_runner is not None:
            await self._gateway_runner.cleanup()
            self._gateway_runner = None

    @property
    def trace_done(self) -> bool:
        """Every request of the trace has arrived (always False without a trace)."""
        return self._trace is not None and self._trace_next >= len(self._trace)

    async def step(self, now: float) -> None:
        if self._gateway and self._gateway_runner is None:
            await self._serve_gateway()
        await self._sync_pods(now)
        self._release_held(now)
        if self._trace is not None:
            self._replay(now)
        else:
            self._poisson(now)
        for pod in self.pods.values():
            pod.engine.advance(now)

    def _poisson(self, now: float) -> None:
        if self._next_arrival is None or self.rate_rps <= 0:
            self._next_arrival = now
        while self.rate_rps > 0 and self._next_arrival <= now:
            self.send(self._next_arrival)
            self._next_arrival += self._rng.expovariate(self.rate_rps)

    def _replay(self, now: float) -> None:
        trace = self._trace
        assert trace is not None
        if self._trace_start is None:
            self._trace_start = now
        while self._trace_next < len(trace):
            i = self._trace_next
            at = self._trace_start + float(trace.arrival_seconds[i]) / self._speed
            if at > now:
                break
            self.send(at, int(trace.prompt_tokens[i]), int(trace.output_tokens[i]))
            self._trace_next += 1

    def send(
        self, t: float, prompt_tokens: int | None = None, output_tokens: int | None = None
    ) -> None:
        """One request arriving at `t` (the fleet's prompt and output sizes by default): to the
        ready pod with the fewest in flight, else to the gateway, else dropped."""
        prompt = self._prompt if prompt_tokens is None else prompt_tokens
        output = self._output if output_tokens is None else output_tokens
        ready = [p for p in self.pods.values() if not p.deleting]
        if not ready:
            if self._gateway and len(self.held) < self._max_held:
                self.held.append((t, prompt, output))
            else:
                self.unserved += 1
            return
        target = min(ready, key=lambda p: p.engine.in_flight)
        target.engine.submit(t, prompt, output)

    def _release_held(self, now: float) -> None:
        """Send what the gateway holds to the ready pods, oldest first, fewest in flight."""
        ready = [p for p in self.pods.values() if not p.deleting]
        while ready and self.held:
            arrival, prompt, output = self.held.popleft()
            target = min(ready, key=lambda p: p.engine.in_flight)
            target.engine.submit(now, prompt, output, arrival=arrival)

    async def _serve_gateway(self) -> None:
        async def metrics(_: web.Request) -> web.Response:
            text = (
                "# TYPE lab_gateway_requests_waiting gauge\n"
                f"lab_gateway_requests_waiting {len(self.held)}\n"
            )
            return web.Response(text=text, content_type="text/plain")

        self._gateway_runner = await _listen(metrics)
        self._gateway_address = f"127.0.0.1:{self._gateway_runner.addresses[0][1]}"
        self._write_targets()

    async def _sync_pods(self, now: float) -> None:
        selector = selector_string(self._labels)
        live = {}
        for pod in self._store.list(PODS, self._namespace, label_selector=selector):
            meta = pod["metadata"]
            if is_ready(pod):
                live[meta["name"]] = bool(meta.get("deletionTimestamp"))
        changed = False
        for name, deleting in live.items():
            if name not in self.pods:
                self.pods[name] = await self._serve(VllmEngine(self._model))
                changed = True
            self.pods[name].deleting = deleting
        for name in set(self.pods) - set(live):
            gone = self.pods.pop(name)
            gone.engine.advance(now)
            self.unserved += gone.engine.in_flight
            await gone.runner.cleanup()
            changed = True
        if changed:
            self._write_targets()

    async def _serve(self, engine: VllmEngine) -> _Pod:
        async def metrics(_: web.Request) -> web.Response:
            engine.advance(self._clock())
            return web.Response(text=engine.metrics(), content_type="text/plain")

        runner = await _listen(metrics)
        return _Pod(engine=engine, runner=runner, address=f"127.0.0.1:{runner.addresses[0][1]}")

    def _write_targets(self) -> None:
        groups = [
            {"targets": [pod.address], "labels": {"namespace": self._namespace, "pod": name}}
            for name, pod in sorted(self.pods.items())
        ]
        if self._gateway_address:
            labels = {"namespace": self._namespace, "job": "gateway"}
            groups.append({"targets": [self._gateway_address], "labels": labels})
        tmp = self._targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        tmp.replace(self._targets_file)  # atomic: Prometheus never reads half a file
