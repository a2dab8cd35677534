"""Policies judged on traffic they were not tuned on: tune on some seeds, report on others.

Why: issue 17. A policy tuned on the traces it is judged on proves nothing. For each workload
family (`replay.core.workloads`) and scale, every policy's knob is chosen on the TUNING
seeds (the cheapest knob value whose mean SLO attainment there reaches `--target`, else the
one with the highest attainment), then that one setting is run on the HELD-OUT seeds, which
no choice ever looked at. Everything else is `gpufleet simulate`'s defaults (warm start,
gpufleet filling the nodes it pays for). The held-out seeds also get every knob value, for
the Pareto fronts that the dominance line compares; fronts choose nothing, so they may be
drawn there.

Tuning seeds: 0 and 1. Held-out seeds: 1000 and 1001. Never swap them, never choose a knob,
a default or a policy change by what the held-out columns say.

Run from the repository root:
    python3 -m bench.heldout_bench [--families flash-short,longctx,...] [--scales 1,4,10]
        [--duration 3600] [--jobs 2] [--target 0.99] [--json PATH]
        [--no-chunked-prefill] [--long-prefill-token-threshold N]
Prints a Markdown report on stdout (one table per family and scale).
"""

import argparse
import concurrent.futures
import json
import os
import shlex
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from gpufleet.autoscaler.core import factory as policies
from gpufleet.autoscaler.replay.core import sweep
from gpufleet.autoscaler.replay.core.result import RunResult
from gpufleet.autoscaler.replay.core.workloads import workload_trace
from gpufleet.autoscaler.replay.settings import SimulateSettings

TUNING_SEEDS = (0, 1)
HELDOUT_SEEDS = (1000, 1001)
POLICIES = (policies.HPA, policies.KEDA, policies.GPUFLEET)

# The families the issue names. Lead time is a cold start (60 s) plus node provisioning
# (180 s): flash-short is over before new capacity could serve it, flash-long is not.
FAMILIES = {
    "flash-short": "flash:height=10,length=180",
    "flash-long": "flash:height=10,length=1200",
    "diurnal": "diurnal:peak=4",
    "onoff": "onoff:height=5,on=60,off=300",
    "quiet": "quiet:busy=600,idle=1200",
    "longctx": "longctx",
    "mix": "mix:of=diurnal+flash,flash.height=8",
}


def _spec(family: str, duration: int) -> str:
    spec = FAMILIES[family]
    return f"{spec}{',' if ':' in spec else ':'}duration={duration}"


def _specs(
    family: str,
    scale: int,
    seeds: Sequence[int],
    policy: str,
    duration: int,
    service: dict[str, object],
) -> list[sweep.RunSpec]:
    """Every knob value of `policy` on each seed's trace, planned as `gpufleet simulate
    --sweep` plans them with its defaults (warm start included), `service` the settings
    that differ from them (--no-chunked-prefill, --long-prefill-token-threshold)."""
    # The defaults, without reading env vars.
    defaults = SimulateSettings.model_construct(**service)  # type: ignore[arg-type]
    return sweep.plan(
        [workload_trace(_spec(family, duration), seed=seed, scale=scale) for seed in seeds],
        [policy],
        workload=defaults.workload(),
        config=defaults.sim_config(),
        tuning=defaults.tuning(),
        sweep=True,
        warm_start=defaults.warm_start,
    )


def _run_all(specs: list[sweep.RunSpec], jobs: int) -> list[RunResult]:
    if jobs <= 1:
        return [sweep.run(spec) for spec in specs]
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(sweep.run, specs))


def _mean_by_knob(results: Sequence[RunResult]) -> dict[str, tuple[float, float]]:
    """knob label -> (mean attainment, mean billed GPU-h) over seeds."""
    grouped: dict[str, list[RunResult]] = {}
    for result in results:
        grouped.setdefault(result.knob, []).append(result)
    return {
        knob: (
            statistics.fmean(r.slo_attainment for r in rs),
            statistics.fmean(r.node_gpu_hours for r in rs),
        )
        for knob, rs in grouped.items()
    }


def _mean_feasible_by_knob(results: Sequence[RunResult]) -> dict[str, float]:
    """knob label -> mean attainment over feasible requests (prompts one replica can
    prefill within the SLO), over seeds."""
    grouped: dict[str, list[float]] = {}
    for result in results:
        grouped.setdefault(result.knob, []).append(result.feasible_attainment)
    return {knob: statistics.fmean(values) for knob, values in grouped.items()}


