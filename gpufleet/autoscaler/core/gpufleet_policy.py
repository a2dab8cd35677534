"""`gpufleet`, our scaling policy: learned capacity, forecast demand, a burst path, a slow way down.

Every tick it turns late signals into a replica count:

1. **Capacity.** Requests/s (and prompt tokens/s) one replica sustains, learned online
   from saturated samples (`capacity`), behind a conservative prior until learned; while
   unlearned, a scale-up is capped at `unlearned_max_scale_up_ratio` x the ready replicas
   (2x; up to 4x above a 99% target: `knob`), and always at `max_scale_up_ratio`, which
   only targets below 90% set; below 60% a scale-up takes a new node only once the need
   for it has lasted the node lead time (`new_node_waits_lead`).
   Closed-loop SLO feedback (`slo_feedback`) scales the learned rate by what the service
   shows: when the requests' mean wait for prefill (TTFT minus prefill time) exceeds
   `feedback.wait_share` (5%) of the SLO, each replica is credited less at once (down to
   a quarter; less far below a 90% target, not at all at 50%: `knob`), and the
   credit comes back slowly while the wait stays low; pressure while replicas start, at
   max_replicas or while a new node waits changes nothing. Above a 99% target a sample
   that shrinks the credit also asks for the replicas standing x its fall
   (`pressure_step`: other terms may hold the fleet above what the credit asks for). As
   the latency probe it also credits more than the estimate while p90 TTFT stays within
   half the SLO at load (half the credited rate; 70% above a 99% target: `knob`), so a
   fleet that never saturates still shrinks toward its capacity.
2. **Steady demand.** The arrival rate forecast over the lead time (cold start plus one
   tick, from the newest sample's age; `forecast`), plus the backlog that must drain within
   `backlog_drain_seconds`. Replicas = demand x (1 + headroom) / learned rate. Beyond the
   nodes paid for (where the pool's node size is known), the backlog is the one a new
   node's replicas would meet (`backlog`): what is left once the replicas already starting
   have served, so a deep queue after a crowd buys no node that arrives after it drained.
   A crowd the ready replicas carry (a jump to `absorbed_crowd_ratio` x the base rate,
   served at up to `absorbed_max_load` of their learned rate, what waits clearing within
   the SLO at it, no panic) buys no new node until it has lasted the node lead time: what
   arrives fits them with room to spare, and a shorter crowd is over before the node
   serves. Once waiting, up to `absorbed_keep_load` of their rate keeps the wait going.
3. **Burst path.** Bursty traffic needs standing capacity: a burst shorter than a cold
   start is over before replicas asked for at its sight serve. For each averaging window
   L (5 s to 60 s; `forecast`) the usual peak (a high quantile of the per-minute highest
   mean rates of the last half hour) must be prefilled within L + `burst_slo_share` x SLO
   at the learned prefill rate, with the same headroom. A surge is different: when the
   newest 5-s sample alone needs more than the replicas asked for, the policy asks at
   once for what fits on GPUs idle on nodes already paid for; when it needs
   `panic_ratio` x the ready replicas, for all of it, and panics (Knative's KPA). Either
   way the surge's replicas stay until `panic_hold_seconds` after the last sample that
   asked for more, and a panic holds every replica as long. The GPUs idle on nodes paid
   for are those the replicas' and placeholders' nodes leave if packed. A wait for a node
   (a carried crowd's, or `new_node_waits_lead`'s) also counts the free GPUs the
   observation shows on its pool's ready nodes: a node emptied a while ago is billed
   until it is removed, and a replica placed there starts without a node lead.
4. **Scale-down.** Only to the highest steady recommendation of the last
   `scale_down_window_seconds`, never below the burst path, a surge's hold or the prompt
   tail's replicas, at most one step per `scale_down_step_seconds`: a replica given back
   costs a cold start to get back. The prompt tail (`prompt_tail`) is what a fleet sized
   on throughput misses: with long prompts, a short request routed behind a long prefill
   waits for it, and those waits fall as 1/N with the replicas N whatever the load. From
   vLLM's prompt-length histogram the policy keeps the replicas that hold them to
   `prompt_tail_miss_share` of the requests: without it, a warm fleet on long-context
   traffic gave back half its replicas on the rate its throughput allows, missed in the
   SLO, and took them back a cold start (and a node) later.
   Until capacity is learned a step gives back at most `unlearned_max_scale_down_share` of
   the replicas: the prior that caps a scale-up then is no surer about a scale-down. Not at
   all while the SLO feedback credits less than the learned rate and has seen pressure
   within that window: the credit is still being corrected, and between two waits it
   recovers and sizes the fleet a node smaller, which the next wait takes back after a cold
   start, while the node given up is billed through its idle time anyway. And the nodes a
   scale-up took back within the window of giving them back (`node_flaps`) are not given
   back for `node_flap_hold_seconds`: that traffic has shown they come back.
5. **The workload's limits.** Every step stays within the rate policies of the workload's
   `behavior` (Pods/Percent per period, selectPolicy, Disabled: HPA's semantics, from
   `behavior`), as an operator who set them expects of any policy. Its stabilization
   windows are the HPA's smoothing, not limits; this policy smooths with 2-4 instead.
6. **Zero.** With min_replicas 0 it activates on any arrival or queue and deactivates after
   `idle_seconds_to_zero` with no arrivals, queue or requests in flight.

Missing or stale signals never scale down: the policy holds (or only scales up on the
signals it has). `Decision.headroom` asks for warm placeholder replicas for the sustained
rate (`RateForecast.sustained`, bursts left out) the trend predicts within node
provisioning plus cold start, so the nodes are there when replicas are. Pure: no clock
(`obs.now`), no I/O; the state is the learned capacity, the recommendation window, the
surge's hold, the panic, the last placeholders, the idle timestamp, the SLO feedback and
the node flaps.
"""

