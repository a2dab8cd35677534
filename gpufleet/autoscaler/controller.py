"""The live control loop: gather from Prometheus and the API, decide with the policy, act.

Every tick it reads the cluster in eight list calls (GPUAutoscalers, pods, Deployments,
StatefulSets, HPAs, ScaledObjects, CapacityBuffers, NodePools; with NodePools also their
nodes and Kueue's Workloads and ResourceFlavors; a Deployment's scale is its replicas and
selector),
reads the scale subresource of any other kind of target, asks Prometheus one range query
per distinct signal query (not per workload) for the samples since the last tick, and adds
them to each workload's `SignalHistory`, the one the replay fills; a workload's
`signals.gatewayQueueDepth` is one more query, all of its series the workload's, summed
into its queue depth (at zero replicas no pod reports one). A workload's policy
(one instance per GPUAutoscaler, kept across ticks) decides at its own interval on that
history; the controller writes the scale subresource only when the count changes, status
only when it says something new, and an Event. Only the leader writes; a follower gathers
and decides, so it takes over warm.

Hold, never guess: a failed query holds the count for that tick (never lower), with a
MissingMetrics condition; a bad spec is a condition and an event naming the field; an API
error on one workload never stops another.
"""

import asyncio
import dataclasses
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from gpufleet.autoscaler.core.buffers import capacity_buffer, pod_template
from gpufleet.autoscaler.core.extmetrics import (
    MetricsSnapshot,
    SnapshotFeed,
    WorkloadMetrics,
    workload_metrics,
)
from gpufleet.autoscaler.core.factory import Tuning, make_policy
from gpufleet.autoscaler.core.gather import (
    RangeSeries,
    pod_values,
    workload_buckets,
    workload_quantiles,
    workload_sums,
)
from gpufleet.autoscaler.core.history import SignalHistory
from gpufleet.autoscaler.core.kueue import pending_demands
from gpufleet.autoscaler.core.nodepools import (
    PoolDemand,
    free_gpus,
    on_nodepool,
    pool_headroom,
    pool_use,
)
from gpufleet.autoscaler.core.observation import (
    PodTelemetry,
    Replica,
    ReplicaState,
)
from gpufleet.autoscaler.core.placeholders import (
    OWNER_LABEL,
    placeholder_deployment,
    placeholder_name,
    priority_class,
)
from gpufleet.autoscaler.core.policy import Decision, Learns, Policy, Reason
from gpufleet.autoscaler.core.replicas import PodState, deletion_costs, replica_of
from gpufleet.autoscaler.core.schedules import floor_at
from gpufleet.autoscaler.core.signals import (
    GPU_TELEMETRY,
    SignalQuery,
    model_selector,
    queries_for,
)
from gpufleet.autoscaler.core.spec import AutoscalerSpec, SpecError, parse_spec
from gpufleet.autoscaler.core.status import Condition, Health, condition_list, conditions
from gpufleet.autoscaler.kube.cluster import APPS_KINDS, Cluster, ClusterView, ScaleView
from gpufleet.autoscaler.prom.client import PromClient, PromError
from gpufleet.core.selectors import Requirement, SelectorError, parse_selector
from gpufleet.kube.errors import KubeError, KubeErrorKind
from gpufleet.kube.events import EventRecorder, micro_time

log = logging.getLogger(__name__)
Key = tuple[str, str]  # (namespace, name) of a GPUAutoscaler
# Status carries the deciding signal values, the decision's message and what the policy
# learned, which move every scrape; they alone are refreshed this often, not every tick for
# every workload.
SIGNALS_REFRESH_SECONDS = 30.0
# Queries in flight at once: a first tick backfills half an hour of every signal, and
# parsing all of them at the same time for a thousand workloads doubles the peak memory.
QUERY_CONCURRENCY = 2
MAX_POINTS_PER_QUERY = 60  # per series: a backfill arrives in answers of bounded size


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerConfig:
    scrape_interval_seconds: float = 5.0  # the range queries' step
    rate_window: str = "30s"  # `{{window}}` in the signal queries
    history_seconds: float = 1800.0  # what a policy may look back on (gpufleet's peak memory)
    gpufleet_headroom: float | None = None


