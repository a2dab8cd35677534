"""Minute by minute: when one simulated run was short of replicas, and when it paid for idle ones.

Why: a run's totals (attainment, billed GPU-hours) do not say when a policy lost requests
or held nodes it did not need; the analyses of code x10 and conv x10 in BENCHMARKS.md were
read from this table. It runs one policy on one trace (a CSV, or a generated `--workload`
family: one of bench/heldout_bench.py's families with `duration=1800` and `--seed S` is one
of its grids' runs, but for KEDA's per-family setting there) the way `gpufleet simulate`
does (its defaults, node filling for gpufleet, a warm start), at one setting of the
policy's knob (`--knob`: gpufleet's target attainment, HPA's target utilization, KEDA's
queue target; the policy's default without it), optionally with gpufleet's settings changed
on top of what the knob maps them to (`--set forecast.peak_quantile=0.8 --set
panic_ratio=3`), and prints per minute: the mean and highest arrival rate of the timeline's
steps, the desired and ready replicas, the billed nodes, and the requests that arrived in
it and missed the TTFT SLO, and how many of those were feasible (one idle replica prefills
their prompt within the SLO: the rest miss under any schedule). `--set` tries a setting
without a rebuild of the compiled simulator, and the misses show when a front point lost
its requests. `--decisions FROM:TO` then lists the policy's decisions in that span of
seconds, each that changed the desired count (every one with `--every-tick`), with the
message that names what bound it: why it scaled, or held.

Run from the repository root:
    python3 -m bench.sim_minutes --trace ../shared/traces/azure-llm-2023-code.csv
        [--scale 10] [--policy gpufleet] [--knob 0.995] [--set KEY=VALUE ...]
    python3 -m bench.sim_minutes --workload longctx:duration=1800 --seed 0 --scale 10
        [--policy hpa --knob 80] [--decisions 300:600 [--every-tick]]
"""

import argparse
import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench import overrides
from bench.entry import exit_with
from gpufleet.autoscaler.core import factory as policies
from gpufleet.autoscaler.replay.core import sweep
from gpufleet.autoscaler.replay.core.result import RunResult
from gpufleet.autoscaler.replay.core.stats import feasible
from gpufleet.autoscaler.replay.core.workloads import WorkloadError, workload_trace
from gpufleet.autoscaler.replay.settings import SimulateSettings
from gpufleet.autoscaler.replay.trace_file import TraceError, load_trace


def parse_span(text: str) -> tuple[float, float]:
    """`FROM:TO` in seconds of the run (either side may be empty: from its start, to its
    end); ArgumentTypeError naming the text otherwise."""
    start, sep, end = text.partition(":")
    try:
        if not sep:
            raise ValueError
        lo = float(start) if start else -math.inf
        hi = float(end) if end else math.inf
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FROM:TO in seconds, got {text!r}") from None
    if lo > hi:
        raise argparse.ArgumentTypeError(f"{text!r} ends before it starts")
    return lo, hi


def decisions(
    result: RunResult, span: tuple[float, float], *, every_tick: bool
) -> list[tuple[float, int, str, str]]:
    """(t, desired, reason, message) of the run's decisions within `span`: those that changed
    the desired count (the first in the span always), or all of them with `every_tick`."""
    rows, previous = [], None
    for d in result.decisions:
        if span[0] <= d.t <= span[1] and (every_tick or not rows or d.desired != previous):
            rows.append((d.t, d.desired, d.reason, d.message))
        previous = d.desired
    return rows


