"""Online per-replica service rate: how much one replica sustains, learned from telemetry.

A policy needs "requests/s one replica serves" to turn a demand into a replica count, and
no one configures that number correctly (it moves with the model, the GPU, the prompt mix
and the server's batch settings). So it is learned, as a pure fold over observations:
`learn(state, obs) -> state`, `estimate(state) -> CapacityEstimate`.

Two sources, in two units (completions/s and prompt tokens/s, per ready replica):

1. **Saturated samples** (the truth, mostly). A 5-s sample whose queue held a request per
   ready replica at both ends had its replicas busy the whole time, so its throughput per
   ready replica is the service rate (but see below). They are averaged with exponential
   forgetting (the mix drifts), and a conservative prior counts as a few pseudo-samples
   until real ones outweigh it. TTFT is
   not required to be within the SLO: a saturated server's throughput is its service rate
   whatever the queue length; the SLO enters through the policy's `headroom`. Which rate a
   sample measures depends on what was full: the queue counts requests waiting for
   prefill as well as for a batch slot, and a least-request router can queue prefills on
   some replicas while others' prefill idles, so "saturated" samples can understate both
   rates. Where the batch size is known (`batch_slots`, vLLM's --max-num-seqs), only a
   sample whose requests in flight filled the slots (`slots_full_ratio`) was slot-bound
   and teaches the request rate; the others teach the token rate only. (vLLM counts a
   request waiting to be scheduled as waiting, not running; a server that counts requests
   queued for their replica's prefill as in flight, as the simulator does, can read a
   replica deep in a prefill backlog as full.) Without it, a
   sample prefilling at about the learned token rate (`prefill_bound_ratio`) was
   prefill-bound, and only samples full below that rate teach the request rate. Either way
   a prefill-bound sample's completions count the requests whose decode happened to end
   (a few seconds behind, and fewer when the prompts were long), not what the slots sustain.
2. **Lower bounds** (hints) that let an over-provisioned service, which never saturates,
   still climb off the prior; they never lower the estimate:
   - duty cycle: throughput divided by busy GPU time (DCGM duty cycle, or GR_ENGINE_ACTIVE
     where present) can only under-state the rate, because the duty cycle counts any kernel
     at all (decode included);
   - TTFT: every request's TTFT is at least its own prompt's prefill time, so the prompt
     tokens prefilled in a sample divided by the TTFT seconds summed over the same first
     tokens (`ttft_sum_rate`) can only under-state the prefill rate; queueing only makes it
     looser, and on a lightly loaded fleet it is the rate itself. Without that signal, mean
     prompt tokens / p90 TTFT (the p90 prompt's prefill is at least the mean prompt's for a
     right-skewed mix) is the weaker stand-in;
   - prefill seconds: prompt tokens over the prefill seconds summed for the same first
     tokens (`prefill_sum_rate`, vLLM's request_prefill_time_seconds) leave the queue wait
     out: the prefill rate itself where a replica prefills one prompt at a time, a bound
     where prefills overlap (chunked or batched prefill counts shared seconds per request).

Replica counts come from `obs.replicas`: a sample counts the replicas ready for its whole
interval plus those draining now (they served it). Over-counting only under-states the
rate, the safe side.
"""

import bisect
import math
from dataclasses import dataclass, replace

