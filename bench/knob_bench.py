"""The target-attainment knob on every workload family: monotone on the tuning seeds, then
the default and the top on the held-out seeds; and what forgetting a crowd saves.

Why: issue 17, section 3. The knob must buy standing capacity monotonically from the
cheapest point to >= 99.9% on every family. Its anchors (`gpufleet/autoscaler/core/knob.py`)
were chosen on the TUNING seeds of bench/heldout_bench.py (0, 1); this prints the sweep
there, then runs only the default (99%) and the top values on the HELD-OUT seeds (1000,
1001), which no choice looked at. `--forget` adds (`--forget-only`: runs only), on the
held-out flash families, those targets with and without forgetting a crowd by evidence
(`ForecastSettings.forget_after_blocks` 0 is the old memory).

Run from the repository root:
    python3 -m bench.knob_bench [--families flash-short,...] [--scales 1,4]
        [--duration 1800] [--jobs 2] [--top 0.999,0.9995] [--forget | --forget-only]
Prints Markdown on stdout.
"""

import argparse
import concurrent.futures
import dataclasses
import os
import shlex
import statistics
import sys
from collections.abc import Sequence

from bench.entry import exit_with
from bench.heldout_bench import FAMILIES, HELDOUT_SEEDS, TUNING_SEEDS, _spec
from gpufleet.autoscaler.core import factory as policies
from gpufleet.autoscaler.core import knob
from gpufleet.autoscaler.core.gpufleet_policy import GpufleetPolicy
from gpufleet.autoscaler.core.gpufleet_settings import GpufleetSettings
from gpufleet.autoscaler.replay.core import sweep
from gpufleet.autoscaler.replay.core.engine import simulate
from gpufleet.autoscaler.replay.core.result import RunResult
from gpufleet.autoscaler.replay.core.workloads import workload_trace
from gpufleet.autoscaler.replay.settings import SimulateSettings

DEFAULTS = SimulateSettings.model_construct()  # `gpufleet simulate`'s, without env vars


def _plan(family: str, scale: int, seeds: Sequence[int], duration: int) -> list[sweep.RunSpec]:
    """Every knob value of gpufleet on each seed's trace, as `gpufleet simulate --sweep`."""
    return sweep.plan(
        [workload_trace(_spec(family, duration), seed=s, scale=scale) for s in seeds],
        [policies.GPUFLEET],
        workload=DEFAULTS.workload(),
        config=DEFAULTS.sim_config(),
        tuning=DEFAULTS.tuning(),
        sweep=True,
        warm_start=DEFAULTS.warm_start,
    )


def _run_forget(job: tuple[sweep.RunSpec, bool]) -> tuple[float, float, float]:
    """A held-out sweep point's policy with forgetting by evidence on or off (off: the old
    memory, `forget_after_blocks` 0): (attainment, billed GPU-h, replica GPU-h). Replica
    GPU-h are what a shared pool gets back; billed ones move only by whole nodes."""
    spec, forget = job
    assert spec.knob_value is not None  # every held-out spec is a sweep point
    settings = knob.apply(
        GpufleetSettings(fill_nodes=spec.tuning.gpufleet_fill_nodes), spec.knob_value
    )
    if not forget:
        forecast = dataclasses.replace(settings.forecast, forget_after_blocks=0)
        settings = dataclasses.replace(settings, forecast=forecast)
    workload = dataclasses.replace(spec.workload, target_attainment=None)  # applied above
    r = simulate(
        spec.trace,
        GpufleetPolicy(workload, settings=settings),
        workload=workload,
        config=spec.config,
    )
    return r.slo_attainment, r.node_gpu_hours, r.replica_gpu_hours


def _mean(pairs: Sequence[tuple[float, float]]) -> tuple[float, float]:
    return statistics.fmean(p[0] for p in pairs), statistics.fmean(p[1] for p in pairs)