def minutes(result: RunResult, arrival_seconds: np.ndarray, can: np.ndarray) -> list[tuple]:
    """(minute, mean rate, highest rate, desired lo, hi, ready lo, hi, nodes lo, hi, missed,
    feasible missed) per minute of the run's timeline; `can`: which requests are feasible."""
    tl = result.timeline
    late = ~(result.ttft_seconds <= result.slo_ttft_seconds)  # never served (NaN) too
    rows = []
    for m in range(int(tl.t[-1] // 60) + 1):
        step = (tl.t >= 60 * m) & (tl.t < 60 * (m + 1))
        arrived = (arrival_seconds >= 60 * m) & (arrival_seconds < 60 * (m + 1))
        if not step.any():
            continue
        rows.append(
            (
                m,
                float(tl.arrival_rate[step].mean()),
                float(tl.arrival_rate[step].max()),
                *(int(f(tl.desired[step])) for f in (np.min, np.max)),
                *(int(f(tl.ready[step])) for f in (np.min, np.max)),
                *(int(f(tl.nodes[step])) for f in (np.min, np.max)),
                int(late[arrived].sum()),
                int((late & can)[arrived].sum()),
            )
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m bench.sim_minutes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", type=Path, help="a request trace CSV")
    source.add_argument(
        "--workload",
        metavar="FAMILY[:key=value,...]",
        help="a generated trace, as `gpufleet simulate --workload` takes it",
    )
    parser.add_argument("--scale", type=int, default=1, help="copies of the trace (default 1)")
    parser.add_argument(
        "--seed",
        type=int,
        default=SimulateSettings().seed,
        help="seed of the generated trace and the copies' jitter (default: gpufleet "
        "simulate's); bench/heldout_bench.py tunes on seeds 0 and 1",
    )
    parser.add_argument("--policy", default=policies.GPUFLEET, choices=policies.NAMES)
    parser.add_argument(
        "--knob",
        type=float,
        help="the policy's main knob (a sweep point; default: the policy's default)",
    )
    overrides.add_flag(
        parser,
        help="a gpufleet setting on top of what the knob maps to (GpufleetSettings, dotted "
        "into forecast., capacity. and feedback.)",
    )
    parser.add_argument(
        "--decisions",
        type=parse_span,
        metavar="FROM:TO",
        help="after the table, the decisions in this span of seconds that changed the "
        "desired count, with their messages (`300:600`, `:120`, `1500:`)",
    )
    parser.add_argument(
        "--every-tick",
        action="store_true",
        help="with --decisions, every decision in the span, holds included",
    )
    args = parser.parse_args(argv)
    settings = SimulateSettings()
    if args.workload is not None:
        try:
            trace = workload_trace(args.workload, seed=args.seed, scale=args.scale)
        except WorkloadError as exc:
            parser.error(f"--workload: {exc}")
    else:
        try:
            trace = load_trace(args.trace, scale=args.scale, seed=args.seed)
        except TraceError as exc:
            parser.error(f"--trace: {exc}")
    (spec,) = sweep.plan(
        [trace],
        (args.policy,),
        workload=settings.workload(),
        config=settings.sim_config(),
        tuning=settings.tuning(),
        sweep=False,
        warm_start=True,
    )
    spec = dataclasses.replace(spec, knob_value=args.knob)
    try:
        overrides.check(args.policy, args.set)
    except overrides.SettingError as exc:
        parser.error(str(exc))
    if args.policy == policies.ORACLE:
        if args.knob is not None:
            parser.error("--knob: the oracle has no knob")
        result = sweep.run(spec)
    else:
        try:  # the policy `gpufleet simulate` builds, with the overrides on top
            policy = overrides.tuned_policy(spec, args.set)
        except ValueError as exc:  # a knob out of its range
            parser.error(f"--knob: {exc}")
        result = sweep.run(spec, policy=policy)
    knob = [] if args.knob is None else [policies.knob_label(args.policy, args.knob)]
    label = " ".join([trace.name, args.policy, *knob, *(f"{k}={v}" for k, v in args.set)])
    print(
        f"{label}: "
        f"{100 * result.slo_attainment:.2f}% within the SLO, {result.node_gpu_hours:.2f} "
        f"billed GPU-h, {result.replica_gpu_hours:.2f} replica GPU-h\n"
    )
    can = feasible(
        trace.prompt_tokens,
        prefill_tokens_per_second=spec.config.service.prefill_tokens_per_second,
        slo_seconds=result.slo_ttft_seconds,
    )
    print("| minute | rate mean / max (/s) | desired | ready | nodes | missed | feasible missed |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for row in minutes(result, trace.arrival_seconds, can):
        m, mean, peak, d0, d1, r0, r1, n0, n1, missed, feasible_missed = row
        print(
            f"| {m} | {mean:.1f} / {peak:.1f} | {d0}-{d1} | {r0}-{r1} | {n0}-{n1} "
            f"| {missed} | {feasible_missed} |"
        )
    if args.decisions is not None:
        print("\n| t (s) | desired | reason | message |\n|---:|---:|---|---|")
        for t, desired, reason, message in decisions(
            result, args.decisions, every_tick=args.every_tick
        ):
            print(f"| {t:g} | {desired} | {reason} | {message} |")
    return 0


if __name__ == "__main__":
    exit_with(main)