from gpufleet.autoscaler.core.observation import Observation, ReplicaState, Series


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacitySettings:
    # Conservative priors (about a quarter of an 8B model on one H100 with 2k-token
    # prompts): before any evidence, over-provisioning costs money, under-provisioning the SLO.
    prior_requests_per_second: float = 2.0
    prior_prompt_tokens_per_second: float = 4000.0
    # The prior (or the duty-cycle bound, when higher) weighs as much as this many
    # saturated samples: one sample is noisy, a handful (one burst) should win.
    prior_weight_samples: float = 1.0
    # Forgetting in saturated samples (not seconds: a quiet hour must not erase what was
    # learned). 120 samples = ten minutes of saturation at a 5-s scrape.
    half_life_samples: float = 120.0
    # A sample is saturated when the queue held at least this many requests per ready
    # replica at both ends of its interval: one waiting request per replica means none idled.
    saturation_queue_per_replica: float = 1.0
    # A saturated sample prefilling at least this share of the current token estimate per
    # replica was prefill-bound: it teaches the token rate only (see the module doc). Used
    # only where the batch size is unknown; where it is known, `slots_full_ratio` decides.
    prefill_bound_ratio: float = 0.8
    # With the batch size known, a saturated sample was slot-bound (it teaches the request
    # rate) only if the requests in flight filled at least this share of the ready
    # replicas' slots at its end; otherwise its queue was waiting for prefill.
    slots_full_ratio: float = 0.9
    # The estimate reads "learned" (in messages) after this many saturated samples.
    learned_after_samples: int = 6
    # The duty-cycle hint only counts samples whose replicas were busy at least this
    # fraction of the time: below it, the ratio is dominated by one request's edges.
    hint_min_busy_ratio: float = 0.3
    # Half-life of the hint's sums, in samples (the hint follows the mix faster).
    hint_half_life_samples: float = 60.0
    # The hints are discounted by this factor: bounds from 5-s windows are noisy upwards.
    hint_discount: float = 0.9


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityState:
    """Exponentially forgotten sums; the initial value is `CapacityState()`."""

    last_sample_time: float = -math.inf
    samples: int = 0  # saturated samples seen (not forgotten: it is a count for messages)
    sat_weight: float = 0.0  # saturated samples, weighted
    sat_tokens: float = 0.0  # sum of prompt tokens/s per ready replica, weighted
    slot_weight: float = 0.0  # slot-bound saturated samples (not prefill-bound), weighted
    sat_requests: float = 0.0  # their sum of completions/s per ready replica, weighted
    hint_busy: float = 0.0  # sum of busy replicas (duty cycles), weighted
    hint_requests: float = 0.0  # sum of completions/s, weighted
    hint_tokens: float = 0.0  # sum of prompt tokens/s, weighted
    ttft_weight: float = 0.0  # samples behind the TTFT bound, weighted
    ttft_tokens: float = 0.0  # sum of mean prompt tokens / p90 TTFT, weighted
    prefill_weight: float = 0.0  # samples behind the prefill-time bound, weighted
    prefill_tokens: float = 0.0  # sum of prompt tokens / prefill seconds, weighted


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityEstimate:
    requests_per_second: float  # completions/s one replica sustains
    prompt_tokens_per_second: float  # prompt tokens/s one replica prefills
    samples: int  # saturated samples behind it
    learned: bool  # False while the prior (or only the hint) speaks
    slot_weight: float = 0.0  # slot-bound samples behind `requests_per_second`, weighted

    def per_replica_rps(self, tokens_per_request: float | None) -> float:
        """Requests/s per replica under the current mix: the tighter of the two limits.

        Long prompts make prefill the bottleneck (the token rate binds); long outputs fill
        the batch slots (the request rate binds). Taking the smaller is right for both.
        Until a slot-bound sample the request rate is only a guess (nothing bounds batch
        slots from below) while the token rate has the hints and samples, so the token rate
        alone speaks: an idle-looking fleet must not stay over-provisioned on the request
        prior.
        """
        if not tokens_per_request or tokens_per_request <= 0:
            return self.requests_per_second
        by_tokens = self.prompt_tokens_per_second / tokens_per_request
        return by_tokens if self.slot_weight == 0.0 else min(self.requests_per_second, by_tokens)