def _by_knob(
    specs: Sequence[sweep.RunSpec], results: dict[int, RunResult]
) -> dict[str, tuple[float, float]]:
    """knob label -> (mean attainment, mean billed GPU-h) over the specs' seeds."""
    grouped: dict[str, list[tuple[float, float]]] = {}
    for spec in specs:
        r = results[id(spec)]
        grouped.setdefault(r.knob, []).append((r.slo_attainment, r.node_gpu_hours))
    return {k: _mean(v) for k, v in grouped.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.knob_bench", description=__doc__)
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--scales", default="1,4")
    parser.add_argument("--duration", type=int, default=1800, help="seconds of each trace")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--top", default="0.999,0.9995", help="top targets to hold out")
    parser.add_argument("--forget", action="store_true", help="also the forgetting ablation")
    parser.add_argument("--forget-only", action="store_true", help="only that ablation")
    args = parser.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    if unknown := [f for f in families if f not in FAMILIES]:
        parser.error(f"unknown family {unknown[0]!r}; known: {', '.join(FAMILIES)}")
    scales = [int(s) for s in args.scales.split(",") if s]
    held_knobs = [policies.knob_label(policies.GPUFLEET, knob.DEFAULT_TARGET)] + [
        policies.knob_label(policies.GPUFLEET, float(t)) for t in args.top.split(",") if t
    ]
    grid = [(f, s) for f in families for s in scales]
    tuning = {} if args.forget_only else {k: _plan(*k, TUNING_SEEDS, args.duration) for k in grid}
    held = {
        key: [p for p in _plan(*key, HELDOUT_SEEDS, args.duration) if p.knob in held_knobs]
        for key in grid
    }
    runs = [] if args.forget_only else [s for v in (*tuning.values(), *held.values()) for s in v]
    ablation = [
        ((key, spec.knob), (spec, forget))
        for key in grid
        if (args.forget or args.forget_only) and key[0].startswith("flash")
        for spec in held[key]
        for forget in (False, True)
    ]
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = dict(zip(map(id, runs), pool.map(sweep.run, runs), strict=True))
        forgot = list(pool.map(_run_forget, [job for _, job in ablation]))
    command = shlex.join(["python3", "-m", "bench.knob_bench", *(argv or sys.argv[1:])])
    print(f"Reproduce: `{command}`\n")
    if not args.forget_only:
        print("Tuning seeds, mean attainment / billed GPU-h per target attainment:\n")
        for key, specs in tuning.items():
            cells = " | ".join(
                f"{k.split('=')[1]}: {a:.2%} / {g:.2f}"
                for k, (a, g) in _by_knob(specs, results).items()
            )
            print(f"- {key[0]} x{key[1]}: {cells}")
        print("\nHeld-out seeds, mean attainment / billed GPU-h:\n")
        print("| family | scale | " + " | ".join(held_knobs) + " |")
        print("|---|---:|" + "---:|" * len(held_knobs))
        for key, specs in held.items():
            means = _by_knob(specs, results)
            cells = " | ".join("{:.2%} / {:.2f}".format(*means[k]) for k in held_knobs)
            print(f"| {key[0]} | {key[1]} | {cells} |")
    if ablation:
        grouped: dict[tuple[tuple[str, int], str], list[tuple[float, float, float]]] = {}
        for (label, _), out in zip(ablation, forgot, strict=True):
            grouped.setdefault(label, []).append(out)
        print("\nForgetting a crowd, held-out seeds (old memory -> forgetting by evidence):\n")
        for ((family, scale), label), outs in grouped.items():
            old, new = outs[0::2], outs[1::2]
            (a0, g0), (a1, g1) = _mean([o[:2] for o in old]), _mean([o[:2] for o in new])
            r0, r1 = (statistics.fmean(o[2] for o in runs) for runs in (old, new))
            print(
                f"- {family} x{scale} {label}: {a0:.2%} / {g0:.2f} -> {a1:.2%} / {g1:.2f} "
                f"billed GPU-h ({g0 - g1:+.2f} saved); replica GPU-h {r0:.2f} -> {r1:.2f} "
                f"({r0 - r1:+.2f} saved)"
            )
    return 0


if __name__ == "__main__":
    exit_with(main)
