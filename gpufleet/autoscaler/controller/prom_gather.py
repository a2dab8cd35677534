"""The loop's gather step for signals: Prometheus range queries into each workload's history.

One range query per distinct signal query (not per workload) for the samples since the last
tick, split among the workloads whose pods answered (`core.gather` does the pure joins); a
workload's `signals.gatewayQueueDepth` is one more query, all of its series the workload's,
summed into its queue depth (at zero replicas no pod reports one). The exporter's per-pod
GPU telemetry is read the same way, and only its newest sample kept.

A failed query is reported, not raised: the loop holds the count for that tick. A tick waits
for the answers at most `wait_seconds`: a query still answering then goes on beside the
loop, its workloads decide on the samples they have (the policies judge their age), and its
answer joins their histories at the first tick after it arrives. One workload's slow
override held up every workload's tick, as many times over as there were such overrides;
once late, a query is asked in a lane of its own until it answers in time again. A queue
depth summed from the pods' and a gateway's answers is added once both have answered for
its time, and only from when both were first fetched for that workload (a gateway's
backfill reaches back past what the pods' shared query gave it): a sample of one alone is
never the sum.
"""

import asyncio
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gpufleet.autoscaler.controller.deadline import Lanes, wait_or_detach
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


@dataclass(eq=False)
class _Fetch:
    """One query's fetch, which may outlive the tick that started it."""

    sink: Consume | None  # the tick's consumer while the tick waits; None once it stopped
    asking: bool = False  # a query is in flight
    kept: tuple[float, tuple[RangeSeries, ...]] | None = None  # answered after: (end, answer)
    task: asyncio.Task[PromError | None] | None = None
    # the pods of the tick that asked: a late answer is joined with them, not with the pods
    # of the tick that takes it, which may have lost one since
    owners: Mapping[tuple[str, str], Key] = field(default_factory=dict)