def learn(
    state: CapacityState,
    obs: Observation,
    settings: CapacitySettings,
    *,
    batch_slots: int = 0,
    tokens_per_request: float | None = None,
) -> CapacityState:
    """Fold the samples in `obs` newer than the state's last one into the state.

    `batch_slots` is the requests one replica runs at once (0: unknown);
    `tokens_per_request` the history's mean prompt (the function of that name; None:
    unknown, and the p90 TTFT bound, which needs it, is not taken).

    A sample lacking any of completion rate, prompt-token rate or the two queue depths is
    skipped (not counted as idle). The duty-cycle hint uses `obs.pods`, which describe the
    newest scrape, so it only ever reads the newest sample.
    """
    done = obs.completion_rate
    new = range(bisect.bisect_right(done.times, state.last_sample_time), len(done.times))
    if not new:
        return state
    for i in new:
        state = _fold_saturated(state, obs, i, batch_slots=batch_slots, settings=settings)
    state = _fold_hint(state, obs, settings=settings)
    half_life = settings.hint_half_life_samples
    if obs.ttft_sum_rate.times:
        # Prompt tokens / summed TTFT: a strict lower bound on the prefill rate. It is exact,
        # not a guess from noisy windows, so the hint discount `estimate` applies is undone.
        bounds = [b / settings.hint_discount for b in _per_second(obs, new, obs.ttft_sum_rate)]
        weight, total = _decayed(state.ttft_weight, state.ttft_tokens, bounds, half_life)
        state = replace(state, ttft_weight=weight, ttft_tokens=total)
    else:
        state = _fold_ttft(state, obs, tokens_per_request, settings=settings)
    if obs.prefill_sum_rate.times:
        # Prompt tokens / summed prefill seconds: the prefill rate itself where a replica
        # prefills one prompt at a time, a lower bound where prefills overlap (batched or
        # chunked prefill counts shared seconds once per request).
        bounds = _per_second(obs, new, obs.prefill_sum_rate)
        weight, total = _decayed(state.prefill_weight, state.prefill_tokens, bounds, half_life)
        state = replace(state, prefill_weight=weight, prefill_tokens=total)
    return replace(state, last_sample_time=done.times[new[-1]])


def estimate(
    state: CapacityState,
    settings: CapacitySettings,
    *,
    tokens_per_request: float | None = None,
) -> CapacityEstimate:
    """Saturated samples shrunk toward the best guess without them.

    That guess is the prior raised to the hints when they are higher: a hint is a lower
    bound on the rate, the prior a guess, so the larger is the better guess. For the
    request rate, given the mix's `tokens_per_request`, the guess is also at least the
    prefill limit: until a slot-bound sample the policy sizes on the token rate alone
    (`per_replica_rps`), so the first noisy slot-bound sample must not be averaged with the
    deliberately low request prior and halve the estimate in one scrape. The token rate
    never goes below its hints (they bound it); the request rate may, as samples accrue.
    """
    rps_floor = settings.prior_requests_per_second
    tps_floor = settings.prior_prompt_tokens_per_second
    if state.hint_busy > 0.0:
        hint = settings.hint_discount / state.hint_busy
        rps_floor = max(rps_floor, hint * state.hint_requests)
        tps_floor = max(tps_floor, hint * state.hint_tokens)
    if state.ttft_weight > 0.0:
        ttft_bound = state.ttft_tokens / state.ttft_weight
        tps_floor = max(tps_floor, settings.hint_discount * ttft_bound)
    if state.prefill_weight > 0.0:
        tps_floor = max(tps_floor, state.prefill_tokens / state.prefill_weight)
    w0 = settings.prior_weight_samples
    tps = max(tps_floor, (w0 * tps_floor + state.sat_tokens) / (w0 + state.sat_weight))
    rps_guess = rps_floor
    if tokens_per_request and tokens_per_request > 0:
        rps_guess = max(rps_floor, tps / tokens_per_request)
    rps = (w0 * rps_guess + state.sat_requests) / (w0 + state.slot_weight)
    return CapacityEstimate(
        requests_per_second=max(rps, rps_floor),
        prompt_tokens_per_second=tps,
        samples=state.samples,
        learned=state.samples >= settings.learned_after_samples,
        slot_weight=state.slot_weight,
    )


