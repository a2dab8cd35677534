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
its time: a sample of one alone is never the sum.

A query's fetch reaches back only as far as it was last fetched, for every workload that
sends it. Which times each workload was handed (`StepSpans`) tells what one lacks: a
workload that joins a query others had fetched (a GPUAutoscaler made after another that
sends the same query, as every vLLM workload without a model does), or one back from
ticks it sat out. Those times are fetched again in a backfill of their own, one query at a
time in a lane apart from the fresh fetches and only while they are asked, so that it
never holds up what is new or the tick, and handed only to the workloads that lack them:
no time is handed to a workload twice.

Ticks that ran on a clock ahead of Prometheus' (before its clock was read, or where its
own stepped back) asked for steps still to come, and Prometheus answered them with copies
of the newest sample. A tick that read Prometheus' clock places the earlier ones on it by
their monotonic times (`core.ran_ahead`): the steps each asked ahead are dropped from the
histories and from what each workload was handed, and the backfill asks them again.
"""

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

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
from gpufleet.autoscaler.core.history import SignalHistory
from gpufleet.autoscaler.core.observation import PodTelemetry
from gpufleet.autoscaler.core.ran_ahead import copied_steps
from gpufleet.autoscaler.core.signals import GPU_TELEMETRY, SignalQuery
from gpufleet.autoscaler.core.step_spans import StepSpans
from gpufleet.autoscaler.prom.client import PromClient, PromError, PromErrorKind
from gpufleet.core.messages import MAX_SHOWN_CHARS, cut

# Queries in flight at once: a first tick backfills half an hour of every signal, and
# parsing all of them at the same time for a thousand workloads doubles the peak memory.
QUERY_CONCURRENCY = 2
# A lane of its own for backfills: they never take a slot from what is new, and one always
# begins, in a tick that waits on a slow Prometheus too.
BACKFILL_CONCURRENCY = 1
FORGET_EVERY_STEPS = 64  # how often, in steps, the times handed before the history go
MAX_POINTS_PER_QUERY = 60  # per series: a long range arrives in answers of bounded size

V = TypeVar("V")

log = logging.getLogger(__name__)

Answer = tuple[RangeSeries, ...]
Consume = Callable[[float, float, Answer], None]  # (first step, last step, answer)
PodOwners = Mapping[tuple[str, str], Key]  # (namespace, pod) -> its workload
JobKey = tuple[str, bool]  # (query text, a backfill): a fetch of its own, late or not
Span = Callable[[], tuple[float, float] | None]  # the steps a fetch asks for, when it begins


@dataclass(eq=False)
class _Fetch:
    """One query's fetch, which may outlive the tick that started it."""

    sink: Consume | None  # the tick's consumer while the tick waits; None once it stopped
    asking: bool = False  # a query is in flight
    kept: tuple[float, float, Answer] | None = None  # answered after: (first, last, answer)
    task: asyncio.Task[PromError | None] | None = None
    # the pods of the tick that asked: a late answer is joined with them as well as with the
    # pods of the tick that takes it, which may have lost one since
    owners: Mapping[tuple[str, str], Key] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Job:
    key: JobKey
    span: Span
    consume: Consume
    short: list[Key]  # the workloads its failure leaves short


@dataclass(eq=False)
class _Handed:
    """What one workload was handed, for as long as its history lives."""

    history: SignalHistory  # a GPUAutoscaler made again has a new one, and was handed nothing
    spans: dict[str, StepSpans] = field(default_factory=dict)  # query text -> times handed
    # with a gateway: sample time -> its queue depth summed so far, from the `summed` texts
    queued: dict[float, float] = field(default_factory=dict)
    summed: tuple[str, ...] = ()  # its gateway's query, then its pods' queue queries
    # the spec's queries these are for: the texts change only with them
    queries: tuple[tuple[str, SignalQuery, str], ...] | None = None
    gateway: str = ""


def _unhanded(
    spans: StepSpans, first: float, last: float, samples: Iterable[tuple[float, V]]
) -> Iterable[tuple[float, V]]:
    """`samples`, fetched for steps `first` to `last`, at the times `spans` does not hold:
    mostly all of them (what is new), which spares a look at each."""
    if not spans.holds_any(first, last):
        return samples
    return ((ts, value) for ts, value in samples if not spans.holds(ts))


