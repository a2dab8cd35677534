"""How fast each policy answers a burst: issue 4's "first scale-up decision within one
control interval (<= 5 s) of a burst's start".

Bursts come from the trace itself (`gpufleet.autoscaler.replay.core.bursts`: the next 10 s arrive
at >= 2x the previous minute's rate and >= 1 request/s). Each policy runs through
`sweep.run`, the path `gpufleet simulate` takes, with the default simulator settings and a
warm start. For every burst the table counts the policy's first decision raising its
desired count within 60 s, and splits the delay into:
- from start: what users feel;
- after visible: minus the metric pipeline's share (the next scrape covering the burst,
  plus rule evaluation and query), i.e. the part the policy controls. A policy that acts
  on the first tick after the burst becomes visible scores at most its own interval here.
"Earliest possible" is the floor for any policy on the same pipeline and interval: its
first tick after the first sample covering the burst's first arrival is visible
(`bursts.earliest_decision`), as if it raised on that sample whatever it held.
A burst the policy did not scale for (capacity already sufficed, or it missed it) is not
in the delays; "raised" says how many it scaled for. The Azure code trace's bursts ramp in
over about 10 s, and their first samples are ones the ready replicas absorb, so the last
columns count the bursts with an overloaded sample (more prompt tokens than the replicas
ready then prefill within it plus the SLO; `bursts.overload_visible`), and how many of
those the policy raised for within one interval of that sample becoming visible (or
before).

Run from the repository root:
    python3 -m bench.reaction_bench [--trace A.csv,B.csv] [--scale 1] [--scrape-interval-seconds 5]
"""

import argparse
import sys
from pathlib import Path

import numpy as np

from bench.entry import exit_with
from gpufleet.autoscaler.core import factory as policies
from gpufleet.autoscaler.replay.core import sweep
from gpufleet.autoscaler.replay.core.bursts import (
    burst_starts,
    earliest_decision,
    overload_visible,
    reaction_delays,
    visible_delay,
)
from gpufleet.autoscaler.replay.settings import SimulateSettings
from gpufleet.autoscaler.replay.trace_file import load_trace

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
TARGET_SECONDS = 5.0  # the "within one control interval (<= 5 s)"
DEFAULT_TRACES = f"{TRACES / 'azure-llm-2023-code.csv'},{TRACES / 'azure-llm-2023-conv.csv'}"


def row(spec: sweep.RunSpec) -> str:
    result = sweep.run(spec)
    starts = burst_starts(spec.trace.arrival_seconds)
    delays = reaction_delays(starts, result.decisions)
    visible = np.array([visible_delay(s, spec.config.pipeline) for s in starts])
    raised = ~np.isnan(delays)
    interval = policies.make_policy(spec.policy, spec.workload, spec.tuning).interval_seconds
    floor = np.array([earliest_decision(s, spec.config.pipeline, interval) for s in starts])
    own = delays[raised] - visible[raised]
    within = int(np.sum(own <= interval + 1e-9))
    trace = spec.trace
    overload = overload_visible(
        starts,
        arrival_seconds=trace.arrival_seconds,
        prompt_tokens=trace.prompt_tokens,
        ready_times=result.timeline.t,
        ready=result.timeline.ready,
        prefill_tokens_per_second=spec.config.service.prefill_tokens_per_second,
        slo_ttft_seconds=spec.workload.slo_ttft_seconds,
        pipeline=spec.config.pipeline,
    )
    overloaded = ~np.isnan(overload)
    answered = int(np.sum(overloaded & (starts + delays <= overload + interval + 1e-9)))

    def p50_max(x: np.ndarray) -> str:
        return "-" if not len(x) else f"{np.median(x):.1f} / {x.max():.1f}"

    return (
        f"| {spec.trace.name} | {spec.policy} | {interval:g} | {len(starts)} "
        f"| {p50_max(floor)} | {int(np.sum(floor <= TARGET_SECONDS + 1e-9))} | {raised.sum()} "
        f"| {p50_max(delays[raised])} | {p50_max(own)} | {within} "
        f"| {overloaded.sum()} | {answered} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", default=DEFAULT_TRACES)
    parser.add_argument("--policy", default="hpa,keda,gpufleet")
    parser.add_argument("--scale", type=int, default=1)
    parser.add_argument("--scrape-interval-seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    # `gpufleet simulate`'s defaults, without node filling: warm replicas on paid-for GPUs
    # would absorb most bursts, and this measures how the policy reacts when they do not.
    settings = SimulateSettings(
        scrape_interval_seconds=args.scrape_interval_seconds, gpufleet_fill_nodes=False
    )
    traces = [
        load_trace(p, scale=args.scale, seed=settings.seed) for p in args.trace.split(",") if p
    ]
    config = settings.sim_config()
    names = policies.check_names(tuple(args.policy.split(",")))
    specs = sweep.plan(
        traces,
        names,
        workload=settings.workload(),
        config=config,
        tuning=settings.tuning(),
        sweep=False,
        warm_start=True,
    )
    print(f"# Burst reaction (`{' '.join(['python3 -m bench.reaction_bench', *sys.argv[1:]])}`)\n")
    print(
        f"scrape interval {config.pipeline.scrape_interval_seconds:g} s, evaluation "
        f"{config.pipeline.evaluation_seconds:g} s, query {config.pipeline.query_seconds:g} s\n"
    )
    print(
        "| trace | policy | interval (s) | bursts | earliest possible p50 / max (s) "
        f"| earliest possible <= {TARGET_SECONDS:g} s | raised | delay from start p50 / max (s) "
        "| after visible p50 / max (s) | within one interval of visible | overloaded "
        "| raised within one interval of overload visible |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for spec in specs:
        print(row(spec))
    return 0


if __name__ == "__main__":
    exit_with(main)