@dataclass(slots=True)
class Workload:
    """One GPUAutoscaler's state across ticks."""

    spec: AutoscalerSpec
    generation: int
    policy: Policy
    history: SignalHistory
    # Derived from the spec once, not every tick: (rendered PromQL, its query, the signal)
    # and whether the policy learns (a runtime Protocol check costs as much as a decision's
    # tenth).
    queries: tuple[tuple[str, SignalQuery, str], ...] = ()
    gateway_query: str = ""  # signals.gatewayQueueDepth, rendered; "" when unset
    learns: bool = False
    # The target's selector as last parsed: re-parsed only when its text changes.
    selector_text: str | None = None
    selector: tuple[Requirement, ...] | SelectorError = ()
    next_decision_at: float = -math.inf
    last_scale_time: str = ""
    decision: Decision | None = None
    wanted: int | None = None
    signals_written_at: float = -math.inf


@dataclass(slots=True)
class Stats:
    """What the self-metrics report; the controller writes, the metrics endpoint reads."""

    ticks: int = 0
    decisions: Counter[tuple[str, str]] = field(default_factory=Counter)  # (workload, reason)
    errors: Counter[str] = field(default_factory=Counter)  # kind
    desired: dict[str, int] = field(default_factory=dict)
    current: dict[str, int] = field(default_factory=dict)
    ready: dict[str, int] = field(default_factory=dict)  # serving: Ready and not terminating
    max_replicas: dict[str, int] = field(default_factory=dict)
    placeholders: dict[str, int] = field(default_factory=dict)  # placeholder pods kept
    buffers: dict[str, int] = field(default_factory=dict)  # CapacityBuffer chunks kept
    missing_metrics: dict[str, bool] = field(default_factory=dict)  # held on missing data
    queries: int = 0
    query_seconds: float = 0.0
    reconcile_seconds: float = 0.0
    leader: bool = False


@dataclass(slots=True)
class _Tick:
    """One workload's view in one tick."""

    workload: Workload
    scale: ScaleView | None = None
    pods: list[PodState] = field(default_factory=list)
    replicas: tuple[Replica, ...] = ()  # the pods as the policy sees them
    health: Health = field(default_factory=Health)
    previous_status: dict[str, Any] = field(default_factory=dict)
    template: dict[str, Any] | None = None  # the target's pod template spec, where known
    placeholders: int | None = None  # the placeholder Deployment's replicas; None: none yet
    buffers: bool = False  # the CapacityBuffer CRD is installed: headroom goes there
    buffer: int | None = None  # its CapacityBuffer's replicas; None: none yet
    desired: int | None = None  # the replicas decided this tick
    headroom: int = 0  # the replicas' worth of capacity to keep ahead, NodePool limits applied
    scheduled: str = ""  # which scheduled windows raised the count this tick


