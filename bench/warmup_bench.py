"""Where each policy's misses fall: in the warm-up, or once it has had time to act.

Why: issue 17, section 3. Every run of the held-out bench starts warm, with the replicas
the first minutes need (`oracle.warm_start_replicas`), the same for every policy. No
policy's replicas serve before a cold start plus node provisioning (the lead time), so
whatever the warm start misses in that first stretch is lost alike under any policy (until
2026-11-28 it was the oracle's bound, which pooled prefill across replicas and started
long-context traffic short). This splits attainment over feasible requests (prompts one idle replica
prefills within the SLO) at the lead time: before it, the warm start's; after it, the
policy's. Each policy runs at the knob `bench.heldout_bench` chooses on the tuning seeds
(0, 1), or with `--defaults` at its default setting (HPA 70%, KEDA 10, gpufleet's own
headroom), judged on the held-out seeds (1000, 1001).

Run from the repository root:
    python3 -m bench.warmup_bench [--families longctx] [--scales 1,4] [--duration 1800]
        [--jobs 2] [--defaults]
Prints a Markdown table on stdout.
"""

import argparse
import statistics
from collections.abc import Sequence

from bench import heldout_bench
from bench.cost_at_slo import split
from bench.entry import exit_with
from gpufleet.autoscaler.core import factory as policies
from gpufleet.autoscaler.core import knob
from gpufleet.autoscaler.core.factory import Tuning

# Each policy's default setting, as `gpufleet simulate` runs it without a sweep.
DEFAULTS = {
    policies.HPA: Tuning().hpa_target_util,
    policies.KEDA: Tuning().keda_queue_target,
    policies.GPUFLEET: knob.DEFAULT_TARGET,
}


def evaluate(
    family: str, scale: int, *, duration: int, jobs: int, target: float, defaults: bool
) -> list[str]:
    rows = []
    for policy in heldout_bench.POLICIES:
        if defaults:
            chosen = policies.knob_label(policy, DEFAULTS[policy])
        else:
            tuning = heldout_bench._specs(
                family, scale, heldout_bench.TUNING_SEEDS, policy, duration, {}
            )
            chosen = heldout_bench.choose_knob(
                heldout_bench._mean_by_knob([r for r, _ in heldout_bench._run_all(tuning, jobs)]),
                target,
            )
        held = [
            s
            for s in heldout_bench._specs(
                family, scale, heldout_bench.HELDOUT_SEEDS, policy, duration, {}
            )
            if s.knob == chosen
        ]
        results = [r for r, _ in heldout_bench._run_all(held, jobs)]
        parts = [split(s, r) for s, r in zip(held, results, strict=True)]
        rows.append(
            f"| {family} | {scale} | {policy} ({chosen}) "
            f"| {statistics.fmean(r.feasible_attainment for r in results):.2%} "
            f"| {statistics.fmean(p[0] for p in parts):.2%} "
            f"| {statistics.fmean(p[1] for p in parts):.2%} "
            f"| {statistics.fmean(r.node_gpu_hours for r in results):.2f} |"
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.warmup_bench", description=__doc__)
    parser.add_argument("--families", default="longctx")
    parser.add_argument("--scales", default="1,4")
    parser.add_argument("--duration", type=int, default=1800, help="seconds of each trace")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--target", type=float, default=0.99, help="attainment to tune for")
    parser.add_argument(
        "--defaults", action="store_true", help="each policy at its default, no tuning"
    )
    args = parser.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    unknown = [f for f in families if f not in heldout_bench.FAMILIES]
    if unknown:
        parser.error(f"unknown family {unknown[0]!r}; known: {', '.join(heldout_bench.FAMILIES)}")
    lines = [
        "| family | scale | policy (knob) | feasible attainment | before the lead time "
        "| after it | GPU-h |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for family in families:
        for scale in (int(s) for s in args.scales.split(",") if s):
            lines += evaluate(
                family,
                scale,
                duration=args.duration,
                jobs=args.jobs,
                target=args.target,
                defaults=args.defaults,
            )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    exit_with(main)
