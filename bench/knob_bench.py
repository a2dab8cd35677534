"""The target-attainment knob on every workload family: monotone on the tuning seeds, then
the default and the top on the held-out seeds; and what forgetting a crowd saves.

Why: issue 17, section 3. The knob must buy standing capacity monotonically from the
cheapest point to >= 99.9% on every family. Its anchors (`gpufleet/autoscaler/core/knob.py`)
were chosen on the TUNING seeds of bench/heldout_bench.py (0, 1); this prints the sweep
there, then runs only the default (99%) and the top values on the HELD-OUT seeds (1000,
1001), which no choice looked at. `--forget` adds, on the held-out flash families, the
default with and without forgetting a crowd by evidence (`ForecastSettings.
forget_after_blocks` 0 is the old memory).

Run from the repository root:
    python3 -m bench.knob_bench [--families flash-short,...] [--scales 1,4]
        [--duration 1800] [--jobs 2] [--top 0.999,0.9995] [--forget]
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

from bench.heldout_bench import FAMILIES, HELDOUT_SEEDS, TUNING_SEEDS, _spec
from gpufleet.autoscaler.core import factory as policies
from gpufleet.autoscaler.core import knob
from gpufleet.autoscaler.core.gpufleet_policy import GpufleetPolicy, GpufleetSettings
from gpufleet.autoscaler.replay.core import sweep
from gpufleet.autoscaler.replay.core.engine import simulate
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


def _run_forget(spec_and_blocks: tuple[sweep.RunSpec, int]) -> tuple[float, float]:
    """The default policy with `forget_after_blocks` set: (attainment, billed GPU-h)."""
    spec, blocks = spec_and_blocks
    settings = GpufleetSettings(fill_nodes=spec.tuning.gpufleet_fill_nodes)
    forecast = dataclasses.replace(settings.forecast, forget_after_blocks=blocks)
    policy = GpufleetPolicy(
        spec.workload, settings=dataclasses.replace(settings, forecast=forecast)
    )
    r = simulate(spec.trace, policy, workload=spec.workload, config=spec.config)
    return r.slo_attainment, r.node_gpu_hours


def _mean(pairs: Sequence[tuple[float, float]]) -> tuple[float, float]:
    return statistics.fmean(p[0] for p in pairs), statistics.fmean(p[1] for p in pairs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.knob_bench", description=__doc__)
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--scales", default="1,4")
    parser.add_argument("--duration", type=int, default=1800, help="seconds of each trace")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--top", default="0.999,0.9995", help="top targets to hold out")
    parser.add_argument("--forget", action="store_true", help="also the forgetting ablation")
    args = parser.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    if unknown := [f for f in families if f not in FAMILIES]:
        parser.error(f"unknown family {unknown[0]!r}; known: {', '.join(FAMILIES)}")
    scales = [int(s) for s in args.scales.split(",") if s]
    held_knobs = [policies.knob_label(policies.GPUFLEET, knob.DEFAULT_TARGET)] + [
        policies.knob_label(policies.GPUFLEET, float(t)) for t in args.top.split(",") if t
    ]
    grid = [(f, s) for f in families for s in scales]
    tuning = {key: _plan(*key, TUNING_SEEDS, args.duration) for key in grid}
    held = {
        key: [p for p in _plan(*key, HELDOUT_SEEDS, args.duration) if p.knob in held_knobs]
        for key in grid
    }
    flat = [s for specs in (*tuning.values(), *held.values()) for s in specs]
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = dict(zip(map(id, flat), pool.map(sweep.run, flat), strict=True))
        forget: dict[tuple[str, int], list[tuple[float, float]]] = {}
        if args.forget:
            default = held_knobs[0]
            jobs = [
                (key, (spec, blocks))
                for key in grid
                if key[0].startswith("flash")
                for spec in held[key]
                if spec.knob == default
                for blocks in (0, GpufleetSettings().forecast.forget_after_blocks)
            ]
            for (key, _), out in zip(
                jobs, pool.map(_run_forget, [j for _, j in jobs]), strict=True
            ):
                forget.setdefault(key, []).append(out)
    command = shlex.join(["python3", "-m", "bench.knob_bench", *(argv or sys.argv[1:])])
    print(f"Reproduce: `{command}`\n")
    print("Tuning seeds, mean attainment / billed GPU-h per target attainment:\n")
    for key, specs in tuning.items():
        by_knob: dict[str, list[tuple[float, float]]] = {}
        for spec in specs:
            r = results[id(spec)]
            by_knob.setdefault(r.knob, []).append((r.slo_attainment, r.node_gpu_hours))
        cells = " | ".join(
            f"{k.split('=')[1]}: {a:.2%} / {g:.2f}"
            for k, (a, g) in ((k, _mean(v)) for k, v in by_knob.items())
        )
        print(f"- {key[0]} x{key[1]}: {cells}")
    print("\nHeld-out seeds, mean attainment / billed GPU-h:\n")
    print("| family | scale | " + " | ".join(held_knobs) + " |")
    print("|---|---:|" + "---:|" * len(held_knobs))
    for key, specs in held.items():
        by_knob = {}
        for spec in specs:
            r = results[id(spec)]
            by_knob.setdefault(r.knob, []).append((r.slo_attainment, r.node_gpu_hours))
        cells = " | ".join("{:.2%} / {:.2f}".format(*_mean(by_knob[k])) for k in held_knobs)
        print(f"| {key[0]} | {key[1]} | {cells} |")
    if forget:
        print("\nForgetting a crowd, held-out seeds, default target (old memory -> evidence):\n")
        for key, outs in forget.items():
            (a0, g0), (a1, g1) = _mean(outs[0::2]), _mean(outs[1::2])
            print(f"- {key[0]} x{key[1]}: {a0:.2%} / {g0:.2f} -> {a1:.2%} / {g1:.2f} GPU-h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