class PromGather:
    """Remembers how far each query was fetched, so a tick asks only for what is new, what
    each workload was handed, and the fetches still answering from earlier ticks."""

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
        self._late: dict[JobKey, _Fetch] = {}  # a fetch a tick stopped waiting for
        # As many slots in the slow lane: where every query is slow, one slot would ask each
        # query once in as many ticks as there are queries.
        self._lanes: Lanes[JobKey] = Lanes(QUERY_CONCURRENCY)
        self._handed: dict[Key, _Handed] = {}
        self._forgot_at = -math.inf  # the oldest step when handed times were last dropped
        # (monotonic time, newest step asked) of each tick the history reaches back to
        self._ticks: deque[tuple[float, float]] = deque()

    def close(self) -> None:
        """Cancel the fetches still answering (at shutdown)."""
        for fetch in self._late.values():
            if fetch.task is not None:
                fetch.task.cancel()
        self._late.clear()

    async def gather(
        self,
        ticks: list[Tick],
        workloads: Mapping[Key, Workload],
        now: float,
        *,
        monotonic: float,
        read_now: bool = True,
    ) -> dict[Key, PromError]:
        """Add the samples since the last tick to each workload's history (signals, and the
        exporter's per-pod GPU telemetry), and those it lacks from before; returns, for
        each workload a failed query left short, why (one workload's bad override holds no
        other). `now` is the loop's time as read at `monotonic` (`time.monotonic()`);
        `read_now`: Prometheus' clock was read for it this tick, so it can judge which
        earlier ticks ran ahead (a lead kept from earlier, or this machine's clock, may be
        what is wrong)."""
        step = self._step
        end = math.floor(now / step) * step
        oldest = self._oldest(end)
        self._take_back_what_ran_ahead(now, monotonic, end, oldest, judge=read_now)
        owners: dict[str, dict[tuple[str, str], Key]] = {}
        wanted: dict[str, tuple[SignalQuery, list[tuple[Key, str]]]] = {}
        all_pods = {}
        gateways: dict[str, list[Key]] = {}
        for t in ticks:
            key = t.workload.key
            pods = {(p.namespace, p.name): key for p in t.pods}
            all_pods.update(pods)
            for text, query, signal in t.workload.queries:
                wanted.setdefault(text, (query, []))[1].append((key, signal))
                owners.setdefault(text, {}).update(pods)
            if t.workload.gateway_query:
                gateways.setdefault(t.workload.gateway_query, []).append(key)
        handed = self._hand_over(ticks, workloads, oldest)
        # A workload with a gateway: its queue depth is its pods' plus what the gateway
        # holds, summed per sample time and added once each of its queries has handed it
        # that time (`_add_queued`): the texts each such workload's sum waits for.
        summed: dict[Key, tuple[str, ...]] = {}
        for t in ticks:
            if texts := handed[t.workload.key].summed:
                summed[t.workload.key] = texts
        # a fetch started now keeps this tick's pods only: a chain of late answers would
        # otherwise carry every pod it ever saw
        asking = {text: dict(pods) for text, pods in owners.items()}
        for (text, _), late in self._late.items():
            if text in owners:
                owners[text] = {**late.owners, **owners[text]}
        # A policy sees only the newest pods' telemetry, so only the newest is kept:
        # workload -> (time, pod -> field -> value).
        telemetry: dict[Key, tuple[float, dict[str, dict[str, float]]]] = {}

        def add_signal(text: str, users: list[tuple[Key, str]], pods: PodOwners) -> Consume:
            query = wanted[text][0]

            def add(first: float, last: float, answer: Answer) -> None:
                if query.kind == "buckets":
                    histograms = workload_buckets(answer, pods)
                    for key, signal in users:
                        spans, history = handed[key].spans[text], workloads[key].history
                        for ts, buckets in _unhanded(spans, first, last, histograms.get(key, ())):
                            history.add_buckets(signal, ts, buckets)
                else:
                    joined = (
                        workload_quantiles(answer, pods, query.quantile)
                        if query.kind == "quantile"
                        else workload_sums(answer, pods)
                    )
                    for key, signal in users:
                        if not (samples := joined.get(key)):
                            continue
                        spans, history = handed[key].spans[text], workloads[key].history
                        for ts, value in _unhanded(spans, first, last, samples):
                            scaled = value * query.scale
                            if not math.isfinite(scaled):
                                continue  # past the largest float: no sample
                            if signal != "queue_depth" or key not in summed:
                                history.add(signal, ts, scaled)
                            elif ts >= oldest:  # older: its sum was dropped, incomplete
                                acc = handed[key].queued
                                acc[ts] = acc.get(ts, 0.0) + scaled
                for key, _ in users:
                    handed[key].spans[text].add(first, last)

            return add

        def add_gateway(text: str, keys: list[Key]) -> Consume:
            def add(first: float, last: float, answer: Answer) -> None:
                for key in keys:
                    acc, spans = handed[key].queued, handed[key].spans[text]
                    for series in answer:  # the workload's own query: every series is its
                        for ts, value in _unhanded(spans, first, last, series.samples):
                            if ts >= oldest:
                                acc[ts] = acc.get(ts, 0.0) + value
                    spans.add(first, last)

            return add

        def add_telemetry(field_name: str) -> Consume:
            def add(first: float, last: float, answer: Answer) -> None:
                for key, by_time in pod_values(answer, all_pods).items():
                    ts = max(by_time)
                    kept = telemetry.get(key)
                    if kept is None or kept[0] < ts:
                        kept = telemetry[key] = (ts, {})
                    if kept[0] == ts:
                        for pod, value in by_time[ts].items():
                            kept[1].setdefault(pod, {})[field_name] = value

            return add

        def fresh(text: str) -> Span:
            return lambda: (self._start(text, end), end)

        def lacked(text: str, keys: list[Key]) -> Span:
            def span() -> tuple[float, float] | None:
                # reckoned when the fetch begins: a late answer taken this tick, or this
                # tick's own fetch of what is new, may have handed part of it since
                gaps = [
                    gap
                    for key in keys
                    for gap in handed[key].spans[text].gaps(oldest, self._fetched_until[text])
                ]
                return (min(a for a, _ in gaps), max(b for _, b in gaps)) if gaps else None

            return span

        def lacking(text: str, keys: list[Key]) -> list[Key]:
            """Those of `keys` not handed every time of `text` that was fetched."""
            if text not in self._fetched_until:
                return []  # this tick's fetch reaches back as far as the history, for all
            mark = self._fetched_until[text]
            return [key for key in keys if not handed[key].spans[text].covers(oldest, mark)]

        every = [t.workload.key for t in ticks]
        jobs = [
            _Job(
                (text, False),
                fresh(text),
                add_signal(text, users, owners[text]),
                [k for k, _ in users],
            )
            for text, (_, users) in wanted.items()
        ]
        jobs += [
            _Job((text, False), fresh(text), add_telemetry(name), every)
            for name, text in GPU_TELEMETRY.items()
        ]
        jobs += [
            _Job((text, False), fresh(text), add_gateway(text, keys), keys)
            for text, keys in gateways.items()
        ]
        # Backfills, in a lane of their own; one that fails leaves no workload short of
        # what is new.
        for text, (_, users) in wanted.items():
            if short := lacking(text, [k for k, _ in users]):
                lack = set(short)
                behind = [(k, signal) for k, signal in users if k in lack]
                # joined with their pods alone: a thousand others' are not theirs
                pods = {pod: k for pod, k in owners[text].items() if k in lack}
                add = add_signal(text, behind, pods)
                jobs.append(_Job((text, True), lacked(text, short), add, []))
        for text, keys in gateways.items():
            if short := lacking(text, keys):
                jobs.append(_Job((text, True), lacked(text, short), add_gateway(text, short), []))
        failed = await self._run(jobs, asking)
        asked = {job.key for job in jobs}  # a deleted workload's queries are asked no more
        self._fetched_until = {t: v for t, v in self._fetched_until.items() if (t, False) in asked}
        self._lanes.keep_only(asked)
        for gone in self._late.keys() - asked:
            task = self._late.pop(gone).task
            if task is not None:
                task.cancel()
        for key, texts in summed.items():
            self._add_queued(workloads[key], handed[key], texts, oldest=oldest)
        for key, (ts, by_pod) in telemetry.items():
            workloads[key].history.add_pods(
                ts, tuple(PodTelemetry(pod=name, **by_pod[name]) for name in sorted(by_pod))
            )
        return failed

    def _take_back_what_ran_ahead(
        self, now: float, monotonic: float, end: float, oldest: float, *, judge: bool
    ) -> None:
        """Where earlier ticks asked for steps that were still to come on Prometheus' clock
        (`core.ran_ahead`), drop the steps each fetched ahead from the histories, from what
        each workload was handed and from the gateways' waiting sums: the copies go, and the
        backfill asks the real samples of those times. Then note this tick."""
        ticks, step = self._ticks, self._step
        copied = copied_steps(ticks, monotonic, now, step=step) if judge else []
        if copied:
            log.warning(
                "%d earlier ticks asked Prometheus for steps still to come, up to %.0f s "
                "ahead (this machine's clock ahead before Prometheus' was read, or "
                "Prometheus' stepped back): what they fetched ahead is fetched again",
                len(copied),
                max(asked - came for _, came, asked in copied),
            )
            self.close()  # the fetches still answering were asked on that clock
            self._fetched_until = {t: min(m, end) for t, m in self._fetched_until.items()}
            for i, came, _ in copied:
                ticks[i] = (ticks[i][0], came)  # judged: its copies go now
            # as disjoint runs: the copies of ticks that ran a minute ahead for minutes overlap
            copies = StepSpans(step)
            for _, came, asked in copied:
                copies.add(came + step, asked)
            half = step / 2
            for first, last in copies.runs():
                for h in self._handed.values():
                    h.history.forget_between(first - half, last + half)
                    for spans in h.spans.values():
                        spans.forget_between(first, last)
                    h.queued = {
                        ts: v for ts, v in h.queued.items() if not first - half <= ts <= last + half
                    }
        ticks.append((monotonic, end))
        while ticks[0][1] < oldest:  # all it asked for is older than the history
            ticks.popleft()

    def _hand_over(
        self, ticks: list[Tick], workloads: Mapping[Key, Workload], oldest: float
    ) -> dict[Key, _Handed]:
        """What each workload was handed: kept while its history lives (a workload that sat
        a tick out comes back to it), for the queries it sends now, as far back as the
        history reaches."""
        self._handed = {
            key: h
            for key, h in self._handed.items()
            if key in workloads and h.history is workloads[key].history
        }
        # Now and then, for every workload (one sitting ticks out too): a run costs two
        # floats, and a tick adds at most one per query.
        if oldest - self._forgot_at >= FORGET_EVERY_STEPS * self._step:
            self._forgot_at = oldest
            for h in self._handed.values():
                for spans in h.spans.values():
                    spans.forget_before(oldest)
        for t in ticks:
            key, w = t.workload.key, t.workload
            h = self._handed.setdefault(key, _Handed(w.history))
            if h.queries is not w.queries or h.gateway != w.gateway_query:  # a new spec
                h.queries, h.gateway = w.queries, w.gateway_query
                queue = (text for text, _, signal in w.queries if signal == "queue_depth")
                summed = (w.gateway_query, *queue) if w.gateway_query else ()
                if h.summed != summed:
                    # The sums waiting are dropped: their queries, the old and the new,
                    # are handed again from the start, each part once (the history keeps
                    # the samples it holds).
                    h.queued.clear()
                    for text in {*h.summed, *summed}:
                        h.spans.pop(text, None)
                    h.summed = summed
                texts = {text for text, _, _ in w.queries} | ({w.gateway_query} - {""})
                h.spans = {text: h.spans.get(text) or StepSpans(self._step) for text in texts}
        return self._handed

    async def _run(
        self, jobs: list[_Job], owners: Mapping[str, Mapping[tuple[str, str], Key]]
    ) -> dict[Key, PromError]:
        """Fetch each job's steps into its consumer, waiting at most `wait_seconds` for the
        fetches of what is new, and the backfills no longer than those. A fetch still
        asking then finishes the query it has in flight, keeps the answer for the next
        tick and asks nothing more; one not yet begun is dropped, asked again next tick.
        Returns why each workload a query failed was left short."""
        lane, backfill_lane = self._lanes.open(), asyncio.Semaphore(BACKFILL_CONCURRENCY)
        errors: list[tuple[list[Key], PromError]] = []
        started: dict[asyncio.Task[PromError | None], tuple[_Job, _Fetch]] = {}
        for job in jobs:
            if (late := self._late.get(job.key)) is not None:
                if late.task is None or not late.task.done():
                    continue  # still asking: its workloads decide on what they have
                del self._late[job.key]
                result = late.task.result()
                err = self._take_kept(job.key, late, job.consume) or result
                if err is not None:
                    errors.append((job.short, err))
            fetch = _Fetch(sink=job.consume, owners=owners.get(job.key[0], {}))
            sem = backfill_lane if job.key[1] else lane(job.key)
            fetch.task = asyncio.create_task(self._fetch_in(sem, job, fetch))
            started[fetch.task] = (job, fetch)

        def begun(task: asyncio.Task[PromError | None]) -> bool:
            return started[task][1].asking

        def fresh_keys(tasks: set[asyncio.Task[PromError | None]]) -> list[JobKey]:
            return [key for key in (started[task][0].key for task in tasks) if not key[1]]

        if started:
            fresh = {task for task, (job, _) in started.items() if not job.key[1]}
            backfills = started.keys() - fresh
            try:
                if fresh:
                    done, detached = await wait_or_detach(fresh, self._wait, begun=begun)
                else:
                    done, detached = set(), set()
                    await asyncio.sleep(0)  # a backfill begins all the same
            except asyncio.CancelledError:
                for task in backfills:
                    task.cancel()
                raise
            # A tick is not held up for a backfill: it asks on while the fresh fetches do.
            for task in backfills:
                if task.done():
                    done.add(task)
                elif begun(task):
                    detached.add(task)
                else:
                    task.cancel()
            for task in done:
                if (err := task.result()) is not None:
                    errors.append((started[task][0].short, err))
            for task in detached:
                job, fetch = started[task]
                fetch.sink = None  # its answer waits for a later tick
                self._late[job.key] = fetch
            self._stats.late_queries += len(detached)
            self._lanes.settle(in_time=fresh_keys(done), late=fresh_keys(detached))
        failed: dict[Key, PromError] = {}
        for keys, err in errors:
            for key in keys:
                failed.setdefault(key, err)
        return failed

    async def _fetch_in(
        self, lane: asyncio.Semaphore, job: _Job, fetch: _Fetch
    ) -> PromError | None:
        async with lane:
            return await self._fetch(job, fetch)

    async def _fetch(self, job: _Job, fetch: _Fetch) -> PromError | None:
        """Fetch the job's steps, in chunks of at most MAX_POINTS_PER_QUERY (a query's first
        fetch reaches back over the whole history), each chunk into the tick's consumer
        while it waits; returns why it failed, None when it did not. Once the tick stops
        waiting, the answer in flight is kept and no more asked: a late fetch holds one
        chunk, not half an hour of every pod."""
        span = job.span()
        if span is None:
            return None
        step, (start, end) = self._step, span
        while start <= end and fetch.sink is not None:
            chunk_end = min(end, start + (MAX_POINTS_PER_QUERY - 1) * step)
            begun = time.monotonic()
            fetch.asking = True
            try:
                answer = await self._prom.query_range(
                    job.key[0], start=start, end=chunk_end, step=step
                )
            except PromError as err:
                self._stats.errors[f"prometheus_{err.kind}"] += 1
                return err
            finally:
                fetch.asking = False
                self._stats.queries += 1
                if job.key[1]:
                    self._stats.backfill_queries += 1
                self._stats.query_seconds += time.monotonic() - begun
            if fetch.sink is None:
                fetch.kept = (start, chunk_end, answer)
            elif (failed := self._take(job.key, start, chunk_end, answer, fetch.sink)) is not None:
                return failed
            start = chunk_end + step
        return None

    def _take_kept(self, key: JobKey, fetch: _Fetch, consume: Consume) -> PromError | None:
        """Hand what a late fetch answered after its tick stopped waiting to `consume`."""
        if fetch.kept is None:
            return None
        return self._take(key, *fetch.kept, consume)

    def _take(
        self, key: JobKey, first: float, last: float, answer: Answer, consume: Consume
    ) -> PromError | None:
        """`answer`, fetched for steps `first` to `last`, into `consume`: why it could not
        be taken, or None (and a fetch of what is new counts as fetched that far)."""
        try:
            consume(first, last, answer)
        except Exception as err:  # an answer nothing checked: its workloads' signal fails
            self._stats.errors["prometheus_bad_response"] += 1
            what = f"cannot take the answer: {type(err).__name__}: {err}"
            return PromError(PromErrorKind.BAD_RESPONSE, cut(what, MAX_SHOWN_CHARS))
        text, backfill = key
        if not backfill:
            self._fetched_until[text] = last
        return None

    def _start(self, text: str, end: float) -> float:
        """Where a fetch of what is new of `text` up to `end` starts: after what was
        fetched of it, and no further back than the history."""
        return max(self._fetched_until.get(text, -math.inf) + self._step, self._oldest(end))

    def _oldest(self, end: float) -> float:
        """The oldest step of the history up to `end`: on the steps' grid, where a step
        does not divide the history too (a fetch from off it answers other times than
        the fetches after it, and no sum of two queries would meet)."""
        return end - math.floor(self._history_seconds / self._step) * self._step

    @staticmethod
    def _add_queued(
        workload: Workload, handed: _Handed, texts: tuple[str, ...], *, oldest: float
    ) -> None:
        """Add a gateway workload's summed queue depth for the times each of `texts` has
        handed it; keep the rest until they have. A time older than `oldest` is dropped,
        complete or not: a part that comes for it then is not added (a late answer's, or
        a backfill's), so it may lack one."""
        acc = handed.queued
        for ts in sorted(acc):
            if ts < oldest:
                del acc[ts]
            elif all(handed.spans[text].holds(ts) for text in texts):
                value = acc.pop(ts)
                if math.isfinite(value):
                    workload.history.add("queue_depth", ts, value)
