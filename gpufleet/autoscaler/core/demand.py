"""One tick's sizing for the `gpufleet` policy: each term's replicas (`Demand`), and the
sentence that explains a decision by them.

`size` turns an observation, the capacity estimate and the SLO feedback's credit into the
terms of `gpufleet_policy`'s module doc (items 1-3: the steady demand with its backlog,
the usual peak, the reserve, a surge, and the placeholders), and says whether the ready
replicas carry a crowd; the prompt tail's floor (item 4) comes in sized. The policy picks
the term that binds, then smooths and limits it. Pure.
"""

import math
from dataclasses import dataclass

from gpufleet.autoscaler.core import paid_nodes
from gpufleet.autoscaler.core.binding import Term, binding
from gpufleet.autoscaler.core.capacity import CapacityEstimate
from gpufleet.autoscaler.core.forecast import RateForecast, forecast_rate
from gpufleet.autoscaler.core.gpufleet_settings import GpufleetSettings
from gpufleet.autoscaler.core.observation import Observation, ReplicaState, Series
from gpufleet.autoscaler.core.policy import Reason
from gpufleet.autoscaler.core.workload import WorkloadConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class Demand:
    """One tick's sizing, in requests/s and replicas; what the message reports."""

    capacity: CapacityEstimate
    tokens_per_request: float | None  # the history's mean prompt (`capacity`)
    per_replica_rps: float  # sustained, learned, at 100% utilization, x `feedback`
    feedback: float  # the SLO feedback's credited / learned ratio (`slo_feedback`)
    forecast: RateForecast  # over the replica lead time
    queue: float
    backlog_rps: float  # queue / backlog_drain_seconds
    # The queue a new node's replicas would meet (`backlog`), where the ask needed a new
    # node for a backlog; None where the nodes paid for held it.
    backlog_left: float | None
    burst_window_seconds: float  # the averaging window whose peak sized `burst`
    burst_rps: float  # that peak, discounted by the SLO slack
    # Replicas for max(level, forecast) + backlog, with headroom; beyond the nodes paid
    # for, only for the backlog left when a new node's replicas serve.
    stable: int
    burst: int  # replicas for the usual peaks within the SLO, with headroom
    reserve: int  # replicas for reserve_ratio x the base rate
    tail: int  # a scale-down's floor for the prompt tail's waits (`prompt_tail`)
    # The newest sample needs more than the replicas asked for (`surge` may still be 0: no
    # idle paid GPUs to take).
    surges: bool
    # Replicas for the newest sample within the SLO, capped at the idle paid GPUs unless it
    # panics; 0 when that is no more than the replicas asked for.
    surge: int
    panic: bool  # the surge needs `panic_ratio` x the ready replicas
    placeholders: int  # replicas for the sustained rate at the node lead, with headroom
    absorbed: bool  # the ready replicas carry a crowd (`absorbed_crowd_ratio`)
    # The replicas standing x the fall of the credit a pressure sample shrank this tick
    # (`pressure_step`); 0 on other ticks.
    feedback_step: int = 0

    def candidates(self) -> dict[Term, int]:
        """Each sizing term's replicas; a new term reports itself by adding its entry."""
        return {
            Term.FORECAST: self.stable,
            Term.USUAL_PEAK: self.burst,
            Term.RESERVE: self.reserve,
            Term.SURGE: self.surge,
            Term.SLO_FEEDBACK: self.feedback_step,
        }

    @property
    def raw(self) -> int:
        return binding(self.candidates())[1]


