"""The live control loop: gather from Prometheus and the API, decide with the policy, act.

Every tick it reads the cluster in eight list calls (GPUAutoscalers, pods, Deployments,
StatefulSets, HPAs, ScaledObjects, CapacityBuffers, NodePools; where the NodePool CRD is
installed also Kueue's Workloads, their ResourceFlavors and the pools' nodes, see
`Cluster.view`; a Deployment's scale is its replicas and selector), reads the scale
subresource of any other kind of target, and adds the samples since the last tick to each
workload's `SignalHistory`, the one the replay fills (`prom_gather`). A workload's policy
(one instance per GPUAutoscaler, kept across ticks) decides at its own interval on that
history; the controller writes the scale subresource only when the count changes, keeps the
headroom (`headroom`), and writes status only when it says something new, and an Event
(`status_writer`). Only the leader writes; a follower gathers and decides, so it takes over
warm. A tick runs on Prometheus' time, since the samples' times are its (`prom_clock`).

Hold, never guess: a failed query holds the count for that tick (never lower), with a
MissingMetrics condition; a bad spec is a condition and an event naming the field, and its
headroom is released until it is mended; an API error on one workload never stops another,
and neither does a slow one: a tick waits for Prometheus and for each step of the workloads'
at most `wait_seconds`, and what runs longer goes on beside the loop (`steps`).
"""

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from operator import attrgetter
from typing import Any, NamedTuple

from gpufleet.autoscaler.controller.headroom import HeadroomKeeper, fit_to_nodepools
from gpufleet.autoscaler.controller.leading import NotLeading, as_leader
from gpufleet.autoscaler.controller.prom_clock import PromClock
from gpufleet.autoscaler.controller.prom_gather import PromGather
from gpufleet.autoscaler.controller.stats import Stats
from gpufleet.autoscaler.controller.status_writer import StatusWriter, timestamp
from gpufleet.autoscaler.controller.steps import Steps, tick_key
from gpufleet.autoscaler.controller.workload import Key, Tick, Workload, new_workload
from gpufleet.autoscaler.core.extmetrics import (
    MetricsSnapshot,
    SnapshotFeed,
    WorkloadMetrics,
    workload_metrics,
)
from gpufleet.autoscaler.core.kueue import pending_demands
from gpufleet.autoscaler.core.nodepools import free_gpus
from gpufleet.autoscaler.core.observation import Observation, ReplicaState
from gpufleet.autoscaler.core.policy import Decision, Reason
from gpufleet.autoscaler.core.replicas import PodState, deletion_costs, hpa_ready, replica_of
from gpufleet.autoscaler.core.rivals import rival_autoscalers
from gpufleet.autoscaler.core.schedules import floor_at
from gpufleet.autoscaler.core.spec import AutoscalerSpec, SpecError, parse_spec
from gpufleet.autoscaler.kube.cluster import APPS_KINDS, Cluster, ClusterView
from gpufleet.autoscaler.prom.client import PromClient
from gpufleet.core.messages import MAX_SHOWN_CHARS, cut
from gpufleet.core.selectors import Requirement, SelectorError, parse_selector
from gpufleet.kube.errors import KubeError, KubeErrorKind
from gpufleet.kube.events import EventRecorder
from gpufleet.logs import OutageLog, ThrottledLog

log = logging.getLogger(__name__)
# The tick's listing runs here, not on the default pool, which steps held by a hung webhook
# can fill: the tick then waited for them after all.
_LISTER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpufleet-list")
# A served signal whose newest sample is this many query steps old is none: three steps
# lost, gpufleet's own policy's bound (20 s at the default 5 s step).
STALE_STEPS = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerConfig:
    scrape_interval_seconds: float = 5.0  # the range queries' step
    rate_window: str = "30s"  # `{{window}}` in the signal queries
    history_seconds: float = 1800.0  # what a policy may look back on (gpufleet's peak memory)
    gpufleet_headroom: float | None = None
    headroom: bool = True  # keep the headroom specs ask for (--headroom)
    # The longest a tick waits (--tick-seconds) for Prometheus, and for each step of a
    # workload's (its writes): what runs longer goes on beside the loop (`prom_gather`,
    # `steps`).
    wait_seconds: float = 1.0


