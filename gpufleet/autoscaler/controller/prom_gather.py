"""The loop's gather step for signals: Prometheus range queries into each workload's history.

One range query per distinct signal query (not per workload) for the samples since the last
tick, split among the workloads whose pods answered (`core.gather` does the pure joins); a
workload's `signals.gatewayQueueDepth` is one more query, all of its series the workload's,
summed into its queue depth (at zero replicas no pod reports one). The exporter's per-pod
GPU telemetry is read the same way, and only its newest sample kept.

A failed query is reported, not raised: the loop holds the count for that tick.
"""

import asyncio
import math
import time
from collections.abc import Callable, Mapping

from gpufleet.autoscaler.controller.stats import Stats
from gpufleet.autoscaler.controller.workload import Key, Tick, Workload
from gpufleet.autoscaler.core.gather import (
    RangeSeries,
    pod_values,
    workload_buckets,
    workload_quantiles,
    workload_sums,
)
from gpufleet.autoscaler.core.observation import PodTelemetry
from gpufleet.autoscaler.core.signals import GPU_TELEMETRY, SignalQuery
from gpufleet.autoscaler.prom.client import PromClient, PromError, PromErrorKind
from gpufleet.core.messages import MAX_SHOWN_CHARS, cut

# Queries in flight at once: a first tick backfills half an hour of every signal, and
# parsing all of them at the same time for a thousand workloads doubles the peak memory.
QUERY_CONCURRENCY = 2
MAX_POINTS_PER_QUERY = 60  # per series: a backfill arrives in answers of bounded size

Consume = Callable[[tuple[RangeSeries, ...]], None]