def tokens_per_request(
    obs: Observation, *, memory_seconds: float, scrape_seconds: float
) -> float | None:
    """Mean prompt tokens per request prefilled over the observation's history; None
    without data.

    Prompt tokens count as a request is prefilled, completions as it finishes, a decode
    later. Where the history's traffic began inside it (the simulator's runs; a new
    workload; a scale-up from zero), its first scrape's requests in flight were prefilled
    and none had finished, so tokens per completion read the mean prompt several times
    over in its first seconds: 2.6x on held-out quiet x10, which bought a node it then
    held. So those requests count as prefilled: at least those in flight less those
    waiting (vLLM's running and waiting are apart; the simulator counts a request waiting
    for its replica's prefill in both). The traffic began inside the history where an
    idle sample (no prompt tokens, nothing in flight) comes before its first scrape with
    prompt tokens, or where that is the history's first sample and its interval began
    within the last `memory_seconds` (the window the caller is given: the forecast's peak
    memory; a longer window's first interval begins before it). A caller whose window is
    shorter reads every such history as young, which adds a few seconds of completions to
    a long one. Later growth of the requests in flight is left out: over a long history
    it is a rounding error (Little's law), and counted through a young history's crowds
    it also moved how those are sized, for a knob inversion and an HPA point more on the
    tuning seeds (BENCHMARKS.md). The samples are rates over evenly spaced scrapes: a
    count is a rate times their spacing (`scrape_seconds` for a lone sample).
    """
    done, prompt = obs.completion_rate, obs.prompt_tokens_rate
    requests = sum(done.values)
    tokens = sum(prompt.values)
    start = next((i for i, v in enumerate(prompt.values) if v > 0.0), None)
    if start is not None and done.times:
        n = len(done.times)
        spacing = (done.times[-1] - done.times[0]) / (n - 1) if n > 1 else scrape_seconds
        began = prompt.times[start]
        if start:  # the sample before had no prompt tokens: idle if none was in flight
            inside = _value_at(obs.in_flight, prompt.times[start - 1]) == 0.0
        else:
            inside = began - spacing > obs.now - memory_seconds
        flight, queue = _value_at(obs.in_flight, began), _value_at(obs.queue_depth, began)
        if inside and flight is not None and queue is not None and spacing > 0.0:
            requests += max(0.0, flight - queue) / spacing
    if requests <= 0.0 or tokens <= 0.0:
        return None
    mean = tokens / requests
    return mean if 0.0 < mean < math.inf else None  # rates at float's limits: no data


def _value_at(series: Series, t: float) -> float | None:
    """The sample of `series` taken at `t`; None where it has none. A look, not a dict of
    the whole window: a decision folds the one to three samples since the last."""
    i = bisect.bisect_left(series.times, t)
    return series.values[i] if i < len(series.times) and series.times[i] == t else None


def serving_during(obs: Observation, start: float, end: float) -> float:
    """Replicas that served [start, end], each weighted by the fraction of it it served.

    A replica ready since before `start` counts 1, one that became ready mid-interval its
    fraction; one draining now counts 1 (it was serving, or finishing its queue, throughout).
    """
    span = max(end - start, 1e-9)
    n = 0.0
    for r in obs.replicas:
        if r.state is ReplicaState.READY:
            n += min(1.0, max(0.0, (end - max(r.since, start)) / span))
        elif r.state is ReplicaState.TERMINATING:
            n += 1.0
    return n