class Controller:
    def __init__(
        self,
        cluster: Cluster,
        prom: PromClient,
        events: EventRecorder,
        *,
        config: ControllerConfig | None = None,
        clock: Callable[[], float] = time.time,
        is_leader: Callable[[], bool] = lambda: True,
        feed: SnapshotFeed | None = None,
    ) -> None:
        self._cluster = cluster
        self._feed = feed
        self._prom = prom
        self._events = events
        self._config = config or ControllerConfig()
        self._clock = clock
        self._is_leader = is_leader
        self._workloads: dict[Key, Workload] = {}
        self._bad_specs: dict[Key, tuple[int, str]] = {}  # reported once per generation
        self._fetched_until: dict[str, float] = {}  # query text -> newest step fetched
        self._priority_class_ready = False  # the placeholders' PriorityClass exists
        self.stats = Stats()

    async def tick(self) -> None:
        """One pass over every GPUAutoscaler. Raises only if the API cannot list them."""
        started = time.monotonic()
        now = self._clock()
        view = await asyncio.to_thread(self._cluster.view)
        pods = view.pods
        ticks = await self._sync(view.autoscalers, now)
        index = _PodIndex(view.pods)
        for t in ticks:
            await self._read_target(t, view, index)
        missing = await self._gather(ticks, now)
        leader = self._is_leader()
        self.stats.leader = leader
        node_pods = Counter(p.node for p in pods if p.node and p.deleting_since is None)
        free = free_gpus(view.nodepools, view.pool_nodes, pods) if view.nodepools else {}
        for t in ticks:
            if missing:
                t.health = _replace(t.health, missing_metrics=missing)
            await self._decide_and_scale(t, now, leader, node_pods, free)
        if view.nodepools is not None:
            queued = pending_demands(view.kueue_workloads, view.kueue_flavors)
            self._fit_headroom_to_nodepools(ticks, view, queued)
        published = [await self._finish(t, now, leader) for t in ticks]
        if self._feed is not None:
            self._feed.publish(MetricsSnapshot(m for m in published if m is not None))
        self.stats.ticks += 1
        self.stats.reconcile_seconds += time.monotonic() - started

    # --- gather ---

    async def _sync(self, objects: list[dict[str, Any]], now: float) -> list[_Tick]:
        """Workload state for each valid object; invalid ones get a condition and an event."""
        seen: set[Key] = set()
        ticks = []
        for obj in objects:
            meta = obj.get("metadata") or {}
            key = (meta.get("namespace", ""), meta.get("name", ""))
            seen.add(key)
            generation = int(meta.get("generation") or 0)
            previous = obj.get("status") or {}
            w = self._workloads.get(key)
            if w is not None and w.generation == generation:  # parsed when it last changed
                ticks.append(_Tick(workload=w, previous_status=previous))
                continue
            if self._bad_specs.get(key, (None, ""))[0] == generation:
                continue  # still the bad spec already reported
            try:
                spec = parse_spec(obj)
            except SpecError as err:
                self._workloads.pop(key, None)
                await self._report_bad_spec(key, generation, err, previous, now)
                continue
            w = self._new_workload(spec, generation, w, previous)
            self._workloads[key] = w
            ticks.append(_Tick(workload=w, previous_status=previous))
        for key in set(self._workloads) - seen:
            del self._workloads[key]
        for key in set(self._bad_specs) - seen:
            del self._bad_specs[key]
        return ticks

    def _new_workload(
        self,
        spec: AutoscalerSpec,
        generation: int,
        old: Workload | None,
        previous_status: dict[str, Any],
    ) -> Workload:
        """A workload's runtime state; its policy resumes from what the status says it
        learned (a restart or a failover), or from the old policy's (a spec change)."""
        tuning = Tuning(
            hpa_target_util=spec.hpa_target_gpu_utilization,
            keda_queue_target=spec.keda_queue_target,
            keda_polling_interval_seconds=spec.keda_polling_interval_seconds,
            gpufleet_headroom=self._config.gpufleet_headroom,
            gpufleet_placeholders=spec.placeholders,
            idle_seconds_to_zero=spec.idle_seconds_to_zero,
            gpufleet_fill_nodes=False,  # a real pool may be shared (GpufleetSettings)
        )
        history = (
            old.history
            if old is not None
            else SignalHistory(history_seconds=self._config.history_seconds)
        )
        policy = make_policy(
            spec.policy, spec.workload, tuning, hpa_workload_behavior=spec.custom_behavior
        )
        learned = (
            old.policy.learned()
            if old is not None and old.learns
            else previous_status.get("learned")
        )
        learns = isinstance(policy, Learns)
        if learns and isinstance(learned, dict):
            policy.resume(learned)
        selector = model_selector(spec.signals.preset, spec.signals.model)
        queries = tuple(
            (query.render(selector=selector, window=self._config.rate_window), query, signal)
            for signal, query in queries_for(spec.signals.preset, spec.signals.queries).items()
        )
        gateway = spec.signals.gateway_queue_depth
        if gateway:
            gateway = SignalQuery(gateway).render(
                selector=selector, window=self._config.rate_window
            )
        return Workload(
            spec=spec,
            generation=generation,
            policy=policy,
            history=history,
            queries=queries,
            gateway_query=gateway,
            learns=learns,
        )

    async def _read_target(self, t: _Tick, view: ClusterView, index: "_PodIndex") -> None:
        spec = t.workload.spec
        target = spec.target
        key = (spec.namespace, target.kind, target.name)
        try:
            if target.api_version == "apps/v1" and target.kind in APPS_KINDS:
                t.scale = view.scales.get(key)
                if t.scale is None:
                    plural = "deployments" if target.kind == "Deployment" else "statefulsets"
                    raise KubeError(
                        KubeErrorKind.NOT_FOUND,
                        f'404: {plural}.apps "{target.name}" not found',
                        status=404,
                    )
            else:  # any other kind with a scale subresource: read it
                t.scale = await asyncio.to_thread(self._cluster.read_scale, spec.namespace, target)
        except KubeError as err:
            self.stats.errors[f"kube_{err.kind}"] += 1
            t.health = _replace(t.health, scale_error=f"FailedGetScale: {err}")
            return
        t.template = view.templates.get(key)
        own = view.scales.get((spec.namespace, "Deployment", placeholder_name(spec.name)))
        t.placeholders = own.replicas if own is not None else None
        t.buffers = view.buffers is not None
        t.buffer = (view.buffers or {}).get((spec.namespace, placeholder_name(spec.name)))
        competitor = view.competitors.get(key, "")
        if competitor:
            t.health = _replace(t.health, competitor=competitor)
        w = t.workload
        if w.selector_text != t.scale.selector:
            w.selector_text = t.scale.selector
            try:
                w.selector = parse_selector(t.scale.selector)
            except SelectorError as err:
                w.selector = err
        if isinstance(w.selector, SelectorError):
            t.health = _replace(t.health, scale_error=f"FailedGetScale: selector {w.selector}")
            return
        if not w.selector:  # an empty selector would take every pod of the namespace
            t.health = _replace(t.health, scale_error="FailedGetScale: the target has no selector")
            return
        t.pods = index.select(spec.namespace, w.selector)
        t.replicas = tuple(replica_of(p) for p in t.pods)

    async def _gather(self, ticks: list[_Tick], now: float) -> str:
        """Add the samples since the last tick to each workload's history (signals, and the
        exporter's per-pod GPU telemetry); returns why a query failed ("" when none did)."""
        step = self._config.scrape_interval_seconds
        end = math.floor(now / step) * step
        owners: dict[str, dict[tuple[str, str], Key]] = {}
        wanted: dict[str, tuple[SignalQuery, list[tuple[Key, str]]]] = {}
        all_pods = {}
        # A workload with a gateway: its queue depth is its pods' plus what the gateway
        # holds, summed per sample time here and added once every answer is in.
        gateways: dict[str, list[Key]] = {}
        queued: dict[Key, dict[float, float]] = {}
        for t in ticks:
            spec = t.workload.spec
            key = (spec.namespace, spec.name)
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

        def add_signal(text: str) -> Callable[[tuple[RangeSeries, ...]], None]:
            query, users = wanted[text]

            def add(answer: tuple[RangeSeries, ...]) -> None:
                if query.kind == "buckets":
                    histograms = workload_buckets(answer, owners[text])
                    for key, signal in users:
                        history = self._workloads[key].history
                        for ts, buckets in histograms.get(key, ()):
                            history.add_buckets(signal, ts, buckets)
                    return
                if query.kind == "quantile":
                    joined = workload_quantiles(answer, owners[text], query.quantile)
                else:
                    joined = workload_sums(answer, owners[text])
                for key, signal in users:
                    history = self._workloads[key].history
                    for ts, value in joined.get(key, ()):
                        if signal == "queue_depth" and key in queued:
                            acc = queued[key]
                            acc[ts] = acc.get(ts, 0.0) + value * query.scale
                        else:
                            history.add(signal, ts, value * query.scale)

            return add

        def add_gateway(text: str) -> Callable[[tuple[RangeSeries, ...]], None]:
            def add(answer: tuple[RangeSeries, ...]) -> None:
                for series in answer:  # the workload's own query: every series is its
                    for key in gateways[text]:
                        acc = queued[key]
                        for ts, value in series.samples:
                            acc[ts] = acc.get(ts, 0.0) + value

            return add

        def add_telemetry(field_name: str) -> Callable[[tuple[RangeSeries, ...]], None]:
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

        jobs = [(text, add_signal(text)) for text in wanted]
        jobs += [(text, add_telemetry(name)) for name, text in GPU_TELEMETRY.items()]
        jobs += [(text, add_gateway(text)) for text in gateways]
        limit = asyncio.Semaphore(QUERY_CONCURRENCY)

        async def fetch(text: str, consume: Callable[[tuple[RangeSeries, ...]], None]) -> str:
            async with limit:
                return await self._fetch(text, consume, end, step)

        failures = await asyncio.gather(*(fetch(text, consume) for text, consume in jobs))
        for key, acc in queued.items():
            for ts in sorted(acc):
                self._workloads[key].history.add("queue_depth", ts, acc[ts])
        for key, (ts, pods) in telemetry.items():
            self._workloads[key].history.add_pods(
                ts, tuple(PodTelemetry(pod=name, **pods[name]) for name in sorted(pods))
            )
        return next((f for f in failures if f), "")

    async def _fetch(
        self,
        text: str,
        consume: Callable[[tuple[RangeSeries, ...]], None],
        end: float,
        step: float,
    ) -> str:
        """Fetch one query's samples since it was last fetched, in chunks of at most
        MAX_POINTS_PER_QUERY steps (a first tick backfills the whole history), handing each
        chunk to `consume`; returns why it failed, "" when it did not."""
        start = max(
            self._fetched_until.get(text, -math.inf) + step, end - self._config.history_seconds
        )
        while start <= end:
            chunk_end = min(end, start + (MAX_POINTS_PER_QUERY - 1) * step)
            begun = time.monotonic()
            try:
                answer = await self._prom.query_range(text, start=start, end=chunk_end, step=step)
            except PromError as err:
                self.stats.errors[f"prometheus_{err.kind}"] += 1
                return f"{err.kind}: {err}"
            finally:
                self.stats.queries += 1
                self.stats.query_seconds += time.monotonic() - begun
            consume(answer)
            self._fetched_until[text] = chunk_end
            start = chunk_end + step
        return ""

    # --- decide and act ---

    async def _decide_and_scale(
        self,
        t: _Tick,
        now: float,
        leader: bool,
        node_pods: Counter[str],
        free: Mapping[str, tuple[int, ...]],
    ) -> None:
        """Decide at the policy's interval and write the scale when the count changes;
        `free` is each NodePool's nodes' free GPUs (`core.nodepools.free_gpus`)."""
        w, spec = t.workload, t.workload.spec
        name = f"{spec.namespace}/{spec.name}"
        if t.scale is not None and now >= w.next_decision_at:
            w.next_decision_at = now + w.policy.interval_seconds
            # a workload naming no NodePool may land on several: its nodes are unknown
            node_free = free.get(spec.node_pool) if spec.node_pool else None
            obs = w.history.observe(now, t.replicas, node_free_gpus=node_free)
            w.decision = w.policy.decide(obs)
            w.wanted = w.decision.desired
            self.stats.decisions[(name, str(w.decision.reason))] += 1
        current = t.scale.replicas if t.scale is not None else None
        desired = spec.workload.clamp(w.wanted) if w.wanted is not None else current
        headroom = w.decision.headroom if w.decision is not None else 0
        if spec.schedules and desired is not None:
            floor = floor_at(spec.schedules, now, lead_seconds=spec.workload.node_lead_seconds)
            raised, headroom = floor.merge(
                desired=desired, headroom=headroom, maximum=spec.workload.max_replicas
            )
            t.scheduled = floor.why if raised > desired else ""
            desired = raised
        if t.health.missing_metrics and current is not None and desired is not None:
            desired = max(desired, current)  # never lower the count on missing data
        act = (
            leader
            and current is not None
            and desired is not None
            and desired != current
            and not t.health.competitor
            and not t.health.scale_error
        )
        if act:
            await self._scale(t, current, desired, node_pods, now)
        t.desired = desired
        if w.decision is not None and spec.placeholders and not t.health.competitor:
            t.headroom = max(0, headroom)

    def _fit_headroom_to_nodepools(
        self, ticks: list[_Tick], view: ClusterView, queued: list[PoolDemand]
    ) -> None:
        """Cut each workload's headroom to what its Karpenter NodePool's limits leave,
        planning every workload's replicas and headroom together with Kueue's pending
        Workloads (`queued`), after what other pods' nodes use of the limits (see
        `core.nodepools`, `core.kueue`)."""
        nodepools = view.nodepools or []
        demands = [
            PoolDemand(
                workload=f"{t.workload.spec.namespace}/{t.workload.spec.name}",
                node_pool=t.workload.spec.node_pool,
                shape=t.workload.spec.workload.shape,
                replicas=t.desired or 0,
                headroom=t.headroom,
                gpus_per_node=t.workload.spec.workload.gpus_per_node,
            )
            for t in ticks
        ]
        ours = {
            (p.namespace, p.name)
            for t, d in zip(ticks, demands, strict=True)
            if on_nodepool(d, nodepools)
            for p in t.pods
        }
        ours |= {(p.namespace, p.name) for p in view.pods if OWNER_LABEL in p.labels}
        used = pool_use(view.pool_nodes, view.pods, ours)
        fitted = pool_headroom(nodepools, demands + queued, used)
        for t, d in zip(ticks, demands, strict=True):
            if not on_nodepool(d, nodepools):
                continue
            held = fitted[d.workload]
            t.headroom = held.granted
            t.health = _replace(
                t.health,
                node_pool=held.node_pool or d.node_pool or "by weight",
                node_pool_limit=held.message,
            )

    async def _finish(self, t: _Tick, now: float, leader: bool) -> WorkloadMetrics | None:
        """Keep the headroom, write status; returns what the metrics servers serve of it
        (None when none is served)."""
        w, spec = t.workload, t.workload.spec
        name = f"{spec.namespace}/{spec.name}"
        desired = t.desired
        if leader and w.decision is not None and not t.health.scale_error:
            await self._keep_headroom(t, t.headroom)
        replicas = t.replicas
        if desired is not None:
            self.stats.desired[name] = desired
        self.stats.max_replicas[name] = spec.workload.max_replicas
        self.stats.missing_metrics[name] = bool(t.health.missing_metrics)  # the reason, or ''
        running = sum(1 for r in replicas if r.state is not ReplicaState.TERMINATING)
        self.stats.current[name] = running
        self.stats.ready[name] = sum(1 for r in replicas if r.state is ReplicaState.READY)
        if leader:
            await self._write_status(t, running, desired, now)
        if self._feed is None:
            return None
        return workload_metrics(
            namespace=spec.namespace,
            name=spec.name,
            target=spec.target.name,
            model=spec.signals.model,
            signals=w.history.latest_samples(now),
            pods=w.history.latest_pods(now),
            desired=desired,
            current=running,
            now=now,
        )

    async def _keep_headroom(self, t: _Tick, headroom: int) -> None:
        """Keep `headroom` replicas' worth of GPU capacity ahead of the target: as a
        CapacityBuffer where its CRD is installed (see `core.buffers`; placeholder pods
        left from before go to zero), else as placeholder pods (see `core.placeholders`).
        None when the spec says so, another autoscaler owns the target (`t.headroom` is 0
        then), or its pod template is unknown (kinds other than Deployment and
        StatefulSet). A failure costs only the headroom, counted and logged."""
        want = headroom
        if t.buffers:
            await self._keep_buffer(t, want)
            want = 0
        await self._keep_placeholders(t, want)

    async def _keep_buffer(self, t: _Tick, want: int) -> None:
        spec = t.workload.spec
        owner = {"namespace": spec.namespace, "autoscaler": spec.name, "autoscaler_uid": spec.uid}

        def write() -> None:
            self._cluster.write_buffer(
                pod_template(**owner, template_spec=t.template),
                capacity_buffer(**owner, replicas=want),
                exists=t.buffer is not None,
            )

        await self._keep(t, want, t.buffer, self.stats.buffers, "a CapacityBuffer of {}", write)

    async def _keep_placeholders(self, t: _Tick, want: int) -> None:
        spec = t.workload.spec

        def write() -> None:
            if not self._priority_class_ready:
                self._cluster.ensure_priority_class(priority_class())
                self._priority_class_ready = True
            body = placeholder_deployment(
                namespace=spec.namespace,
                autoscaler=spec.name,
                autoscaler_uid=spec.uid,
                replicas=want,
                template_spec=t.template,
            )
            self._cluster.write_placeholders(body, exists=t.placeholders is not None)

        await self._keep(
            t, want, t.placeholders, self.stats.placeholders, "{} placeholder pods", write
        )

    async def _keep(
        self,
        t: _Tick,
        want: int,
        current: int | None,
        kept: dict[str, int],
        what: str,
        write: Callable[[], None],
    ) -> None:
        """What both forms of headroom share: `write` (in a thread) only when `want`
        differs from what the cluster holds (`current`; None: no object yet) and the
        target's pod template is known; a failure is counted and logged, never raised."""
        spec = t.workload.spec
        name = f"{spec.namespace}/{spec.name}"
        if t.template is None or current == want or (current is None and not want):
            kept[name] = current or 0
            return
        try:
            await asyncio.to_thread(write)
        except KubeError as err:
            self.stats.errors[f"kube_{err.kind}"] += 1
            log.warning("%s: cannot keep %s: %s", name, what.format(want), err)
            return
        kept[name] = want

    async def _scale(
        self, t: _Tick, current: int, desired: int, node_pods: Counter[str], now: float
    ) -> None:
        spec, w = t.workload.spec, t.workload
        try:
            if desired < current:
                for pod, cost in deletion_costs(t.pods, node_pods).items():
                    await asyncio.to_thread(
                        self._cluster.set_deletion_cost, spec.namespace, pod, cost
                    )
            await asyncio.to_thread(self._cluster.write_scale, spec.namespace, spec.target, desired)
        except KubeError as err:
            self.stats.errors[f"kube_{err.kind}"] += 1
            t.health = _replace(t.health, scale_error=f"FailedUpdateScale: {err}")
            log.warning(
                "%s/%s: cannot scale %s: %s", spec.namespace, spec.name, spec.target.name, err
            )
            return
        w.last_scale_time = _timestamp(now)
        decision = w.decision
        reason = str(decision.reason) if decision else "Scaled"
        message = decision.message if decision else ""
        if t.scheduled:
            reason, message = "ScheduledWindow", f"{t.scheduled}; the policy: {message}"
        await self._event(
            spec,
            "Normal",
            reason,
            "Scale",
            f"{current} -> {desired} replicas: {message}",
        )

    async def _write_status(self, t: _Tick, current: int, desired: int | None, now: float) -> None:
        w, spec = t.workload, t.workload.spec
        decision = w.decision
        conds = conditions(
            t.health,
            wanted=w.wanted,
            desired=desired,
            minimum=spec.workload.min_replicas,
            maximum=spec.workload.max_replicas,
            rate_limited=decision is not None and decision.reason is Reason.RATE_LIMITED,
        )
        status: dict[str, Any] = {
            "observedGeneration": w.generation,
            "currentReplicas": current,
            "desiredReplicas": desired,
            "conditions": condition_list(
                conds, t.previous_status.get("conditions") or [], _timestamp(now)
            ),
        }
        if decision is not None:
            status["reason"] = str(decision.reason)
            if decision.bound_by is not None:
                status["boundBy"] = str(decision.bound_by)  # the term that set the count
        if w.last_scale_time:
            status["lastScaleTime"] = w.last_scale_time
        await self._warn_on_new_problems(t, conds)
        if (
            _same(status, t.previous_status)
            and now - w.signals_written_at < SIGNALS_REFRESH_SECONDS
        ):
            return  # nothing but the signal values moved: no write every tick for each workload
        # What moves every sample is built only for a write (most ticks write nothing).
        status["signals"] = {s: round(v, 6) for s, v in w.history.latest(now).items()}
        if decision is not None:
            status["message"] = decision.message
        if w.learns:
            status["learned"] = dict(cast(Learns, w.policy).learned())
        try:
            await asyncio.to_thread(self._cluster.write_status, spec.namespace, spec.name, status)
            w.signals_written_at = now
        except KubeError as err:
            self.stats.errors[f"kube_{err.kind}"] += 1

    async def _warn_on_new_problems(self, t: _Tick, conds: tuple[Condition, ...]) -> None:
        """A Warning Event for each condition that turned bad this tick."""
        before = {c.get("type"): c for c in t.previous_status.get("conditions") or []}
        for c in conds:
            bad = c.type != "ScalingLimited" and c.status == "False"
            old = before.get(c.type) or {}
            if bad and (old.get("status"), old.get("reason")) != (c.status, c.reason):
                await self._event(t.workload.spec, "Warning", c.reason, "Scale", c.message)

    async def _report_bad_spec(
        self, key: Key, generation: int, err: SpecError, previous: dict[str, Any], now: float
    ) -> None:
        if self._bad_specs.get(key) == (generation, str(err)):
            return
        self._bad_specs[key] = (generation, str(err))
        namespace, name = key
        conds = conditions(
            Health(invalid_spec=str(err)),
            wanted=None,
            desired=None,
            minimum=0,
            maximum=0,
            rate_limited=False,
        )
        status = {
            "observedGeneration": generation,
            "conditions": condition_list(conds, previous.get("conditions") or [], _timestamp(now)),
            "reason": "InvalidSpec",
            "message": str(err),
        }
        regarding = {
            "apiVersion": "autoscaling.gpufleet.dev/v1alpha1",
            "kind": "GPUAutoscaler",
            "name": name,
            "namespace": namespace,
        }
        try:
            if self._is_leader():
                await asyncio.to_thread(self._cluster.write_status, namespace, name, status)
                await asyncio.to_thread(
                    self._events.record,
                    regarding=regarding,
                    type_="Warning",
                    reason="InvalidSpec",
                    action="Validate",
                    note=str(err),
                )
        except KubeError as kube_err:
            self.stats.errors[f"kube_{kube_err.kind}"] += 1

    async def _event(
        self, spec: AutoscalerSpec, type_: str, reason: str, action: str, note: str
    ) -> None:
        regarding = {
            "apiVersion": "autoscaling.gpufleet.dev/v1alpha1",
            "kind": "GPUAutoscaler",
            "name": spec.name,
            "namespace": spec.namespace,
        }
        try:
            await asyncio.to_thread(
                self._events.record,
                regarding=regarding,
                type_=type_,
                reason=reason,
                action=action,
                note=note,
            )
        except KubeError as err:
            self.stats.errors[f"kube_{err.kind}"] += 1