class PromGather:
    """Remembers how far each query was fetched, so a tick asks only for what is new."""

    def __init__(
        self, prom: PromClient, stats: Stats, *, step_seconds: float, history_seconds: float
    ) -> None:
        self._prom = prom
        self._stats = stats
        self._step = step_seconds
        self._history_seconds = history_seconds
        self._fetched_until: dict[str, float] = {}  # query text -> newest step fetched

    async def gather(
        self, ticks: list[Tick], workloads: Mapping[Key, Workload], now: float
    ) -> dict[Key, PromError]:
        """Add the samples since the last tick to each workload's history (signals, and the
        exporter's per-pod GPU telemetry); returns, for each workload a failed query left
        short, why (one workload's bad override holds no other)."""
        step = self._step
        end = math.floor(now / step) * step
        owners: dict[str, dict[tuple[str, str], Key]] = {}
        wanted: dict[str, tuple[SignalQuery, list[tuple[Key, str]]]] = {}
        all_pods = {}
        # A workload with a gateway: its queue depth is its pods' plus what the gateway
        # holds, summed per sample time here and added once every answer is in.
        gateways: dict[str, list[Key]] = {}
        queued: dict[Key, dict[float, float]] = {}
        for t in ticks:
            key = t.workload.key
            pods = {(p.namespace, p.name): key for p in t.pods}
            all_pods.update(pods)
            for text, query, signal in t.workload.queries:
                wanted.setdefault(text, (query, []))[1].append((key, signal))
                owners.setdefault(text, {}).update(pods)
            if t.workload.gateway_query:
                gateways.setdefault(t.workload.gateway_query, []).append(key)
                queued[key] = {}
        # A policy sees only the newest pods' telemetry, so only the newest is kept:
        # workload -> (time, pod -> field -> value).
        telemetry: dict[Key, tuple[float, dict[str, dict[str, float]]]] = {}

        def add_signal(text: str) -> Consume:
            query, users = wanted[text]

            def add(answer: tuple[RangeSeries, ...]) -> None:
                if query.kind == "buckets":
                    histograms = workload_buckets(answer, owners[text])
                    for key, signal in users:
                        history = workloads[key].history
                        for ts, buckets in histograms.get(key, ()):
                            history.add_buckets(signal, ts, buckets)
                    return
                if query.kind == "quantile":
                    joined = workload_quantiles(answer, owners[text], query.quantile)
                else:
                    joined = workload_sums(answer, owners[text])
                for key, signal in users:
                    history = workloads[key].history
                    for ts, value in joined.get(key, ()):
                        scaled = value * query.scale
                        if not math.isfinite(scaled):
                            continue  # past the largest float: no sample
                        if signal == "queue_depth" and key in queued:
                            acc = queued[key]
                            acc[ts] = acc.get(ts, 0.0) + scaled
                        else:
                            history.add(signal, ts, scaled)

            return add

        def add_gateway(text: str) -> Consume:
            def add(answer: tuple[RangeSeries, ...]) -> None:
                for series in answer:  # the workload's own query: every series is its
                    for key in gateways[text]:
                        acc = queued[key]
                        for ts, value in series.samples:
                            acc[ts] = acc.get(ts, 0.0) + value

            return add

        def add_telemetry(field_name: str) -> Consume:
            def add(answer: tuple[RangeSeries, ...]) -> None:
                for key, by_time in pod_values(answer, all_pods).items():
                    ts = max(by_time)
                    kept = telemetry.get(key)
                    if kept is None or kept[0] < ts:
                        kept = telemetry[key] = (ts, {})
                    if kept[0] == ts:
                        for pod, value in by_time[ts].items():
                            kept[1].setdefault(pod, {})[field_name] = value

            return add

        # (query, what takes its answer, the workloads it leaves short when it fails)
        every = [t.workload.key for t in ticks]
        jobs = [(text, add_signal(text), [k for k, _ in wanted[text][1]]) for text in wanted]
        jobs += [(text, add_telemetry(name), every) for name, text in GPU_TELEMETRY.items()]
        jobs += [(text, add_gateway(text), gateways[text]) for text in gateways]
        limit = asyncio.Semaphore(QUERY_CONCURRENCY)

        async def fetch(text: str, consume: Consume) -> PromError | None:
            async with limit:
                return await self._fetch(text, consume, end=end)

        results = await asyncio.gather(*(fetch(text, consume) for text, consume, _ in jobs))
        failed: dict[Key, PromError] = {}
        for (_, _, keys), err in zip(jobs, results, strict=True):
            if err is not None:
                for key in keys:
                    failed.setdefault(key, err)
        asked = {text for text, _, _ in jobs}  # a deleted workload's queries are asked no more
        self._fetched_until = {t: v for t, v in self._fetched_until.items() if t in asked}
        for key, acc in queued.items():
            for ts in sorted(acc):
                if math.isfinite(acc[ts]):
                    workloads[key].history.add("queue_depth", ts, acc[ts])
        for key, (ts, by_pod) in telemetry.items():
            workloads[key].history.add_pods(
                ts, tuple(PodTelemetry(pod=name, **by_pod[name]) for name in sorted(by_pod))
            )
        return failed

    async def _fetch(self, text: str, consume: Consume, *, end: float) -> PromError | None:
        """Fetch one query's samples since it was last fetched, in chunks of at most
        MAX_POINTS_PER_QUERY steps (a first tick backfills the whole history), handing each
        chunk to `consume`; returns why it failed, None when it did not."""
        step = self._step
        start = max(self._fetched_until.get(text, -math.inf) + step, end - self._history_seconds)
        while start <= end:
            chunk_end = min(end, start + (MAX_POINTS_PER_QUERY - 1) * step)
            begun = time.monotonic()
            try:
                answer = await self._prom.query_range(text, start=start, end=chunk_end, step=step)
            except PromError as err:
                self._stats.errors[f"prometheus_{err.kind}"] += 1
                return err
            finally:
                self._stats.queries += 1
                self._stats.query_seconds += time.monotonic() - begun
            try:
                consume(answer)
            except Exception as err:  # an answer nothing checked: its workloads' signal fails
                self._stats.errors["prometheus_bad_response"] += 1
                what = f"cannot take the answer: {type(err).__name__}: {err}"
                return PromError(PromErrorKind.BAD_RESPONSE, cut(what, MAX_SHOWN_CHARS))
            self._fetched_until[text] = chunk_end
            start = chunk_end + step
        return None
