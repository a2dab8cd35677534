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
the node flaps. Its settings are `gpufleet_settings`; `demand` sizes each tick's terms and
words the message, `paid_nodes` counts the nodes already paid for.
"""

import dataclasses
import math
import sys
from collections import deque
from collections.abc import Mapping
from typing import Any

from gpufleet.autoscaler.core import knob, node_flaps, paid_nodes, prompt_tail
from gpufleet.autoscaler.core.behavior import Bounds, History, limit_with_behavior, record_scale
from gpufleet.autoscaler.core.binding import Term, binding
from gpufleet.autoscaler.core.capacity import CapacityState, estimate, learn, tokens_per_request
from gpufleet.autoscaler.core.demand import Demand, explain, size, up_reason
from gpufleet.autoscaler.core.gpufleet_settings import GpufleetSettings
from gpufleet.autoscaler.core.observation import Observation, ReplicaState, Series
from gpufleet.autoscaler.core.policy import Decision, Reason
from gpufleet.autoscaler.core.slo_feedback import FeedbackState, clamp, newest_sample, update
from gpufleet.autoscaler.core.workload import WorkloadConfig


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
        # Every sum is >= 0, and a subnormal weight (1e-320) divided into a hint made the
        # capacity infinite: a workload at 500 requests/s held at one replica.
        values: dict[str, Any] = {
            k: float(v)
            for k, v in learned.items()
            if k in names
            and isinstance(v, int | float)
            and not isinstance(v, bool)
            and math.isfinite(v)
            and (v == 0 or v >= sys.float_info.min)
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
        desired, reason, term = self._wanted(
            obs, demand, active=active, fresh=arrivals_ok and queue_ok
        )
        return self._act(obs, demand, desired=desired, reason=reason, term=term)

    def _wanted(
        self, obs: Observation, demand: Demand, *, active: bool, fresh: bool
    ) -> tuple[int, Reason, Term]:
        """What the policy asks for before the workload's behavior and the node flaps: the
        target, held where a signal is missing (`fresh`: both are), zero's path, and the
        workload's bounds. Returns the count, its reason and the term that bound it."""
        current = obs.current_replicas
        desired, reason, term = self._target(obs, demand)
        if not fresh and desired < current:
            desired, reason, term = current, Reason.MISSING_METRICS, Term.MISSING
        zeroed, reason = self._zero(obs, desired, reason, active=active)
        if reason in (Reason.ACTIVATE, Reason.DEACTIVATE) or zeroed != desired:
            term = Term.ZERO
        desired = zeroed
        bounded = self.workload.clamp(desired)
        if bounded != desired or (0 < demand.raw < bounded == self.workload.min_replicas):
            desired, reason, term = bounded, Reason.BOUNDED, Term.FLOOR
        return desired, reason, term

    def _act(
        self, obs: Observation, demand: Demand, *, desired: int, reason: Reason, term: Term
    ) -> Decision:
        """The decision for `desired`: filled to whole nodes, within the workload's rate
        policies and the node flaps' hold, with its placeholders and its message."""
        s, now = self.settings, obs.now
        current = obs.current_replicas
        needed = desired
        if s.fill_nodes:
            desired = paid_nodes.filled(desired, self.workload)
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
        message = explain(
            demand, s, current=current, desired=desired, reason=message_reason, term=term
        )
        message += self._notes(
            obs, demand, desired=desired, needed=needed, flap_held=flap_held, note=note
        )
        message += f"; bound by {term}"
        self._scale_history = record_scale(
            self._scale_history,
            now=now,
            previous=previous,
            new=desired,
            behavior=self.workload.behavior,
        )
        return self._finish(obs, desired, reason, message, headroom=headroom, term=term)

    def _notes(
        self,
        obs: Observation,
        demand: Demand,
        *,
        desired: int,
        needed: int,
        flap_held: bool,
        note: str,
    ) -> str:
        """What the message adds after the policy's own sentence: a fill, a wait for a node,
        then a node flap's hold or the workload's behavior (`note`: the rate policy that
        bound)."""
        s, current = self.settings, obs.current_replicas
        notes = ""
        if desired > needed:
            notes += f" (needs {needed}; filled to {desired}: idle GPUs on nodes paid for)"
        if current <= desired < demand.raw and self._waits_for_node(obs):
            carried = "the ready replicas carry this crowd; " if demand.absorbed else ""
            notes += (
                f" ({carried}no new node until the need has lasted the node lead time, "
                f"{self.workload.node_lead_seconds:g} s: a shorter crowd is over before one serves)"
            )
        if flap_held:
            notes += (
                f" (held: a node given back was taken back within "
                f"{s.scale_down_window_seconds:g} s at {self._flaps.flapped:.0f} s; its "
                f"{self._flaps.level} nodes are not given back for "
                f"{s.node_flap_hold_seconds:g} s after that)"
            )
        elif note:
            notes += f" (the workload's behavior allows {desired}: {note})"
        return notes

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

    def _node_flap_hold(self, now: float, previous: int, desired: int) -> int:
        """`desired`, or as many replicas as a step down from `previous` keeps while a node
        flap holds the nodes it took back (`node_flaps`): the fewer of `previous` and those
        nodes' worth. Notes the step taken. Steps to or from zero are the zero path's, and a
        pool of unknown node size has no nodes to count."""
        per = paid_nodes.per_node(self.workload)
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

    # --- sizing ---

    def _demand(self, obs: Observation, tpr: float | None, *, arrivals_ok: bool) -> Demand:
        """What the workload needs (`demand.size`), at the history's mean prompt `tpr`."""
        s = self.settings
        est = estimate(self._capacity, s.capacity, tokens_per_request=tpr)
        return size(
            obs,
            settings=s,
            workload=self.workload,
            est=est,
            tpr=tpr,
            feedback=self._feedback.ratio,
            arrivals_ok=arrivals_ok,
            placeholders=self._placeholders,
            tail=self._tail(obs, est.prompt_tokens_per_second),
            node_waits=self._node_need_since is not None,
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
            return min(raw, max(current, limit)), up_reason(d, term), term
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
        paid = paid_nodes.paid_replicas(
            obs, self.workload, placeholders=self._placeholders, emptied_nodes=True
        )
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


def _fresh(series: Series, now: float, stale_after_seconds: float) -> bool:
    return bool(series.times) and now - series.times[-1] <= stale_after_seconds