def _fold_saturated(
    state: CapacityState,
    obs: Observation,
    i: int,
    *,
    batch_slots: int,
    settings: CapacitySettings,
) -> CapacityState:
    done: Series = obs.completion_rate
    if i == 0:
        return state  # no previous sample: the interval's start is unknown
    start, end = done.times[i - 1], done.times[i]
    queue = obs.queue_depth
    q0, q1 = _value_at(queue, start), _value_at(queue, end)
    tok = _value_at(obs.prompt_tokens_rate, end)
    if q0 is None or q1 is None or tok is None:
        return state
    ready = serving_during(obs, start, end)
    need = max(1.0, settings.saturation_queue_per_replica * ready)
    if ready < 0.5 or q0 < need or q1 < need:
        return state
    decay = 0.5 ** (1.0 / settings.half_life_samples)
    flight = _value_at(obs.in_flight, end)
    if batch_slots > 0 and flight is not None:
        slot_bound = flight >= settings.slots_full_ratio * batch_slots * ready
    else:  # batch size or in-flight count unknown: the token test
        tps = estimate(state, settings).prompt_tokens_per_second
        slot_bound = tok / ready < settings.prefill_bound_ratio * tps
    return replace(
        state,
        samples=state.samples + 1,
        sat_weight=state.sat_weight * decay + 1.0,
        sat_tokens=state.sat_tokens * decay + tok / ready,
        slot_weight=state.slot_weight * decay + (1.0 if slot_bound else 0.0),
        sat_requests=state.sat_requests * decay + (done.values[i] / ready if slot_bound else 0.0),
    )


def _fold_hint(
    state: CapacityState, obs: Observation, *, settings: CapacitySettings
) -> CapacityState:
    serving = {
        r.name for r in obs.replicas if r.state in (ReplicaState.READY, ReplicaState.TERMINATING)
    }
    busy = 0.0
    counted = 0
    for pod in obs.pods:
        ratio = _duty_ratio(pod.gr_engine_active_ratio, pod.gpu_util_percent)
        if pod.pod in serving and ratio is not None:
            busy += ratio
            counted += 1
    t_last = obs.completion_rate.times[-1]
    tok = _value_at(obs.prompt_tokens_rate, t_last)
    if counted == 0 or tok is None or busy < settings.hint_min_busy_ratio * counted:
        return state
    decay = 0.5 ** (1.0 / settings.hint_half_life_samples)
    return replace(
        state,
        hint_busy=state.hint_busy * decay + busy,
        hint_requests=state.hint_requests * decay + obs.completion_rate.values[-1],
        hint_tokens=state.hint_tokens * decay + tok,
    )


def _per_second(obs: Observation, new: range, seconds: Series) -> list[float]:
    """Prompt tokens over `seconds` (a per-second sum over the same first tokens, aligned
    with the completions) for each sample in `new` that has both, positive."""
    out = []
    for i in new:
        t = obs.completion_rate.times[i]
        tok, secs = _value_at(obs.prompt_tokens_rate, t), _value_at(seconds, t)
        if tok is not None and secs is not None and tok > 0.0 and secs > 0.0:
            out.append(tok / secs)
    return out


def _decayed(
    weight: float, total: float, samples: list[float], half_life_samples: float
) -> tuple[float, float]:
    """`weight` and `total` with each sample folded in, older ones forgotten."""
    decay = 0.5 ** (1.0 / half_life_samples)
    for sample in samples:
        weight, total = weight * decay + 1.0, total * decay + sample
    return weight, total


def _fold_ttft(
    state: CapacityState, obs: Observation, tpr: float | None, *, settings: CapacitySettings
) -> CapacityState:
    """Fold the TTFT bound of the newest TTFT sample not seen yet (one per scrape), at the
    mean prompt `tpr`."""
    ttft = obs.ttft_p90_seconds
    if tpr is None or not ttft.times:
        return state
    if ttft.times[-1] <= state.last_sample_time or ttft.values[-1] <= 0.0:
        return state
    weight, total = _decayed(
        state.ttft_weight,
        state.ttft_tokens,
        [tpr / ttft.values[-1]],
        settings.hint_half_life_samples,
    )
    return replace(state, ttft_weight=weight, ttft_tokens=total)


def _duty_ratio(engine_active: float | None, util_percent: float | None) -> float | None:
    """GR_ENGINE_ACTIVE when present (finer), else the duty-cycle percent as a ratio."""
    if engine_active is not None:
        return min(1.0, max(0.0, engine_active))
    if util_percent is not None:
        return min(1.0, max(0.0, util_percent / 100.0))
    return None