class _PodIndex:
    """Pods by namespace and by label, so a tick selects each workload's pods from a few
    candidates instead of scanning every pod for every workload."""

    def __init__(self, pods: list[PodState]) -> None:
        self._by_namespace: dict[str, list[PodState]] = {}
        self._by_label: dict[tuple[str, str, str], list[PodState]] = {}
        for p in pods:
            self._by_namespace.setdefault(p.namespace, []).append(p)
            for k, v in p.labels.items():
                self._by_label.setdefault((p.namespace, k, v), []).append(p)

    def select(self, namespace: str, selector: tuple[Requirement, ...]) -> list[PodState]:
        candidates = self._by_namespace.get(namespace, [])
        for r in selector:
            if r.op == "=" and len(r.values) == 1:
                (value,) = r.values
                candidates = self._by_label.get((namespace, r.key, value), [])
                break
        return [p for p in candidates if all(r.matches(p.labels) for r in selector)]


def _same(status: dict[str, Any], previous: dict[str, Any]) -> bool:
    """Whether `status` says what `previous` does, the numbers that move every sample (the
    signal values, the decision's message, what the policy learned) aside."""
    keys = (set(status) | set(previous)) - {"signals", "message", "learned"}
    return all(status.get(k) == previous.get(k) for k in keys)


def _replace(health: Health, **changes: str) -> Health:
    return dataclasses.replace(health, **changes)


def _timestamp(seconds: float) -> str:
    return micro_time(seconds)[:19] + "Z"