def size(
    obs: Observation,
    *,
    settings: GpufleetSettings,
    workload: WorkloadConfig,
    est: CapacityEstimate,
    tpr: float | None,
    feedback: float,
    arrivals_ok: bool,
    placeholders: int,
    tail: int,
    node_waits: bool,
) -> Demand:
    """What the workload needs: `est` is the capacity estimate at the history's mean
    prompt `tpr`, `feedback` the SLO feedback's credit on it (`slo_feedback`),
    `arrivals_ok` whether the arrival rate is fresh (stale, it sizes on none),
    `placeholders` the placeholder replicas the last decision asked for (their GPUs are
    not idle), `tail` the prompt tail's floor (`prompt_tail`), and `node_waits` whether a
    wait for a new node has started (a carried crowd's keeps going at a higher load)."""
    s, w = settings, workload
    learned = max(1e-9, est.per_replica_rps(tpr))
    unit = learned * feedback
    prefill = max(unit, feedback * est.prompt_tokens_per_second / tpr if tpr else unit)
    grow = 1.0 + s.headroom
    arrivals = obs.arrival_rate if arrivals_ok else Series()
    waiting = obs.queue_depth.latest()  # None: not known
    queue = waiting or 0.0
    ready = obs.count(ReplicaState.READY)
    fc = _forecast(obs, arrivals, settings=s, workload=w, waiting=waiting, ready_rps=ready * unit)
    slack = s.burst_slo_share * w.slo_ttft_seconds
    window, burst_rps = max(
        ((L, peak * L / (L + slack)) for L, peak in fc.peaks), key=lambda p: p[1]
    )
    backlog = queue / s.backlog_drain_seconds
    paid = paid_nodes.paid_replicas(obs, w, placeholders=placeholders)
    stable, left = _steady(
        obs,
        w,
        settings=s,
        level=max(fc.level, fc.predicted),
        queue=queue,
        unit=unit,
        grow=grow,
        paid=paid,
    )
    surges, surge, panic = _surge(
        obs,
        arrivals,
        fc=fc,
        settings=s,
        paid=paid,
        ready=ready,
        grow=grow,
        prefill=prefill,
        slack=slack,
    )
    return Demand(
        capacity=est,
        tokens_per_request=tpr,
        per_replica_rps=unit,
        feedback=feedback,
        forecast=fc,
        queue=queue,
        backlog_rps=backlog,
        backlog_left=left,
        burst_window_seconds=window,
        burst_rps=burst_rps,
        stable=stable,
        burst=math.ceil(burst_rps * grow / prefill),
        reserve=math.ceil(fc.base * s.reserve_ratio / unit),
        tail=tail,
        surges=surges,
        surge=surge,
        panic=panic,
        placeholders=math.ceil(fc.sustained * s.placeholder_share * grow / unit),
        absorbed=not panic
        and carries(
            fc,
            s,
            waiting=waiting,
            serving=ready * learned,
            slo=w.slo_ttft_seconds,
            node_waits=node_waits,
        ),
    )


def _forecast(
    obs: Observation,
    arrivals: Series,
    *,
    settings: GpufleetSettings,
    workload: WorkloadConfig,
    waiting: float | None,
    ready_rps: float,
) -> RateForecast:
    """The arrival rate over the replica lead time (a cold start plus one tick), and the
    sustained rate over the placeholders' (node provisioning more)."""
    s, w = settings, workload
    lead = w.cold_start_seconds + s.interval_seconds
    # What waits clears within the SLO at the ready replicas' rate (unknown: it does not).
    clears = waiting is not None and waiting <= ready_rps * w.slo_ttft_seconds
    return forecast_rate(
        arrivals.times,
        arrivals.values,
        now=obs.now,
        horizon_seconds=lead,
        settings=s.forecast,
        sustained_horizon_seconds=lead + w.node_provision_seconds,  # placeholders' lead
        quiet=waiting == 0,  # a crowd is over only once nothing waits
        # ... or, a one-off crowd, once what waits clears within the SLO
        clearing=clears,
    )


def _steady(
    obs: Observation,
    workload: WorkloadConfig,
    *,
    settings: GpufleetSettings,
    level: float,
    queue: float,
    unit: float,
    grow: float,
    paid: int,
) -> tuple[int, float | None]:
    """(stable, left): replicas for the `level` plus the queue's drain at `unit` each, with
    headroom; beyond the `paid` replicas' nodes, only for the queue left when a new node's
    replicas serve (`left`; None where the nodes paid for hold the need)."""
    s = settings
    stable = math.ceil((level + queue / s.backlog_drain_seconds) * grow / unit)
    if not (stable > paid and queue > 0 and paid_nodes.per_node(workload) >= 1):
        return stable, None
    # Replicas on a new node drain only what is left of the queue when they serve.
    # (Where the pool's nodes are unknown, so is whether a replica needs a new one.)
    left = paid_nodes.queue_left(
        obs,
        workload,
        interval_seconds=s.interval_seconds,
        queue=queue,
        level=level,
        unit=unit,
        paid=paid,
    )
    late = math.ceil((level + left / s.backlog_drain_seconds) * grow / unit)
    return min(stable, max(paid, late)), left


def _surge(
    obs: Observation,
    arrivals: Series,
    *,
    fc: RateForecast,
    settings: GpufleetSettings,
    paid: int,
    ready: int,
    grow: float,
    prefill: float,
    slack: float,
) -> tuple[bool, int, bool]:
    """(surges, surge, panic): whether the newest sample needs more than the replicas
    asked for; the replicas it needs within the SLO (with headroom, at the prefill rate), capped
    at the idle paid GPUs unless it panics, 0 when that is no more than those asked for;
    and whether it needs `panic_ratio` x the ready replicas."""
    s = settings
    # The newest sample's span is one scrape: the spacing of the last two samples.
    times = arrivals.times
    newest = times[-1] - times[-2] if len(times) > 1 else s.forecast.peak_averaging_seconds[0]
    surge = math.ceil(fc.latest * newest / (newest + slack) * grow / prefill)
    current = obs.current_replicas
    surges = surge > current
    panic = surges and surge >= s.panic_ratio * max(1, ready)
    if not panic:
        idle = paid - current if s.surge_on_idle_gpus else 0
        surge = min(surge, current + idle)
        if surge <= current:
            surge = 0
    return surges, surge, panic


