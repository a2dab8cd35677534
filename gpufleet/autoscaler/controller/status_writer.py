"""The loop's act step for what users read: GPUAutoscaler status, and Events.

Status is written only when it says something new (the signal values, the decision's
message and what the policy learned move every scrape, so they alone are refreshed every
SIGNALS_REFRESH_SECONDS); a condition that turns bad is also a Warning Event; a bad spec is
reported once per generation. A failed write is counted, never raised: the next tick
writes again.
"""

import logging
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, cast

from gpufleet.autoscaler.controller.leading import NotLeading, as_leader
from gpufleet.autoscaler.controller.stats import Stats
from gpufleet.autoscaler.controller.workload import Key, Tick
from gpufleet.autoscaler.core.policy import Learns, Reason
from gpufleet.autoscaler.core.spec import AutoscalerSpec, SpecError
from gpufleet.autoscaler.core.status import (
    Condition,
    Health,
    by_type,
    condition_list,
    conditions,
)
from gpufleet.autoscaler.kube.cluster import Cluster
from gpufleet.kube.errors import KubeError
from gpufleet.kube.events import EventRecorder, micro_time
from gpufleet.logs import OutageLog

log = logging.getLogger(__name__)

SIGNALS_REFRESH_SECONDS = 30.0


class StatusWriter:
    def __init__(
        self,
        cluster: Cluster,
        events: EventRecorder,
        stats: Stats,
        *,
        is_leader: Callable[[], bool],
    ) -> None:
        self._cluster = cluster
        self._events = events
        self._stats = stats
        self._is_leader = is_leader
        # (uid, generation, problem) reported, once each: a GPUAutoscaler deleted and made
        # again starts at generation 1 again, a new uid
        self._bad_specs: dict[Key, tuple[str, int, str]] = {}
        # One Events API for every workload: its outage is one line, not one per workload.
        self._events_outage = OutageLog(log, "cannot record Events")

    async def write(self, t: Tick, current: int, desired: int | None, now: float) -> None:
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
                conds, t.previous_status.get("conditions") or [], timestamp(now)
            ),
        }
        if decision is not None:
            status["reason"] = str(decision.reason)
            if decision.bound_by is not None:
                status["boundBy"] = str(decision.bound_by)  # the term that set the count
        if w.last_scale_time:
            status["lastScaleTime"] = w.last_scale_time
        # What it said before and no longer says (boundBy after a switch to keda, an
        # InvalidSpec's reason): a merge patch keeps a field it omits, so it is deleted.
        for stale in set(t.previous_status) - set(status) - _MOVING:
            status[stale] = None
        await self._warn_on_new_problems(t, conds)
        if (
            _same(status, t.previous_status)
            and now - w.signals_written_at < SIGNALS_REFRESH_SECONDS
        ):
            return  # nothing but the signal values moved: no write every tick for each workload
        # What moves every sample is built only for a write (most ticks write nothing). A
        # signal no longer sampled is deleted, as the merge patch keeps what it omits.
        signals: dict[str, float | None] = dict.fromkeys(t.previous_status.get("signals") or {})
        signals.update((s, round(v, 6)) for s, v in w.history.latest(now).items())
        status["signals"] = signals
        status["message"] = decision.message if decision is not None else None
        if w.learns:
            status["learned"] = dict(cast(Learns, w.policy).learned())
        elif "learned" in t.previous_status:  # a policy that learns nothing now: not its
            status["learned"] = None
        outage = w.outage("cannot write its status", log)
        try:
            await as_leader(
                self._is_leader, self._cluster.write_status, spec.namespace, spec.name, status
            )
            w.signals_written_at = now
        except NotLeading:
            return
        except KubeError as err:
            self._stats.errors[f"kube_{err.kind}"] += 1
            outage.failed(str(err), kind=str(err.kind))
            return
        outage.recovered()

    async def _warn_on_new_problems(self, t: Tick, conds: tuple[Condition, ...]) -> None:
        """A Warning Event for each condition that turned bad this tick: bad now, and
        neither the status nor the last Warning said so (a status that cannot be written
        keeps saying the old state: the Warning went out every tick)."""
        w = t.workload
        before = by_type(t.previous_status.get("conditions"))
        for c in conds:
            bad = c.type != "ScalingLimited" and c.status == "False"
            old = before.get(c.type) or {}
            said = {(old.get("status"), old.get("reason")), w.warned.get(c.type)}
            if bad and (c.status, c.reason) not in said:
                await self.event(w.spec, "Warning", c.reason, "Scale", c.message)
            w.warned[c.type] = (c.status, c.reason)

    def reported(self, key: Key, uid: str, generation: int) -> bool:
        """Whether this object's generation was already reported bad (and is not reparsed)."""
        return self._bad_specs.get(key, ("", -1, ""))[:2] == (uid, generation)

    def forget_all_but(self, seen: Iterable[Key]) -> None:
        """Drop what was reported of the GPUAutoscalers that are gone."""
        for key in set(self._bad_specs) - set(seen):
            del self._bad_specs[key]

    async def report_bad_spec(
        self,
        key: Key,
        uid: str,
        generation: int,
        err: SpecError,
        previous: dict[str, Any],
        now: float,
    ) -> None:
        """Its condition, status and one Warning Event; remembered as reported once its
        status is written, so a failed write (or a follower that becomes leader) reports it
        later. What the status said of the last valid spec (its counts, signals, what bound
        them) is deleted, as none of it is current; what it learned is kept."""
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
            "conditions": condition_list(conds, previous.get("conditions") or [], timestamp(now)),
            "reason": "InvalidSpec",
            "message": str(err),
        }
        for stale in set(previous) - set(status) - _KEPT_WHEN_INVALID:
            status[stale] = None
        if not self._is_leader():
            return
        try:
            await as_leader(self._is_leader, self._cluster.write_status, namespace, name, status)
        except NotLeading:
            return
        except KubeError as kube_err:
            self._stats.errors[f"kube_{kube_err.kind}"] += 1
            return
        self._bad_specs[key] = (uid, generation, str(err))
        regarding = _regarding(namespace, name, uid)
        await self._record(regarding, "Warning", "InvalidSpec", "Validate", str(err))

    async def event(
        self, spec: AutoscalerSpec, type_: str, reason: str, action: str, note: str
    ) -> None:
        regarding = _regarding(spec.namespace, spec.name, spec.uid)
        await self._record(regarding, type_, reason, action, note)

    async def _record(
        self, regarding: dict[str, str], type_: str, reason: str, action: str, note: str
    ) -> None:
        """One Event; a failed one is counted and logged, not retried (the status says the
        same)."""
        try:
            await as_leader(
                self._is_leader,
                partial(
                    self._events.record,
                    regarding=regarding,
                    type_=type_,
                    reason=reason,
                    action=action,
                    note=note,
                ),
            )
        except NotLeading:
            return
        except KubeError as err:
            self._stats.errors[f"kube_{err.kind}"] += 1
            self._events_outage.failed(str(err), kind=str(err.kind))
            return
        self._events_outage.recovered()


def timestamp(seconds: float) -> str:
    """A status timestamp: RFC 3339 to the second, as Kubernetes writes them."""
    return micro_time(seconds).strftime("%Y-%m-%dT%H:%M:%SZ")


def _regarding(namespace: str, name: str, uid: str) -> dict[str, str]:
    """`kubectl describe` lists only the Events whose `involvedObject.uid` is the object's:
    an Event without its uid is not shown there."""
    return {
        "apiVersion": "autoscaling.gpufleet.dev/v1alpha1",
        "kind": "GPUAutoscaler",
        "name": name,
        "namespace": namespace,
        **({"uid": uid} if uid else {}),
    }


_MOVING = frozenset({"signals", "message", "learned"})  # what moves every sample
# Kept under an invalid spec: a fact of the past, and what the policy resumes from once the
# spec is mended (`workload.py`).
_KEPT_WHEN_INVALID = frozenset({"lastScaleTime", "learned"})


def _same(status: dict[str, Any], previous: dict[str, Any]) -> bool:
    """Whether `status` says what `previous` does, the numbers that move every sample (the
    signal values, the decision's message, what the policy learned) aside."""
    keys = (set(status) | set(previous)) - _MOVING
    return all(status.get(k) == previous.get(k) for k in keys)
