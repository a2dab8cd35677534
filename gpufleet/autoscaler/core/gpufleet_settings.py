"""The `gpufleet` policy's settings: every constant, with what it means and why its default.

Users do not set these one by one: they set a target attainment
(`WorkloadConfig.target_attainment`), and `knob.apply` maps it onto every setting that
trades cost for attainment. The policy (`gpufleet_policy`) reads them; the benchmarks'
`--set` (`bench.overrides`: `bench.tuning_grid`, `bench.sim_minutes`) overrides them by
name. Pure: plain values.
"""

import math
from dataclasses import dataclass, field

from gpufleet.autoscaler.core.capacity import CapacitySettings
from gpufleet.autoscaler.core.forecast import ForecastSettings
from gpufleet.autoscaler.core.slo_feedback import FeedbackSettings


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
