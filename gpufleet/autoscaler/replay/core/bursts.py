"""Burst starts in a trace, and how long a run's policy took to answer each.

Issue 4 asks for the first scale-up decision within one control interval of a burst's
start. A burst starts where the arrivals of the next `window_seconds` run at least
`factor` times the rate of the `baseline_seconds` before (and at least `min_rate` per
second, so a trickle after silence is not a burst); its start is the first arrival of the
window, within one window of the trip, that holds the most arrivals. After one burst
starts, the next can start only a baseline later.

The reaction delay is the time from the start to the first decision, within a horizon,
whose desired count exceeds the last desired count before the start. It includes the
metric pipeline's delay (the burst is invisible until a scrape has covered it and the
sample has been evaluated and queried), so `visible_delay` reports the part the policy
itself controls, and `earliest_decision` the floor no policy on that pipeline can beat.
A burst's first samples are often ones the ready replicas absorb (the Azure code trace's
bursts ramp in over about 10 s), so `overload_visible` also says when the first sample
that needed more than the ready replicas to meet the SLO could be seen: a policy can only
be asked to act on evidence of need.

Pure: plain arrays in, arrays out.
"""

from dataclasses import dataclass

import numpy as np

from gpufleet.autoscaler.replay.core.model import PipelineModel
from gpufleet.autoscaler.replay.core.result import DecisionRecord

STEP_SECONDS = 1.0  # resolution of the burst search


@dataclass(frozen=True, slots=True, kw_only=True)
class BurstRule:
    window_seconds: float = 10.0
    baseline_seconds: float = 60.0
    factor: float = 2.0
    min_rate: float = 1.0  # requests/s over the window


def burst_starts(arrival_seconds: np.ndarray, rule: BurstRule = BurstRule()) -> np.ndarray:
    """Start times (first arrival of each burst window), ascending."""
    if len(arrival_seconds) == 0:
        return np.empty(0)
    grid = np.arange(0.0, arrival_seconds[-1] + STEP_SECONDS, STEP_SECONDS)
    counts_before = np.searchsorted(arrival_seconds, grid, side="left")
    ahead = np.searchsorted(arrival_seconds, grid + rule.window_seconds, side="left")
    behind = np.searchsorted(arrival_seconds, grid - rule.baseline_seconds, side="left")
    rate = (ahead - counts_before) / rule.window_seconds
    baseline = (counts_before - behind) / rule.baseline_seconds
    hot = (rate >= rule.min_rate) & (rate >= rule.factor * baseline)
    hot &= grid >= rule.baseline_seconds  # the trace's own start has no baseline
    starts: list[float] = []
    span = int(rule.window_seconds / STEP_SECONDS)
    for i in np.flatnonzero(hot):
        # The window trips before it is fully inside the burst; the burst starts where the
        # window ahead holds the most arrivals (the first such point).
        j = i + int(np.argmax(rate[i : i + span + 1]))
        first = float(arrival_seconds[min(counts_before[j], len(arrival_seconds) - 1)])
        if not starts or first >= starts[-1] + rule.baseline_seconds:
            starts.append(first)
    return np.array(starts)


def reaction_delays(
    starts: np.ndarray, decisions: tuple[DecisionRecord, ...], *, horizon_seconds: float = 60.0
) -> np.ndarray:
    """Seconds from each start to the first decision raising desired within the horizon.

    NaN where none did: capacity already sufficed, or the policy missed the burst.
    """
    times = np.array([d.t for d in decisions])
    desired = np.array([d.desired for d in decisions])
    delays = np.full(len(starts), np.nan)
    if not decisions:
        return delays
    for k, start in enumerate(starts):
        i = int(np.searchsorted(times, start, side="left"))
        before = desired[max(i - 1, 0)]
        end = int(np.searchsorted(times, start + horizon_seconds, side="right"))
        raised = np.flatnonzero(desired[i:end] > before)
        if len(raised):
            delays[k] = times[i + raised[0]] - start
    return delays


def visible_delay(start: float, pipeline: PipelineModel) -> float:
    """Seconds from a start until the first sample covering it can be queried."""
    first = _first_scrape(start, pipeline.scrape_interval_seconds)
    return float(first + pipeline.delay_seconds - start)


def earliest_decision(start: float, pipeline: PipelineModel, interval_seconds: float) -> float:
    """Seconds from a start until the first tick that can see it: the floor for any policy
    deciding on the pipeline's samples, even one that raised on every sample covering a
    burst's first arrival. Ticks fall on multiples of the interval, as in the simulator."""
    seen = start + visible_delay(start, pipeline)
    return float(np.ceil(seen / interval_seconds - 1e-9) * interval_seconds - start)


def _first_scrape(start: float, scrape: float) -> float:
    """The first scrape after `start`: one at the very instant has not seen it yet."""
    return float(np.floor(start / scrape) * scrape + scrape)


def overload_visible(
    starts: np.ndarray,
    *,
    arrival_seconds: np.ndarray,
    prompt_tokens: np.ndarray,
    ready_times: np.ndarray,
    ready: np.ndarray,
    prefill_tokens_per_second: float,
    slo_ttft_seconds: float,
    pipeline: PipelineModel,
    horizon_seconds: float = 60.0,
) -> np.ndarray:
    """When each burst's first overloaded sample becomes visible; NaN where none did within
    the horizon or before the next burst's start (the ready replicas absorbed it).

    A sample is overloaded when the prompts that arrived over its scrape interval hold
    more tokens than the replicas ready at the scrape (`ready` at `ready_times`, a run's
    timeline) prefill in that interval plus the TTFT SLO: some of them will miss it
    unless more replicas serve, whatever the policy's model of them says. Approximate both
    ways: it ignores the backlog earlier samples left (undercounting need), and a run's
    timeline samples `ready` every 10 s, so a replica ready just before the scrape may be
    missed (overcounting it). It is measured against the run's own replicas, so a policy
    that keeps more standing has fewer overloads: compare the counts within a policy's
    row, not across.
    """
    scrape = pipeline.scrape_interval_seconds
    late = pipeline.delay_seconds
    tokens = np.concatenate(([0], np.cumsum(prompt_tokens)))
    out = np.full(len(starts), np.nan)
    ends = np.minimum(starts + horizon_seconds, np.append(starts[1:], np.inf))
    for k, (start, end) in enumerate(zip(starts, ends, strict=True)):
        for at in np.arange(_first_scrape(start, scrape), end - late, scrape):
            lo, hi = np.searchsorted(arrival_seconds, (at - scrape, at), side="left")
            i = int(np.searchsorted(ready_times, at, side="right")) - 1
            serving = ready[max(i, 0)]
            budget = serving * prefill_tokens_per_second * (scrape + slo_ttft_seconds)
            if tokens[hi] - tokens[lo] > budget:
                out[k] = at + late
                break
    return out
