"""A GPUAutoscaler's state across ticks, and its view in one tick.

Plain records the loop's parts share: `loop` builds them (a spec's with `new_workload`),
`prom_gather` fills their histories, `headroom` and `status_writer` read them.
"""

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from typing import Any

from gpufleet.autoscaler.core.factory import Tuning, make_policy
from gpufleet.autoscaler.core.history import SignalHistory
from gpufleet.autoscaler.core.observation import Replica
from gpufleet.autoscaler.core.policy import Decision, Learns, Policy
from gpufleet.autoscaler.core.replicas import PodState
from gpufleet.autoscaler.core.signals import SignalQuery, model_selector, queries_for
from gpufleet.autoscaler.core.spec import AutoscalerSpec
from gpufleet.autoscaler.core.status import Health
from gpufleet.autoscaler.kube.cluster import ScaleView
from gpufleet.core.selectors import Requirement, SelectorError
from gpufleet.logs import OutageLog

Key = tuple[str, str]  # (namespace, name) of a GPUAutoscaler


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
    # the count last decided, written or not: what this tick's finish and headroom use, and
    # what the feed serves while the workload is busy
    decided: int | None = None
    # the headroom last asked for, before NodePool limits: a busy workload's part of the plan
    headroom: int = 0
    signals_written_at: float = -math.inf
    # A write retried every tick (a scale, its headroom) that keeps failing: one log line
    # when it starts, a reminder, one when it works (`OutageLog`), not one per tick.
    outages: dict[str, OutageLog] = field(default_factory=dict)
    # condition type -> (status, reason) this controller last said of it
    warned: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        return (self.spec.namespace, self.spec.name)

    @property
    def name(self) -> str:
        """`namespace/name`, as logs and the self-metrics name it."""
        return f"{self.spec.namespace}/{self.spec.name}"

    def outage(self, what: str, logger: logging.Logger) -> OutageLog:
        """The outage log of this workload's `what` ("cannot scale vllm")."""
        found = self.outages.get(what)
        if found is None:
            found = self.outages[what] = OutageLog(logger, f"{self.name}: {what}")
        return found


def new_workload(
    spec: AutoscalerSpec,
    generation: int,
    old: Workload | None,
    previous_status: dict[str, Any],
    *,
    rate_window: str,
    history_seconds: float,
    gpufleet_headroom: float | None,
    placeholders: bool,
) -> Workload:
    """A workload's runtime state; its policy resumes from what the status says it learned
    (a restart or a failover), or from the old policy's (a spec change), and keeps the old
    history. `placeholders`: the spec's headroom is kept (--headroom)."""
    tuning = Tuning(
        hpa_target_util=spec.hpa_target_gpu_utilization,
        keda_queue_target=spec.keda_queue_target,
        keda_polling_interval_seconds=spec.keda_polling_interval_seconds,
        gpufleet_headroom=gpufleet_headroom,
        gpufleet_placeholders=placeholders,
        idle_seconds_to_zero=spec.idle_seconds_to_zero,
        gpufleet_fill_nodes=False,  # a real pool may be shared (GpufleetSettings)
        keda_active_at_start=False,  # a new GPUAutoscaler is a new ScaledObject
    )
    history = old.history if old is not None else SignalHistory(history_seconds=history_seconds)
    policy = make_policy(
        spec.policy, spec.workload, tuning, hpa_workload_behavior=spec.custom_behavior
    )
    learned = (
        old.policy.learned() if old is not None and old.learns else previous_status.get("learned")
    )
    learns = isinstance(policy, Learns)
    if learns and isinstance(learned, dict):
        policy.resume(learned)
    selector = model_selector(spec.signals.preset, spec.signals.model)
    queries = tuple(
        (query.render(selector=selector, window=rate_window), query, signal)
        for signal, query in queries_for(spec.signals.preset, spec.signals.queries).items()
    )
    gateway = spec.signals.gateway_queue_depth
    if gateway:
        gateway = SignalQuery(gateway).render(selector=selector, window=rate_window)
    return Workload(
        spec=spec,
        generation=generation,
        policy=policy,
        history=history,
        queries=queries,
        gateway_query=gateway,
        learns=learns,
        # what the status said: a restart that lost it rewrote the status every tick
        last_scale_time=(
            old.last_scale_time if old is not None else previous_status.get("lastScaleTime", "")
        ),
    )


@dataclass(slots=True)
class Tick:
    """One workload's view in one tick."""

    workload: Workload
    scale: ScaleView | None = None
    pods: list[PodState] = field(default_factory=list)
    replicas: tuple[Replica, ...] = ()  # the pods as the policy sees them
    health: Health = field(default_factory=Health)
    previous_status: dict[str, Any] = field(default_factory=dict)
    template: dict[str, Any] | None = None  # the target's pod template spec, where known
    placeholders: int | None = None  # the placeholder Deployment's replicas; None: none yet
    target_gone: bool = False  # its scale answered 404: deleted, or renamed in the spec
    buffers: bool = False  # the CapacityBuffer CRD is installed: headroom goes there
    buffer: int | None = None  # its CapacityBuffer's replicas; None: none yet
    headroom: int = 0  # the replicas' worth of capacity to keep ahead, NodePool limits applied
    scheduled: str = ""  # which scheduled windows raised the count this tick

    def note(self, **changes: str) -> None:
        """Record a problem (or a NodePool's answer) in this tick's health."""
        self.health = dataclasses.replace(self.health, **changes)