def choose_knob(tuned: dict[str, tuple[float, float]], target: float) -> str:
    """The cheapest knob reaching `target` mean attainment, else the most attaining one."""
    reaching = [(gpu_h, knob) for knob, (att, gpu_h) in tuned.items() if att >= target]
    if reaching:
        return min(reaching)[1]
    return max(tuned.items(), key=lambda kv: (kv[1][0], -kv[1][1]))[0]


def evaluate(
    family: str,
    scale: int,
    *,
    duration: int,
    jobs: int,
    target: float,
    service: dict[str, object] | None = None,
) -> dict:
    rows = []
    fronts: dict[str, tuple[sweep.Point, ...]] = {}
    service = service or {}
    for policy in POLICIES:
        tuning = _specs(family, scale, TUNING_SEEDS, policy, duration, service)
        tuned = _mean_by_knob(_run_all(tuning, jobs))
        chosen = choose_knob(tuned, target)
        held = _run_all(_specs(family, scale, HELDOUT_SEEDS, policy, duration, service), jobs)
        by_knob = _mean_by_knob(held)
        fronts[policy] = sweep.pareto_front(
            sweep.Point(att, gpu_h, knob) for knob, (att, gpu_h) in by_knob.items()
        )
        rows.append(
            {
                "policy": policy,
                "chosen": chosen,
                "tuning": tuned[chosen],
                "heldout": by_knob[chosen],
                "heldout_feasible": _mean_feasible_by_knob(held)[chosen],
            }
        )
    ours = fronts[policies.GPUFLEET]
    dominance = {p: sweep.dominates(ours, fronts[p]) for p in POLICIES if p != policies.GPUFLEET}
    return {"family": family, "scale": scale, "rows": rows, "dominates": dominance}


def markdown(result: dict) -> str:
    lines = [
        f"### {result['family']} at --scale {result['scale']}",
        "",
        "| policy | knob (chosen on tuning seeds) | tuning: attainment / GPU-h "
        "| held-out: attainment / GPU-h | held-out: feasible attainment |",
        "|---|---|---:|---:|---:|",
    ]
    for row in result["rows"]:
        (t_att, t_gpu), (h_att, h_gpu) = row["tuning"], row["heldout"]
        lines.append(
            f"| {row['policy']} | {row['chosen']} | {t_att:.2%} / {t_gpu:.2f} "
            f"| {h_att:.2%} / {h_gpu:.2f} | {row['heldout_feasible']:.2%} |"
        )
    verdicts = ", ".join(
        f"{'dominates' if won else 'does not dominate'} {policy}'s"
        for policy, won in result["dominates"].items()
    )
    lines += ["", f"Held-out fronts: gpufleet's {verdicts}.", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.heldout_bench", description=__doc__)
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--scales", default="1,4,10")
    parser.add_argument("--duration", type=int, default=3600, help="seconds of each trace")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--target", type=float, default=0.99, help="attainment to tune for")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--chunked-prefill",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the simulator's --chunked-prefill (on by default)",
    )
    parser.add_argument(
        "--long-prefill-token-threshold",
        type=int,
        default=0,
        help="the simulator's --long-prefill-token-threshold (0: vLLM's default, no cap)",
    )
    args = parser.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        parser.error(f"unknown family {unknown[0]!r}; known: {', '.join(FAMILIES)}")
    scales = [int(s) for s in args.scales.split(",") if s]
    service = {
        "chunked_prefill": args.chunked_prefill,
        "long_prefill_token_threshold": args.long_prefill_token_threshold,
    }
    results = [
        evaluate(
            family,
            scale,
            duration=args.duration,
            jobs=args.jobs,
            target=args.target,
            service=service,
        )
        for family in families
        for scale in scales
    ]
    command = shlex.join(["python3", "-m", "bench.heldout_bench", *(argv or sys.argv[1:])])
    print(f"Reproduce: `{command}`\n")
    print(
        f"Tuning seeds {', '.join(map(str, TUNING_SEEDS))}; held-out seeds "
        f"{', '.join(map(str, HELDOUT_SEEDS))}; target {args.target:.1%}; "
        f"{args.duration} s per trace.\n"
    )
    for result in results:
        print(markdown(result))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