import dataclasses
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.autoscaler.core import knob, node_flaps, prompt_tail
from gpufleet.autoscaler.core.backlog import queue_at
from gpufleet.autoscaler.core.behavior import Bounds, History, limit_with_behavior, record_scale
from gpufleet.autoscaler.core.binding import Term, binding
from gpufleet.autoscaler.core.capacity import (
    CapacityEstimate,
    CapacitySettings,
    CapacityState,
    estimate,
    learn,
    tokens_per_request,
)
from gpufleet.autoscaler.core.forecast import ForecastSettings, RateForecast, forecast_rate
from gpufleet.autoscaler.core.observation import Observation, ReplicaState, Series
from gpufleet.autoscaler.core.policy import Decision, Reason
from gpufleet.autoscaler.core.slo_feedback import (
    FeedbackSettings,
    FeedbackState,
    clamp,
    newest_sample,
    update,
)
from gpufleet.autoscaler.core.workload import ShapeKind, WorkloadConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class GpufleetSettings:
    """Every constant of the policy. The knob users set is a target attainment
    (`WorkloadConfig.target_attainment`), which `knob.apply` maps onto these.

    Defaults were tuned once for both Azure 2023 traces (bursty code, smooth conversation)
    at 1x and 10x in the simulator. The comments say why each is where it is; the
    measurements behind them are in BENCHMARKS.md ("Autoscaler core and simulator").
    """

    # The main knob (the sweep varies it): spare capacity over the predicted demand; 0.4
    # runs replicas at ~70% of their learned rate, the knee of the bursty trace's front.
    # 5-s Poisson noise at a few requests/s per replica is about 20%, and the usual peak
    # leaves the busiest minutes to this margin.
    headroom: float = 0.4
    # 2 s (Knative's tick): samples arrive every 5 s, 1.5 s late; a 2-s tick acts on a new
    # sample within 2 s of it becoming visible (issue 4 asks for <= 5 s from a burst).
    interval_seconds: float = 2.0
    # Queued requests must drain within this long on top of the arrivals: about a cold
    # start, since replicas asked for now serve only then.
    backlog_drain_seconds: float = 60.0
    # The share of the TTFT SLO a burst's requests may spend queueing: a burst of L seconds
    # must be prefilled within L + share x SLO. 1.0 spends it all on queueing; `headroom`
    # (applied to bursts too) covers the last prefill and uneven routing. Half the SLO
    # bought little attainment for many more node-hours.
    burst_slo_share: float = 1.0
    # A signal whose newest sample is older than this is missing: three scrapes lost.
    stale_after_seconds: float = 20.0
    # Panic when the newest sample needs this many times the ready replicas (KPA's 2.0): size
    # for it at once, new nodes included. It catches a surge that lasts, a cold start sooner
    # than the steady path would. A lower ratio panics on bursts that are over before a
    # cold start, paying for nodes that serve nothing.
    panic_ratio: float = 2.0
    # Below the panic ratio, a newest sample that needs more than the replicas asked for is
    # still met at once, but only on GPUs that are idle on nodes already paid for
    # (`WorkloadConfig.gpus_per_node`; never a new node, never a placeholder's GPU): the
    # first tick a burst is visible asks for what it costs nothing to ask for. False waits
    # for the panic ratio.
    surge_on_idle_gpus: bool = True
    # A surge's replicas are kept this long after the last sample that asked for more (KPA's
    # stable window; about a cold start, so they serve before the ordinary scale-down
    # judges them), and a panic holds every replica as long.
    panic_hold_seconds: float = 60.0
    # Standing reserve: replicas for `reserve_ratio` x the base rate (`RateForecast.base`)
    # at the learned per-replica rate, whatever the history shows. A crowd shorter than
    # the lead time (node boot plus cold start) is served only by what stands when it
    # starts, and a history without one has no usual peak for it; `headroom` cannot buy
    # it once whole nodes round the need up (issue 17). 0: none; the target-attainment
    # knob (`knob`) raises it above a 99% target.
    reserve_ratio: float = 0.0
    # What the waits behind long prefills may cost (`prompt_tail`), as the share of requests
    # the model of them predicts to miss: a scale-down stops at the replicas that hold them
    # to it (at the prompt window's mean rate). A floor, not a reason to scale up: the
    # model counts every newcomer routed to a replica in a long prefill, and a router that
    # balances requests in flight sends fewer there once one waits, so it predicts 10-30x
    # the misses runs show, and as a term that bought replicas it cost more than the HPA
    # points it reached (BENCHMARKS.md). As a floor it keeps what the warm start or the SLO
    # feedback stood from being given back on a throughput estimate that does not see those
    # waits. 0.06 held longctx's fleet where the replicas' latency needs it (tuning seeds);
    # the knob (`knob`) divides it by the target's nines less one above 99%, and turns it
    # off below. 0: off.
    prompt_tail_miss_share: float = 0.06
    # The prompt mix it sizes on: the prompts of the last this many seconds.
    prompt_tail_window_seconds: float = 1800.0
    # Until capacity is learned, scale up to at most this many times the replicas serving
    # (at least +4): the prior is deliberately low, and a fleet sized on it alone would
    # launch nodes that the first saturated samples show are not needed. The knob (`knob`)
    # raises it above a 99% target, where a ramp that doubles once per node lead time
    # lost requests that HPA's ramp served (diurnal x10).
    unlearned_max_scale_up_ratio: float = 2.0
    # And until then a scale-down step gives back at most this share of the replicas: the
    # prior is low for a chat-sized request but not for a heavy prompt tail (mix x4:
    # 4.7/s credited, about 1.1/s served), and a warm fleet of 40 cut to 8 on it alone took
    # its nodes back within minutes.
    unlearned_max_scale_down_share: float = 0.5
    # Scale up to at most this many times the ready replicas (at least +4), learned or not:
    # replicas asked for beyond it serve only after a cold start (and a node's boot), by
    # when a crowd shorter than that lead is over, and nodes bill from launch. Unbounded
    # (inf) from a 90% target up; the knob (`knob`) sets it only below, where paying for
    # capacity that arrives after the crowd is the wrong trade.
    max_scale_up_ratio: float = math.inf
    # A scale-up that needs a new node waits until the need for it has lasted the node lead
    # time (node provisioning plus a cold start), taking only the GPUs idle on nodes paid
    # for until then: a crowd shorter than that is over before a new node serves it, and
    # the node bills from launch (no placeholders meanwhile either: they would launch it).
    # False from a 60% target up; the knob (`knob`) sets it only below, where paying for a
    # node that arrives after the crowd is the wrong trade.
    new_node_waits_lead: bool = False
    # A crowd the ready replicas carry waits for a new node the same way, at any target: a
    # level of `absorbed_crowd_ratio` x the base rate (`RateForecast.base`: a jump, not a
    # ramp) that they serve at no more than `absorbed_max_load` of their learned rate (not
    # the SLO feedback's credit: carrying is throughput), what waits clearing within the
    # SLO at that rate, and no panic. What arrives fits them with room to spare then, and a
    # crowd shorter than the node lead time is over before the node serves; a crowd they
    # do not carry buys it at once. Once the wait has started, a level up to
    # `absorbed_keep_load` of their rate keeps it: one creeping past 80% bought the node at
    # once, which arrived after a crowd shorter than the lead time (flash-short), and all
    # of their rate kept a longer crowd waiting in a queue that grew (flash-long x4 at 99%:
    # -0.9 points; 90%: -0.16). 4x, 80% and 90% were chosen on the tuning seeds (issue
    # 17). 0: never.
    absorbed_crowd_ratio: float = 4.0
    absorbed_max_load: float = 0.8
    absorbed_keep_load: float = 0.9
    # A pressure sample that shrinks the SLO feedback's credit also asks for the replicas
    # standing x the credit's fall (bound as "SLO feedback"). Where other terms hold the
    # fleet above what the credit asks for, a shrinking credit asks for nothing until it
    # falls below them, and then for a jump; the step acts on each sample at once, and the
    # replicas it starts hold the next (`slo_feedback`). False here; the knob (`knob`) sets
    # it above 99% only: at 99% it bought longctx x10's default a node for its tail, and
    # rounded to whole nodes it matched fewer HPA points (tuning seeds; BENCHMARKS.md).
    pressure_step: bool = False
    # Scale down only to the highest steady recommendation in this window (the HPA default).
    scale_down_window_seconds: float = 300.0
    # At most one scale-down step per this many seconds: lets a step's effect show in the
    # signals (one scrape plus the pipeline) before the next.
    scale_down_step_seconds: float = 30.0
    # After a node given back was taken back within the scale-down window (a node flap,
    # `node_flaps`), the nodes taken back are not given back for this long: the half hour
    # of the forecast's peak memory. 0: never held.
    node_flap_hold_seconds: float = 1800.0
    # Scale to zero (min_replicas 0 only) after this long with no arrivals, queue or work.
    idle_seconds_to_zero: float = 300.0
    # Placeholders (`Decision.headroom`) cover the sustained rate forecast within node
    # provisioning plus cold start; False asks for none (a cluster without placeholder
    # pods). Not the 30-s level: after a burst it launched nodes that arrived when the
    # burst was over.
    placeholders: bool = True
    # The share of that sustained rate placeholders cover: 1 from a 90% target up; the knob
    # (`knob`) lowers it below, where nodes launched for a forecast that a crowd inflated
    # arrive after it and bill for nothing.
    placeholder_share: float = 1.0
    # Fill the idle GPUs on the nodes the need already occupies (`WorkloadConfig.
    # gpus_per_node`) with warm replicas that absorb the next burst: desired is rounded up to
    # whole nodes, and nodes bill every GPU, so they cost nothing. It never keeps an extra
    # node (the rounding stays within the nodes the unrounded need requires). Off by
    # default: only right where no other workload could use those GPUs.
    fill_nodes: bool = False
    # Closed-loop SLO feedback and the latency probe (`slo_feedback`): observed prefill
    # wait and p90 TTFT scale the learned per-replica rate, down quickly on pressure, up
    # slowly while the SLO passes at load.
    feedback: FeedbackSettings = field(default_factory=FeedbackSettings)
    capacity: CapacitySettings = field(default_factory=CapacitySettings)
    forecast: ForecastSettings = field(default_factory=ForecastSettings)


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