class PromGather:
    """Remembers how far each query was fetched, so a tick asks only for what is new, and
    the fetches still answering from earlier ticks."""

    def __init__(
        self,
        prom: PromClient,
        stats: Stats,
        *,
        step_seconds: float,
        history_seconds: float,
        wait_seconds: float,
    ) -> None:
        self._prom = prom
        self._stats = stats
        self._step = step_seconds
        self._history_seconds = history_seconds
        self._wait = wait_seconds
        self._fetched_until: dict[str, float] = {}  # query text -> newest step fetched
        self._late: dict[str, _Fetch] = {}  # query text -> its fetch a tick stopped waiting for
        # As many slots in the slow lane: where every query is slow, one slot would ask each
        # query once in as many ticks as there are queries.
        self._lanes: Lanes[str] = Lanes(QUERY_CONCURRENCY)
        # workload with a gateway -> sample time -> its queue depth summed so far
        self._queued: dict[Key, dict[float, float]] = {}
        # workload with a gateway -> query text -> the first sample time fetched for it: a
        # gateway's backfill reaches back past what the pods' shared query gave it
        self._joined: dict[Key, dict[str, float]] = {}

    def close(self) -> None:
        """Cancel the fetches still answering (at shutdown)."""
        for fetch in self._late.values():
            if fetch.task is not None:
                fetch.task.cancel()
        self._late.clear()

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
        # holds, summed per sample time and added once each of its queries has answered
        # for that time (`_add_queued`): the texts each such workload's sum waits for.
        gateways: dict[str, list[Key]] = {}
        summed: dict[Key, list[str]] = {}
        for t in ticks:
            key = t.workload.key
            pods = {(p.namespace, p.name): key for p in t.pods}
            all_pods.update(pods)
            for text, query, signal in t.workload.queries:
                wanted.setdefault(text, (query, []))[1].append((key, signal))
                owners.setdefault(text, {}).update(pods)
            if t.workload.gateway_query:
                gateways.setdefault(t.workload.gateway_query, []).append(key)
                summed[key] = [t.workload.gateway_query] + [
                    text for text, _, signal in t.workload.queries if signal == "queue_depth"
                ]
        # a fetch started now keeps this tick's pods only: a chain of late answers would
        # otherwise carry every pod it ever saw
        asking = {text: dict(pods) for text, pods in owners.items()}
        for text, late in self._late.items():
            if text in owners:
                owners[text] = {**late.owners, **owners[text]}
        queued = self._queued = {key: self._queued.get(key, {}) for key in summed}
        self._joined = {key: self._join(key, texts, end) for key, texts in summed.items()}
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
        failed = await self._run(jobs, asking, end=end)
        asked = {text for text, _, _ in jobs}  # a deleted workload's queries are asked no more
        self._fetched_until = {t: v for t, v in self._fetched_until.items() if t in asked}
        self._lanes.keep_only(asked)
        for text in self._late.keys() - asked:
            task = self._late.pop(text).task
            if task is not None:
                task.cancel()
        for key, texts in summed.items():
            since = max(self._joined[key].values())
            self._add_queued(
                workloads[key], queued[key], texts, since=since, oldest=end - self._history_seconds
            )
        for key, (ts, by_pod) in telemetry.items():
            workloads[key].history.add_pods(
                ts, tuple(PodTelemetry(pod=name, **by_pod[name]) for name in sorted(by_pod))
            )
        return failed

    async def _run(
        self,
        jobs: list[tuple[str, Consume, list[Key]]],
        owners: Mapping[str, Mapping[tuple[str, str], Key]],
        *,
        end: float,
    ) -> dict[Key, PromError]:
        """Fetch each job's query up to `end` into its consumer, waiting at most
        `wait_seconds`. A fetch still asking then finishes the query it has in flight, keeps
        the answer for the next tick and asks nothing more; one not yet begun is dropped,
        asked again next tick. Returns why each workload a query failed was left short."""
        lane = self._lanes.open()
        errors: list[tuple[list[Key], PromError]] = []
        started: dict[asyncio.Task[PromError | None], tuple[str, _Fetch, list[Key]]] = {}
        for text, consume, keys in jobs:
            if (late := self._late.get(text)) is not None:
                if late.task is None or not late.task.done():
                    continue  # still asking: its workloads decide on what they have
                del self._late[text]
                result = late.task.result()
                err = self._take_kept(text, late, consume) or result
                if err is not None:
                    errors.append((keys, err))
            fetch = _Fetch(sink=consume, owners=owners.get(text, {}))
            fetch.task = asyncio.create_task(self._fetch_in(lane(text), text, fetch, end=end))
            started[fetch.task] = (text, fetch, keys)
        if started:
            done, detached = await wait_or_detach(
                started.keys(), self._wait, begun=lambda task: started[task][1].asking
            )
            for task in done:
                if (err := task.result()) is not None:
                    errors.append((started[task][2], err))
            for task in detached:
                text, fetch, _ = started[task]
                fetch.sink = None  # its answer waits for a later tick
                self._late[text] = fetch
            self._stats.late_queries += len(detached)
            self._lanes.settle(
                in_time=[started[task][0] for task in done],
                late=[started[task][0] for task in detached],
            )
        failed: dict[Key, PromError] = {}
        for keys, err in errors:
            for key in keys:
                failed.setdefault(key, err)
        return failed

    async def _fetch_in(
        self, lane: asyncio.Semaphore, text: str, fetch: _Fetch, *, end: float
    ) -> PromError | None:
        async with lane:
            return await self._fetch(text, fetch, end=end)

    async def _fetch(self, text: str, fetch: _Fetch, *, end: float) -> PromError | None:
        """Fetch one query's samples since it was last fetched, in chunks of at most
        MAX_POINTS_PER_QUERY steps (a first tick backfills the whole history), each chunk
        into the tick's consumer while it waits; returns why it failed, None when it did
        not. Once the tick stops waiting, the answer in flight is kept and no more asked:
        a late backfill holds one chunk, not half an hour of every pod."""
        step = self._step
        start = self._start(text, end)
        while start <= end and fetch.sink is not None:
            chunk_end = min(end, start + (MAX_POINTS_PER_QUERY - 1) * step)
            begun = time.monotonic()
            fetch.asking = True
            try:
                answer = await self._prom.query_range(text, start=start, end=chunk_end, step=step)
            except PromError as err:
                self._stats.errors[f"prometheus_{err.kind}"] += 1
                return err
            finally:
                fetch.asking = False
                self._stats.queries += 1
                self._stats.query_seconds += time.monotonic() - begun
            if fetch.sink is None:
                fetch.kept = (chunk_end, answer)
            elif (err := self._take(text, chunk_end, answer, fetch.sink)) is not None:
                return err
            start = chunk_end + step
        return None

    def _take_kept(self, text: str, fetch: _Fetch, consume: Consume) -> PromError | None:
        """Hand what a late fetch answered after its tick stopped waiting to `consume`."""
        if fetch.kept is None:
            return None
        chunk_end, answer = fetch.kept
        return self._take(text, chunk_end, answer, consume)

    def _take(
        self, text: str, chunk_end: float, answer: tuple[RangeSeries, ...], consume: Consume
    ) -> PromError | None:
        """`answer`, fetched up to `chunk_end`, into `consume`: why it could not be taken,
        or None (and the query counts as fetched that far)."""
        try:
            consume(answer)
        except Exception as err:  # an answer nothing checked: its workloads' signal fails
            self._stats.errors["prometheus_bad_response"] += 1
            what = f"cannot take the answer: {type(err).__name__}: {err}"
            return PromError(PromErrorKind.BAD_RESPONSE, cut(what, MAX_SHOWN_CHARS))
        self._fetched_until[text] = chunk_end
        return None

    def _join(self, key: Key, texts: list[str], end: float) -> dict[str, float]:
        """For each of a gateway workload's `texts`, the first sample time fetched for it:
        kept from before, else where this tick's fetch up to `end` starts."""
        joined = self._joined.get(key, {})
        return {text: joined[text] if text in joined else self._start(text, end) for text in texts}

    def _start(self, text: str, end: float) -> float:
        """Where a fetch of `text` up to `end` starts: after what was fetched of it, and no
        further back than the history."""
        return max(
            self._fetched_until.get(text, -math.inf) + self._step, end - self._history_seconds
        )

    def _add_queued(
        self,
        workload: Workload,
        acc: dict[float, float],
        texts: list[str],
        *,
        since: float,
        oldest: float,
    ) -> None:
        """Add a gateway workload's summed queue depth for the times each of `texts` has
        answered for since each was first fetched for it (`since`: before that, one of them
        gave it nothing); keep the rest (no older than `oldest`) until they have."""
        answered = min(self._fetched_until.get(text, -math.inf) for text in texts)
        for ts in sorted(acc):
            if ts < since:
                del acc[ts]
            elif ts <= answered:
                value = acc.pop(ts)
                if math.isfinite(value):
                    workload.history.add("queue_depth", ts, value)
            elif ts < oldest:
                del acc[ts]