def carries(
    fc: RateForecast,
    s: GpufleetSettings,
    *,
    waiting: float | None,
    serving: float,
    slo: float,
    node_waits: bool,
) -> bool:
    """Whether replicas serving `serving` requests/s carry a crowd: what waits
    (`waiting`; unknown: it does not) clears within the `slo` at that rate, and the
    level is at least `absorbed_crowd_ratio` x a base rate above zero (a zero base is
    traffic waking from quiet, not a crowd) at no more than `absorbed_max_load` of that
    rate to start a wait for a node, and no more than `absorbed_keep_load` to keep one
    going (`node_waits`): a level that crept past the room to spare bought the node at
    once, which arrived after the crowd it was bought for.

    `serving` is the ready replicas' learned rate, not the SLO feedback's credit:
    carrying is throughput. The credit corrects for latency (a short request behind a
    long prompt's prefill), which a node that arrives after the crowd does not help
    either. Credited, a fleet whose feedback sat at its floor carried no crowd: mix x4 at
    0.99 (x0.25) bought 8 nodes for a 3-minute crowd, which arrived after it
    (BENCHMARKS.md)."""
    if s.absorbed_crowd_ratio <= 0 or fc.base <= 0:
        return False
    if waiting is None or waiting > serving * slo:
        return False
    top = s.absorbed_keep_load if node_waits else s.absorbed_max_load
    return s.absorbed_crowd_ratio * fc.base <= fc.level <= top * serving


def up_reason(d: Demand, term: Term) -> Reason:
    """The reason for a scale-up that `term` bound (the reasons predate the terms: a burst
    or a surge is `Burst`, the forecast is `Backlog`, `Forecast` or `ScaleUp`)."""
    if term is Term.SLO_FEEDBACK:
        return Reason.SLO_FEEDBACK
    if term is not Term.FORECAST:
        return Reason.BURST
    if d.backlog_rps > max(d.forecast.level, d.forecast.predicted):
        return Reason.BACKLOG
    if d.forecast.predicted > d.forecast.level:
        return Reason.FORECAST
    return Reason.SCALE_UP


def explain(
    d: Demand, s: GpufleetSettings, *, current: int, desired: int, reason: Reason, term: Term
) -> str:
    """One sentence with the numbers behind the decision, for events and logs."""
    fc = d.forecast
    est = d.capacity
    learned = f"learned, {est.samples} samples" if est.learned else f"prior, {est.samples} samples"
    if d.feedback != 1.0:
        learned += f"; x{d.feedback:.2f} by SLO feedback"
    learned_rps = d.per_replica_rps / d.feedback
    drain = d.queue / max(1e-9, max(desired, 1) * d.per_replica_rps)
    peak = dict(fc.peaks).get(d.burst_window_seconds, 0.0)
    surge = ""
    if d.surge:
        surge = f", {d.surge} for a surge" + (" (panic)" if d.panic else " on idle paid GPUs")
    if d.reserve:
        surge = f", {d.reserve} in reserve" + surge
    if d.tail:
        surge = f", {d.tail} for the prompt tail" + surge
    if d.feedback_step:
        surge = f", {d.feedback_step} for the SLO feedback's step" + surge
    left = (
        ""
        if d.backlog_left is None
        else f" ({d.backlog_left:.0f} left when a new node would serve)"
    )
    text = (
        f"arrivals {fc.latest:.1f}/s (level {fc.level:.1f}/s, usual peak {peak:.1f}/s over "
        f"{d.burst_window_seconds:g} s) forecast {fc.predicted:.1f}/s in "
        f"{fc.horizon_seconds:.0f} s lead; capacity {learned_rps:.1f}/s per replica "
        f"({learned}); backlog {d.queue:.0f} drains in {drain:.1f} s{left}; needs "
        f"{d.stable} steady, {d.burst} for bursts{surge} at headroom {s.headroom:g}: "
        f"{current} -> {desired}"
    )
    if current < desired < d.raw and not est.learned:
        text += " (capped until capacity is learned)"
    elif reason is Reason.RATE_LIMITED and desired < current and not est.learned:
        text += (
            f" (gives back at most {s.unlearned_max_scale_down_share:.0%} of the replicas per "
            "step until capacity is learned)"
        )
    elif current < desired < d.raw and math.isfinite(s.max_scale_up_ratio):
        text += (
            f" (capped at {s.max_scale_up_ratio:.2f}x the ready replicas: more would serve "
            "only after the lead time)"
        )
    if reason is Reason.STABILIZED and term is Term.SLO_FEEDBACK:
        text += (
            f" (held: the SLO feedback saw queue waits within the last "
            f"{s.scale_down_window_seconds:g} s)"
        )
    elif reason is Reason.STABILIZED:
        text += f" (held for the {s.scale_down_window_seconds:g} s scale-down window)"
    elif reason is Reason.RATE_LIMITED and desired <= current:
        text += f" (held for the {s.scale_down_step_seconds:g} s step delay)"
    return text