class GpufleetPolicy:
    """The `gpufleet` policy for one workload; keeps its own history, so one per run."""

    name = "gpufleet"

    def __init__(self, workload: WorkloadConfig, *, settings: GpufleetSettings | None = None):
        self.workload = workload
        self.settings = settings or GpufleetSettings()
        if workload.target_attainment is not None:
            # The workload's target owns every setting the knob moves.
            self.settings = knob.apply(self.settings, workload.target_attainment)
        if self.settings.headroom < 0:
            raise ValueError("headroom must be >= 0")
        self.interval_seconds = self.settings.interval_seconds
        self._capacity = CapacityState()
        # (time, steady recommendation), each larger than every later one: the first is the
        # window's highest, and a newer, larger one retires those it outlasts.
        self._window: deque[tuple[float, int]] = deque()
        self._surge_until = -math.inf  # a surge's replicas are kept until then
        self._surge_held = 0  # the most replicas a surge asked for while it lasts
        self._panic_until = -math.inf  # no scale-down at all until then
        self._placeholders = 0  # the last decision's headroom: GPUs they hold are not idle
        self._last_change = -math.inf  # when desired last moved (for the step delay)
        self._last_active: float | None = None  # last arrival, queue or work
        self._desired: int | None = None
        self._node_need_since: float | None = None  # since when a scale-up needs a new node
        self._scale_history = History()  # scale events, for the workload's rate policies
        self._feedback = FeedbackState()  # credited / learned per-replica rate
        self._flaps = node_flaps.NodeFlaps()  # nodes given back and taken back
        self._prompts = prompt_tail.PromptMix(
            window_seconds=self.settings.prompt_tail_window_seconds
        )

    def learned(self) -> dict[str, float]:
        """What the policy has learned, as plain numbers (the capacity learner's sums and
        the latency probe's credit): the GPUAutoscaler's status keeps them, so a restarted
        or failed-over controller resumes warm instead of relearning."""
        state = dataclasses.asdict(self._capacity)
        out = {k: float(v) for k, v in state.items() if math.isfinite(v)}
        out["probe"] = self._feedback.ratio
        return out

    def resume(self, learned: Mapping[str, Any]) -> None:
        """Start from what `learned()` gave; unknown keys and non-numbers are ignored."""
        names = {f.name for f in dataclasses.fields(CapacityState)}
        values: dict[str, Any] = {
            k: float(v)
            for k, v in learned.items()
            if k in names
            and isinstance(v, int | float)
            and not isinstance(v, bool)
            and math.isfinite(v)
        }
        if "samples" in values:
            values["samples"] = int(values["samples"])
        self._capacity = dataclasses.replace(CapacityState(), **values)
        probe = learned.get("probe")
        if isinstance(probe, int | float) and math.isfinite(probe):
            ratio = clamp(float(probe), self.settings.feedback)
            self._feedback = FeedbackState(ratio=ratio)

    def decide(self, obs: Observation) -> Decision:
        s, now = self.settings, obs.now
        current = obs.current_replicas
        arrivals_ok = _fresh(obs.arrival_rate, now, s.stale_after_seconds)
        queue_ok = _fresh(obs.queue_depth, now, s.stale_after_seconds)
        if not arrivals_ok and not queue_ok:
            message = (
                f"arrival rate and queue depth missing or older than "
                f"{s.stale_after_seconds:g} s: holding {current}"
            )
            held = self.workload.clamp(current)
            message += f"; bound by {Term.MISSING}"
            return self._finish(
                obs, held, Reason.MISSING_METRICS, message, headroom=0, term=Term.MISSING
            )
        tpr = tokens_per_request(
            obs,
            memory_seconds=s.forecast.peak_memory_seconds,
            scrape_seconds=s.forecast.peak_averaging_seconds[0],  # the shortest is one scrape
        )
        self._capacity = learn(
            self._capacity,
            obs,
            s.capacity,
            batch_slots=self.workload.batch_slots,
            tokens_per_request=tpr,
        )
        demand = self._demand(obs, tpr, arrivals_ok=arrivals_ok)
        credit = self._feedback.ratio
        self._update_feedback(obs, demand)
        demand = self._pressure_step(obs, demand, credit)
        active = self._note_activity(obs)
        self._remember(obs, demand)
        desired, reason, term = self._target(obs, demand)
        if not (arrivals_ok and queue_ok) and desired < current:
            desired, reason, term = current, Reason.MISSING_METRICS, Term.MISSING
        zeroed, reason = self._zero(obs, desired, reason, active=active)
        if reason in (Reason.ACTIVATE, Reason.DEACTIVATE) or zeroed != desired:
            term = Term.ZERO
        desired = zeroed
        bounded = self.workload.clamp(desired)
        if bounded != desired or (0 < demand.raw < bounded == self.workload.min_replicas):
            desired, reason, term = bounded, Reason.BOUNDED, Term.FLOOR
        needed, desired = desired, self._fill_paid_nodes(desired)
        previous = current if self._desired is None else self._desired
        limited, note = self._rate_limit(now, previous, desired)
        desired = self._node_flap_hold(now, previous, limited)
        flap_held = desired != limited
        # The message explains the policy's own reason; the behavior's limit is added after.
        message_reason = reason
        if flap_held:
            reason, term = Reason.STABILIZED, Term.BEHAVIOR
        elif note:
            reason, term = Reason.RATE_LIMITED, Term.BEHAVIOR
        headroom = max(0, min(demand.placeholders, self.workload.max_replicas) - desired)
        if not s.placeholders or desired == 0 or self._waits_for_node(obs):
            headroom = 0  # placeholders would launch the node the wait holds back
        message = _message(demand, current, desired, message_reason, s, term=term)
        if desired > needed:
            message += f" (needs {needed}; filled to {desired}: idle GPUs on nodes paid for)"
        if current <= desired < demand.raw and self._waits_for_node(obs):
            carried = "the ready replicas carry this crowd; " if demand.absorbed else ""
            message += (
                f" ({carried}no new node until the need has lasted the node lead time, "
                f"{self.workload.node_lead_seconds:g} s: a shorter crowd is over before one serves)"
            )
        if flap_held:
            message += (
                f" (held: a node given back was taken back within "
                f"{s.scale_down_window_seconds:g} s at {self._flaps.flapped:.0f} s; its "
                f"{self._flaps.level} nodes are not given back for "
                f"{s.node_flap_hold_seconds:g} s after that)"
            )
        elif note:
            message += f" (the workload's behavior allows {desired}: {note})"
        message += f"; bound by {term}"
        self._scale_history = record_scale(
            self._scale_history,
            now=now,
            previous=previous,
            new=desired,
            behavior=self.workload.behavior,
        )
        return self._finish(obs, desired, reason, message, headroom=headroom, term=term)

    def _rate_limit(self, now: float, previous: int, desired: int) -> tuple[int, str]:
        """`desired` within the workload's behavior rate policies (Pods/Percent per period,
        selectPolicy, Disabled), counted from `previous`, the last decision, as the HPA
        counts from the scale it last set; the policy that bound, or "". Activation from
        and deactivation to zero are the zero path's, which no rate policy holds."""
        if previous == 0 or desired == 0:
            return desired, ""
        w = self.workload
        n = limit_with_behavior(
            self._scale_history,
            now=now,
            current=previous,
            stabilized=desired,
            behavior=w.behavior,
            bounds=Bounds(w.min_replicas, w.max_replicas),
        )
        return n.replicas, (n.limit_note if n.limited_by == "rate" else "")

    def _fill_paid_nodes(self, desired: int) -> int:
        """`desired` rounded up to whole nodes' worth of replicas (whole-GPU shapes only)."""
        per = self._replicas_per_node()
        if not self.settings.fill_nodes or per < 1 or desired <= 0:
            return desired
        return min(self.workload.max_replicas, math.ceil(desired / per) * per)

    def _node_flap_hold(self, now: float, previous: int, desired: int) -> int:
        """`desired`, or as many replicas as a step down from `previous` keeps while a node
        flap holds the nodes it took back (`node_flaps`): the fewer of `previous` and those
        nodes' worth. Notes the step taken. Steps to or from zero are the zero path's, and a
        pool of unknown node size has no nodes to count."""
        per = self._replicas_per_node()
        if per < 1 or previous <= 0 or desired <= 0:
            return desired
        s = self.settings
        before, after = math.ceil(previous / per), math.ceil(desired / per)
        held = node_flaps.held_nodes(self._flaps, now=now, hold=s.node_flap_hold_seconds)
        if after < min(before, held):
            desired = min(previous, held * per)
            after = math.ceil(desired / per)
        self._flaps = node_flaps.note(
            self._flaps, now=now, before=before, after=after, window=s.scale_down_window_seconds
        )
        return desired

    def _idle_paid_replicas(self, obs: Observation, *, emptied_nodes: bool = False) -> int:
        """Replicas that fit on the GPUs idle on nodes paid for: those of the nodes that the
        replicas (terminating ones too, until they drain) and placeholders occupy, if
        packed; with `emptied_nodes`, more where the observation shows its pool's ready
        nodes' free GPUs (a node emptied a while ago is billed until it is removed)."""
        per = self._replicas_per_node()
        if per < 1:
            return 0
        held = len(obs.replicas) + self._placeholders
        packed = math.ceil(held / per) * per - held
        if obs.node_free_gpus is None or not emptied_nodes:
            return packed
        g = self.workload.shape.gpus
        return max(packed, sum(free // g for free in obs.node_free_gpus))

    def _queue_left(
        self, obs: Observation, *, queue: float, level: float, unit: float, paid: int
    ) -> float:
        """The queue when replicas asked for now on a new node serve, a node lead from now
        (`backlog.queue_at`): the ready replicas serve until then, each starting one a cold
        start after it got its node, or, still waiting for one, its own node lead after it
        was asked for (no sooner than a cold start from now: it may still be loading), and
        those this tick adds on idle paid GPUs from a cold start.
        Each at what a ready replica completes now, where the replicas report it: with a
        queue they are saturated, and that is their real rate on this traffic's prompts,
        which the learned rate averages over calmer times."""
        w = self.workload
        lead = w.node_lead_seconds
        cold = w.cold_start_seconds + self.settings.interval_seconds
        ready = obs.count(ReplicaState.READY)
        served = obs.completion_rate.latest()
        per = served / ready if ready and served else unit
        arriving = [
            (
                max(r.created + lead - obs.now, cold)
                if r.scheduled_since is None
                else r.scheduled_since + w.cold_start_seconds - obs.now,
                per,
            )
            for r in obs.replicas
            if r.state is ReplicaState.STARTING
        ]
        arriving.append((cold, (paid - obs.current_replicas) * per))
        return queue_at(
            queue,
            arrival_rps=level,
            serving_rps=ready * per,
            arriving=arriving,
            horizon_seconds=lead,
        )

    def _paid_replicas(self, obs: Observation, *, emptied_nodes: bool = False) -> int:
        """Replicas the nodes paid for hold: those asked for, and the idle GPUs' worth."""
        return obs.current_replicas + self._idle_paid_replicas(obs, emptied_nodes=emptied_nodes)

    def _replicas_per_node(self) -> int:
        """Whole-GPU replicas per node of the workload's pool; 0 when unknown or shared."""
        shape = self.workload.shape
        if shape.kind is not ShapeKind.GPU:
            return 0
        return self.workload.gpus_per_node // shape.gpus

    # --- sizing ---

    def _demand(self, obs: Observation, tpr: float | None, *, arrivals_ok: bool) -> Demand:
        """What the workload needs, at the history's mean prompt `tpr`."""
        s, w = self.settings, self.workload
        est = estimate(self._capacity, s.capacity, tokens_per_request=tpr)
        ratio = self._feedback.ratio
        learned = max(1e-9, est.per_replica_rps(tpr))
        unit = learned * ratio
        prefill = max(unit, ratio * est.prompt_tokens_per_second / tpr if tpr else unit)
        grow = 1.0 + s.headroom
        arrivals = obs.arrival_rate if arrivals_ok else Series()
        lead = w.cold_start_seconds + s.interval_seconds
        waiting = obs.queue_depth.latest()  # None: not known
        queue = waiting or 0.0
        ready = obs.count(ReplicaState.READY)
        # What waits clears within the SLO at the ready replicas' rate (unknown: it does not).
        clears = waiting is not None and waiting <= ready * unit * w.slo_ttft_seconds
        fc = forecast_rate(
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
        slack = s.burst_slo_share * w.slo_ttft_seconds
        window, burst_rps = max(
            ((L, peak * L / (L + slack)) for L, peak in fc.peaks), key=lambda p: p[1]
        )
        backlog = queue / s.backlog_drain_seconds
        level = max(fc.level, fc.predicted)
        stable = math.ceil((level + backlog) * grow / unit)
        paid = self._paid_replicas(obs)
        left = None
        if stable > paid and queue > 0 and self._replicas_per_node() >= 1:
            # Replicas on a new node drain only what is left of the queue when they serve.
            # (Where the pool's nodes are unknown, so is whether a replica needs a new one.)
            left = self._queue_left(obs, queue=queue, level=level, unit=unit, paid=paid)
            late = math.ceil((level + left / s.backlog_drain_seconds) * grow / unit)
            stable = min(stable, max(paid, late))
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
        return Demand(
            capacity=est,
            tokens_per_request=tpr,
            per_replica_rps=unit,
            feedback=ratio,
            forecast=fc,
            queue=queue,
            backlog_rps=backlog,
            backlog_left=left,
            burst_window_seconds=window,
            burst_rps=burst_rps,
            stable=stable,
            burst=math.ceil(burst_rps * grow / prefill),
            reserve=math.ceil(fc.base * s.reserve_ratio / unit),
            tail=self._tail(obs, est.prompt_tokens_per_second),
            surges=surges,
            surge=surge,
            panic=panic,
            placeholders=math.ceil(fc.sustained * s.placeholder_share * grow / unit),
            absorbed=not panic
            and self._carries(
                fc,
                waiting=waiting,
                serving=ready * learned,
                slo=w.slo_ttft_seconds,
                node_waits=self._node_need_since is not None,
            ),
        )

    def _tail(self, obs: Observation, prefill_rate: float) -> int:
        """Replicas for the waits behind long prefills at the window's mean rate
        (`prompt_tail`)."""
        share = self.settings.prompt_tail_miss_share
        if share <= 0:
            return 0
        self._prompts.update(obs.prompt_tokens_buckets, obs.now)
        blocking = prompt_tail.blocking_seconds(
            self._prompts.buckets(),
            prefill_tokens_per_second=prefill_rate,
            slo_seconds=self.workload.slo_ttft_seconds,
        )
        return prompt_tail.replicas(self._prompts.rate(), blocking, miss_share=share)

    def _carries(
        self,
        fc: RateForecast,
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
        s = self.settings
        if s.absorbed_crowd_ratio <= 0 or fc.base <= 0:
            return False
        if waiting is None or waiting > serving * slo:
            return False
        top = s.absorbed_keep_load if node_waits else s.absorbed_max_load
        return s.absorbed_crowd_ratio * fc.base <= fc.level <= top * serving

    def _update_feedback(self, obs: Observation, d: Demand) -> None:
        """Fold the newest TTFT sample into the SLO feedback (`slo_feedback`)."""
        ready = obs.count(ReplicaState.READY)
        load = d.forecast.level / max(1, ready)
        loaded = ready > 0 and load >= self.settings.feedback.min_load * d.per_replica_rps
        sample = newest_sample(
            obs,
            tokens_per_request=d.tokens_per_request,
            loaded=loaded,
            held_back=obs.current_replicas >= self.workload.max_replicas
            or self._waits_for_node(obs),
        )
        self._feedback = update(
            self._feedback, sample, self.settings.feedback, slo=self.workload.slo_ttft_seconds
        )

    def _pressure_step(self, obs: Observation, d: Demand, credit: float) -> Demand:
        """`d` with the step a pressure sample that shrank the credit from `credit` this
        tick asks for (`pressure_step`): the replicas standing x the credit's fall."""
        fb = self._feedback
        if not self.settings.pressure_step or fb.ratio >= credit or fb.pressed != fb.seen:
            return d
        step = math.ceil(obs.current_replicas * credit / fb.ratio)
        return dataclasses.replace(d, feedback_step=step)

    def _remember(self, obs: Observation, d: Demand) -> None:
        """Window the steady recommendation; start or extend a surge's hold."""
        s, now = self.settings, obs.now
        if not self._window:
            # No recommendation yet (a (re)started controller, or only ticks without
            # signals so far): the current count is the first one, so it does not scale
            # down on its first sample, before it has a window of evidence.
            self._window.append((now, obs.current_replicas))
        while self._window and self._window[-1][1] <= d.stable:
            self._window.pop()
        self._window.append((now, d.stable))
        while self._window and self._window[0][0] < now - s.scale_down_window_seconds:
            self._window.popleft()
        if d.surges:
            if now >= self._surge_until:
                self._surge_held = 0
            self._surge_held = max(self._surge_held, d.surge)
            self._surge_until = now + s.panic_hold_seconds
        if d.panic:
            self._panic_until = now + s.panic_hold_seconds

    def _target(self, obs: Observation, d: Demand) -> tuple[int, Reason, Term]:
        """Scale up at once; scale down slowly; never below a surge's hold while it lasts.
        Returns the count, its reason and the term that bound it."""
        s, now = self.settings, obs.now
        current = obs.current_replicas
        term, raw = binding(d.candidates())
        if raw > current:
            # Reported as what drove it; the message says it was capped.
            limit = min(
                self._scale_up_limit(obs, learned=d.capacity.learned),
                self._node_limit(obs, raw, absorbed=d.absorbed),
            )
            return min(raw, max(current, limit)), _up_reason(d, term), term
        self._node_need_since = None
        held = self._surge_held if now < self._surge_until else 0
        if now < self._panic_until or held >= current:
            return current, Reason.BURST, Term.SURGE
        # The scale-down window is the policy's own smoothing: it binds when it holds more
        # than the forecast asks now.
        window = Term.BEHAVIOR if self._window[0][1] > d.stable else Term.FORECAST
        floor_term, floor = binding(
            {
                window: self._window[0][1],
                Term.USUAL_PEAK: d.burst,
                Term.RESERVE: d.reserve,
                Term.PROMPT_TAIL: d.tail,
                Term.SURGE: held,
            }
        )
        if floor >= current:
            if raw >= current:
                return current, Reason.STEADY, term
            return current, Reason.STABILIZED, floor_term
        if now - self._last_change < s.scale_down_step_seconds:
            return current, Reason.RATE_LIMITED, Term.BEHAVIOR
        fb = self._feedback
        if fb.ratio < 1.0 and now - fb.pressed < s.scale_down_window_seconds:
            return current, Reason.STABILIZED, Term.SLO_FEEDBACK  # see the module doc, 4
        unlearned = math.ceil(current * (1.0 - s.unlearned_max_scale_down_share))
        if not d.capacity.learned and unlearned > floor:
            return unlearned, Reason.RATE_LIMITED, Term.BEHAVIOR
        return floor, Reason.SCALE_DOWN, floor_term

    def _scale_up_limit(self, obs: Observation, *, learned: bool) -> int | float:
        """The most replicas a scale-up may ask for now: `max_scale_up_ratio` (and, until
        capacity is learned, `unlearned_max_scale_up_ratio`) x the ready ones, at least +4."""
        s = self.settings
        ratio = (
            s.max_scale_up_ratio
            if learned
            else min(s.max_scale_up_ratio, s.unlearned_max_scale_up_ratio)
        )
        if math.isinf(ratio):
            return math.inf
        serving = obs.count(ReplicaState.READY)
        return max(math.ceil(ratio * serving), serving + 4)

    def _node_limit(self, obs: Observation, raw: int, *, absorbed: bool) -> int | float:
        """The most replicas a scale-up to `raw` may ask for: with `new_node_waits_lead`, or
        while the ready replicas carry a crowd (`absorbed`), those that fit on the nodes
        paid for until the need for more has lasted the node lead time. A node emptied a
        while ago counts: nothing waits for a node while one stands empty. A surge does
        not take its GPUs: the SLO feedback holds its credit while a surge's replicas
        start, which left the Azure code trace at 10x under its need (BENCHMARKS.md)."""
        paid = self._paid_replicas(obs, emptied_nodes=True)
        if not (self.settings.new_node_waits_lead or absorbed) or raw <= paid:
            self._node_need_since = None
            return math.inf
        if self._node_need_since is None:
            self._node_need_since = obs.now
        return paid if self._waits_for_node(obs) else math.inf

    def _waits_for_node(self, obs: Observation) -> bool:
        """Whether a need for a new node has lasted less than the node lead time so far."""
        since = self._node_need_since
        return since is not None and obs.now - since < self.workload.node_lead_seconds

    # --- scale to zero ---

    def _note_activity(self, obs: Observation) -> bool:
        """Whether anything arrived, waits or runs now; the idle clock starts at the first tick."""
        signals = (obs.arrival_rate.latest(), obs.queue_depth.latest(), obs.in_flight.latest())
        active = any(v is not None and v > 0 for v in signals)
        if active or self._last_active is None:
            self._last_active = obs.now
        return active

    def _zero(
        self, obs: Observation, desired: int, reason: Reason, *, active: bool
    ) -> tuple[int, Reason]:
        """min_replicas 0: activate on any signal, deactivate after the idle period."""
        if self.workload.min_replicas > 0:
            return desired, reason
        current = obs.current_replicas
        idle_seconds = obs.now - (obs.now if self._last_active is None else self._last_active)
        if current == 0:
            if active:
                return max(1, desired), Reason.ACTIVATE
            return 0, Reason.STEADY
        if idle_seconds >= self.settings.idle_seconds_to_zero and reason is not (
            Reason.MISSING_METRICS
        ):
            return 0, Reason.DEACTIVATE
        return max(1, desired), reason

    def _finish(
        self,
        obs: Observation,
        desired: int,
        reason: Reason,
        message: str,
        *,
        headroom: int,
        term: Term,
    ) -> Decision:
        if self._desired is not None and desired != self._desired:
            self._last_change = obs.now
        self._desired = desired
        self._placeholders = headroom
        return Decision(
            desired=desired, reason=reason, message=message, headroom=headroom, bound_by=term
        )


def _up_reason(d: Demand, term: Term) -> Reason:
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


def _fresh(series: Series, now: float, stale_after_seconds: float) -> bool:
    return bool(series.times) and now - series.times[-1] <= stale_after_seconds


def _message(
    d: Demand, current: int, desired: int, reason: Reason, s: GpufleetSettings, *, term: Term
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