class _BadSpec(NamedTuple):
    """An invalid GPUAutoscaler whose condition and event are still to write."""

    key: Key
    uid: str
    generation: int
    err: SpecError
    previous: dict[str, Any]


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
        self._config = config or ControllerConfig()
        self._clock = clock
        self._is_leader = is_leader
        self._workloads: dict[Key, Workload] = {}
        self.stats = Stats()
        self._gather = PromGather(
            prom,
            self.stats,
            step_seconds=self._config.scrape_interval_seconds,
            history_seconds=self._config.history_seconds,
            wait_seconds=self._config.wait_seconds,
        )
        self._prom_clock = PromClock(prom, clock, self.stats, log)
        self._steps = Steps(self.stats, log, wait_seconds=self._config.wait_seconds)
        self._headroom = HeadroomKeeper(cluster, self.stats, is_leader=is_leader)
        self._status = StatusWriter(cluster, events, self.stats, is_leader=is_leader)
        # Every workload holds its count while a query fails (MissingMetrics): said in the
        # log when it starts and ends, not at every tick.
        self._prom_outage = OutageLog(log, "Prometheus queries fail; counts held")
        self._spec_bugs = ThrottledLog(log, clock=time.monotonic)

    def close(self) -> None:
        """Stop what a tick left running: the Prometheus queries still answering and the
        workload steps still writing."""
        self._gather.close()
        self._steps.close()

    async def tick(self) -> None:
        """One pass over every GPUAutoscaler. Raises only if the API cannot list them."""
        started = time.monotonic()
        local = self._clock()
        # Prometheus' time is read while the API lists: the samples' times are its.
        reading = asyncio.create_task(self._prom_clock.read())
        # Taken before the listing: a step that ends during it acted on an older view.
        busy = self._steps.busy()
        # On a thread of its own: steps held by a hung webhook may fill the default pool.
        loop = asyncio.get_running_loop()
        self.stats.errors.update(self._cluster.take_watch_failures())
        try:
            view = await loop.run_in_executor(_LISTER, self._cluster.view)
        except BaseException:
            reading.cancel()
            raise
        now = local - await reading
        pods = view.pods
        ticks, invalid, reports = self._sync(view.autoscalers)
        raised: set[Key] = set()

        async def report(bad: _BadSpec) -> None:
            await self._status.report_bad_spec(*bad, now)

        await self._steps.each(
            reports, "reporting its invalid spec", report, key=attrgetter("key"), raised=raised
        )
        # leadership asked only where there is a write to make
        if invalid and self._config.headroom and self._is_leader():

            async def release(key: Key) -> None:
                await self._headroom.release_invalid(key, view)

            await self._steps.each(
                invalid, "releasing its headroom", release, key=lambda key: key, raised=raised
            )
        # A Succeeded or Failed pod (evicted, say) stays listed until it is collected; it
        # is no replica, as the ReplicaSet controller and the HPA ignore it.
        index = _PodIndex([p for p in view.pods if not p.finished])
        rivals = rival_autoscalers(view.autoscalers)

        async def read(t: Tick) -> None:
            await self._read_target(t, view, index)
            rival = rivals.get(t.workload.key)
            if rival and not t.health.competitor:
                t.note(competitor=rival)

        listed = ticks
        held = [t for t in ticks if t.workload.key in busy]
        for t in held:  # a busy workload's signals still flow: its pods, as last selected
            self._select_pods(t, index)
        ticks = [t for t in ticks if t.workload.key not in busy]
        ticks = await self._steps.each(
            ticks, "reading its target", read, key=tick_key, raised=raised
        )
        served = ticks + held
        failed = await self._gather.gather(
            served, self._workloads, now, monotonic=started, read_now=self._prom_clock.read_now
        )
        if failed:
            first = next(iter(failed.values()))
            self._prom_outage.failed(f"{first.kind}: {first}", kind=str(first.kind))
        else:
            self._prom_outage.recovered()
        self.stats.leader = self._is_leader()
        node_pods = Counter(p.node for p in pods if p.node and p.deleting_since is None)
        free = free_gpus(view.nodepools, view.pool_nodes, pods) if view.nodepools else {}

        async def decide(t: Tick) -> None:
            err = failed.get(t.workload.key)
            if err is not None:
                t.note(missing_metrics=f"{err.kind}: {err}")
            await self._decide_and_scale(t, now, node_pods, free)

        ticks = await self._steps.each(ticks, "deciding", decide, key=tick_key, raised=raised)
        if view.nodepools is not None:
            queued = pending_demands(view.kueue_workloads, view.kueue_flavors)
            decided = {t.workload.key for t in ticks}
            # Busy, or a step raised: their placeholders hold capacity all the same.
            undecided = [t for t in listed if t.workload.key not in decided]
            for t in undecided:
                if not t.pods:  # its read never got that far
                    self._select_pods(t, index)
            fit_to_nodepools(ticks, view, queued, undecided=undecided)
        await self._steps.each(
            ticks,
            "keeping its headroom and status",
            lambda t: self._finish(t, now),
            key=tick_key,
            raised=raised,
        )
        if self._feed is not None:
            # busy ones too, with the count they last decided; one whose step raised is out
            self._feed.publish(
                MetricsSnapshot(
                    self._metrics(t, now) for t in served if t.workload.key not in raised
                )
            )
        self.stats.ticks += 1
        self.stats.reconcile_seconds += time.monotonic() - started

    # --- gather ---

    def _sync(self, objects: list[dict[str, Any]]) -> tuple[list[Tick], list[Key], list[_BadSpec]]:
        """Workload state for each valid object; the invalid ones apart, and those of them
        whose condition and event are still to write."""
        seen: set[Key] = set()
        ticks: list[Tick] = []
        invalid: list[Key] = []
        reports: list[_BadSpec] = []
        for obj in objects:
            meta = obj.get("metadata") or {}
            key = (meta.get("namespace", ""), meta.get("name", ""))
            seen.add(key)
            generation, uid = int(meta.get("generation") or 0), meta.get("uid", "")
            previous = obj.get("status") or {}
            if not isinstance(previous, dict):  # the API would refuse it; a status is ours
                previous = {}
            w = self._workloads.get(key)
            if w is not None and w.spec.uid != uid:
                w = None  # deleted and made again (at generation 1 again): a new object
            if w is not None and w.generation == generation:  # parsed when it last changed
                ticks.append(Tick(workload=w, previous_status=previous))
                continue
            if self._status.reported(key, uid, generation):
                invalid.append(key)  # still the bad spec already reported
                continue
            try:
                spec = parse_spec(obj)
                w = new_workload(
                    spec,
                    generation,
                    w,
                    previous,
                    rate_window=self._config.rate_window,
                    history_seconds=self._config.history_seconds,
                    gpufleet_headroom=self._config.gpufleet_headroom,
                    placeholders=self._keeps_headroom(spec),
                )
            except Exception as err:  # what parse_spec did not foresee is a bad spec too
                self._workloads.pop(key, None)
                if not isinstance(err, SpecError):
                    # rate-limited: a follower reads it again every tick
                    self._spec_bugs.log(
                        logging.ERROR, "%s/%s: reading its spec raised", *key, exc_info=err
                    )
                    text = cut(str(err), MAX_SHOWN_CHARS)
                    err = SpecError("spec", f"cannot be read: {type(err).__name__}: {text}")
                reports.append(_BadSpec(key, uid, generation, err, previous))
                invalid.append(key)
                continue
            self._workloads[key] = w
            ticks.append(Tick(workload=w, previous_status=previous))
        for key in set(self._workloads) - seen:
            del self._workloads[key]
        self._status.forget_all_but(seen)
        self._steps.forget_all_but(seen)
        self.stats.forget_all_but({w.name for w in self._workloads.values()})
        self._headroom.forget_invalid_all_but(set(invalid))
        return ticks, invalid, reports

    def _decide(self, w: Workload, obs: Observation) -> Decision | None:
        """The policy's decision; None, the last one held, when the policy raises: a bug
        (or a sample it cannot take) in one workload must not stop the others."""
        outage = w.outage("its policy fails; the last decision is held", log)
        try:
            decision = w.policy.decide(obs)
        except Exception as err:
            self.stats.errors["policy"] += 1
            outage.raised(err)
            return None
        outage.recovered()
        return decision

    def _keeps_headroom(self, spec: AutoscalerSpec) -> bool:
        """The spec asks for headroom (nodePool.placeholders) and --headroom keeps it."""
        return spec.placeholders and self._config.headroom

    async def _read_target(self, t: Tick, view: ClusterView, index: "_PodIndex") -> None:
        spec = t.workload.spec
        target = spec.target
        key = (spec.namespace, target.kind, target.name)
        t.placeholders = view.placeholders.get((spec.namespace, spec.name))
        t.buffers = view.buffers is not None
        t.buffer = (view.buffers or {}).get((spec.namespace, spec.name))
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
            t.note(scale_error=f"FailedGetScale: {err}")
            t.target_gone = err.kind is KubeErrorKind.NOT_FOUND
            return
        t.template = view.templates.get(key)
        competitor = view.competitors.get(key, "")
        if competitor:
            t.note(competitor=competitor)
        w = t.workload
        if w.selector_text != t.scale.selector:
            w.selector_text = t.scale.selector
            try:
                w.selector = parse_selector(t.scale.selector)
            except SelectorError as err:
                w.selector = err
        if isinstance(w.selector, SelectorError):
            t.note(scale_error=f"FailedGetScale: selector {w.selector}")
            return
        if not w.selector:  # an empty selector would take every pod of the namespace
            t.note(scale_error="FailedGetScale: the target has no selector")
            return
        self._select_pods(t, index)

    @staticmethod
    def _select_pods(t: Tick, index: "_PodIndex") -> None:
        """The target's pods by its selector as last read; none while it has no valid one."""
        selector = t.workload.selector
        if selector and not isinstance(selector, SelectorError):
            t.pods = index.select(t.workload.spec.namespace, selector)
            t.replicas = tuple(replica_of(p) for p in t.pods)

    # --- decide and act ---

    async def _decide_and_scale(
        self,
        t: Tick,
        now: float,
        node_pods: Counter[str],
        free: Mapping[str, tuple[int, ...]],
    ) -> None:
        """Decide at the policy's interval and write the scale when the count changes;
        `free` is each NodePool's nodes' free GPUs (`core.nodepools.free_gpus`)."""
        w, spec = t.workload, t.workload.spec
        name = w.name
        interval = w.policy.interval_seconds
        # at most an interval off: one set further was set before the loop's time went back
        w.next_decision_at = min(w.next_decision_at, now + interval)
        if t.scale is not None and now >= w.next_decision_at:
            w.next_decision_at = now + interval
            # a workload naming no NodePool may land on several: its nodes are unknown
            node_free = free.get(spec.node_pool) if spec.node_pool else None
            obs = w.history.observe(now, t.replicas, node_free_gpus=node_free)
            decision = self._decide(w, obs)
            if decision is not None:
                w.decision, w.wanted = decision, decision.desired
                self.stats.decisions[(name, str(decision.reason))] += 1
        if (
            w.decision is not None
            and w.decision.reason is Reason.MISSING_METRICS
            and not t.health.missing_metrics
        ):
            # Queries that answered, but with no sample (a selector matching no series): as
            # HPA, a held count is not ValidMetricFound, and the alert on it fires.
            t.note(missing_metrics=w.decision.message)
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
            # Never lower the count on missing data, but within the spec's bounds: a
            # lowered maxReplicas holds (as HPA enforces it when its metrics fail).
            desired = spec.workload.clamp(max(desired, current))
        act = (
            self._is_leader()  # asked at each write: a lease lost mid-tick stops them
            and current is not None
            and desired is not None
            and desired != current
            and not t.health.competitor
            and not t.health.scale_error
        )
        w.decided = desired
        if act:
            await self._scale(t, current, desired, node_pods, now)
        keeps = w.decision is not None and self._keeps_headroom(spec) and not t.health.competitor
        t.headroom = w.headroom = max(0, headroom) if keeps else 0

    async def _finish(self, t: Tick, now: float) -> None:
        """Keep the headroom, write status, count it for the self-metrics."""
        w, spec = t.workload, t.workload.spec
        name = w.name
        desired = w.decided
        if self._config.headroom and self._is_leader():
            if t.target_gone:  # no GPU held for it (a transient error keeps them)
                await self._headroom.release(t)
            elif w.decision is not None and not t.health.scale_error:
                await self._headroom.keep(t)
        if desired is not None:
            self.stats.desired[name] = desired
        self.stats.max_replicas[name] = spec.workload.max_replicas
        self.stats.missing_metrics[name] = bool(t.health.missing_metrics)  # the reason, or ''
        running, self.stats.ready[name] = _running_and_ready(t)
        self.stats.current[name] = running
        if self._is_leader():
            await self._status.write(t, running, desired, now)

    def _metrics(self, t: Tick, now: float) -> WorkloadMetrics:
        """What the external metrics and KEDA servers serve of a workload: its newest
        signals while fresh, and the count it last decided (this tick's, unless it is
        busy). Its replicas are its Scale's spec.replicas, as the HPA and KEDA read them:
        counted from its pods, a Recreate rollout (every old pod terminating, no new one
        yet) read as zero replicas, and the served ratio as the count itself, which the
        HPA multiplied by the Ready pods it still saw."""
        w, spec = t.workload, t.workload.spec
        asked = t.scale.replicas if t.scale is not None else _running_and_ready(t)[0]
        return workload_metrics(
            namespace=spec.namespace,
            name=spec.name,
            target=spec.target.name,
            model=spec.signals.model,
            signals=w.history.latest_samples(now),
            pods=w.history.latest_pods(now),
            desired=w.decided,
            current=asked,
            ready=hpa_ready(t.pods),
            now=now,
            fresh_after=now - STALE_STEPS * self._config.scrape_interval_seconds,
        )

    async def _scale(
        self, t: Tick, current: int, desired: int, node_pods: Counter[str], now: float
    ) -> None:
        spec, w = t.workload.spec, t.workload
        outage = w.outage(f"cannot scale {spec.target.name}", log)
        try:
            if desired < current:
                await self._set_deletion_costs(t, node_pods)
            written = await as_leader(
                self._is_leader,
                partial(self._cluster.write_scale, decided_from=current),
                spec.namespace,
                spec.target,
                desired,
            )
        except NotLeading:  # lost while a write waited: none after it
            return
        except KubeError as err:
            self.stats.errors[f"kube_{err.kind}"] += 1
            t.note(scale_error=f"FailedUpdateScale: {err}")
            outage.failed(str(err), kind=str(err.kind))
            return
        outage.recovered()
        if not written:  # the view trailed the target's count: decided again next tick
            return
        w.last_scale_time = timestamp(now)
        decision = w.decision
        reason = str(decision.reason) if decision else "Scaled"
        message = decision.message if decision else ""
        if t.scheduled:
            reason, message = "ScheduledWindow", f"{t.scheduled}; the policy: {message}"
        if not self._is_leader():  # lost while the scale write was held
            return
        await self._status.event(
            spec,
            "Normal",
            reason,
            "Scale",
            f"{current} -> {desired} replicas: {message}",
        )


    async def _set_deletion_costs(self, t: Tick, node_pods: Counter[str]) -> None:
        """Before a scale-down, so that the ReplicaSet controller deletes the pods on the
        emptiest nodes first. Best effort: a pod gone since the view (404), or a patch
        refused (RBAC, a webhook), costs the choice of pods, never the scale-down, which
        it used to cancel."""
        spec, w = t.workload.spec, t.workload
        outage = w.outage("cannot set its pods' deletion cost", log)
        for pod, cost in deletion_costs(t.pods, node_pods).items():
            try:
                await as_leader(
                    self._is_leader, self._cluster.set_deletion_cost, spec.namespace, pod, cost
                )
            except KubeError as err:
                if err.kind is not KubeErrorKind.NOT_FOUND:
                    self.stats.errors[f"kube_{err.kind}"] += 1
                    outage.failed(f"{pod}: {err}", kind=str(err.kind))
                    return
        outage.recovered()


def _running_and_ready(t: Tick) -> tuple[int, int]:
    """The target's replicas not terminating, and those Ready."""
    running = sum(1 for r in t.replicas if r.state is not ReplicaState.TERMINATING)
    return running, sum(1 for r in t.replicas if r.state is ReplicaState.READY)


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
