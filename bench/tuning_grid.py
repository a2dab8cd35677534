"""One policy's whole sweep on the TUNING seeds, every family and scale: where a policy
change is judged before the held-out grid ever runs it.

Why: issue 17. A change is chosen on the tuning seeds (0, 1) of bench/heldout_bench.py,
never on the held-out ones. The held-out grid runs every policy and the oracle (about 35
minutes on two cores); one policy's sweep on the tuning seeds alone takes about 8, so a
change can be tried against the code before it, and its effect on each point read, before
the held-out grid reports it.

Run from the repository root:
    python3 -m bench.tuning_grid [--policy gpufleet] [--families F,...] [--scales 1,4,10]
        [--knobs V,...] [--duration 1800] [--jobs 2] [--routing least-tokens]
        [--set KEY=VALUE ...] --json OUT.json
    python3 -m bench.tuning_grid --compare BEFORE.json AFTER.json
    python3 -m bench.tuning_grid --unmatched OURS.json[,MORE.json] BASELINE.json[,...]
    python3 -m bench.tuning_grid --choose OURS.json CANDIDATES.json BASELINE.json
    python3 -m bench.tuning_grid --inversions OURS.json
The first writes each (family, scale, knob)'s mean attainment and billed GPU-h over the
tuning seeds, and both on each seed, for the policy's sweep or the knob values given (to
try where to sample it); `--set` changes one of gpufleet's settings on top of what each
knob value maps it to (`--set feedback.wait_share=0.035`), so a setting is tried without
editing the policy; the second prints the points that moved, and a count of those better
on both axes, worse on both, and traded; the third prints, per family and scale, the
baseline's points that no point of ours matches (at least its attainment for no more
GPU-h: issue 17's dominance, judged on the tuning seeds), and their count. Several files
on one side are one grid (a sweep and the extra knob values tried beside it). The fourth
is where to sample the knob (BENCHMARKS.md, "Where the knob is sampled"): each knob value
of the candidates' grid (a `--knobs` run) judged alone beside ours, the baseline points it
newly matches, and the values chosen greedily (the one that leaves the fewest unmatched,
then the one that does beside it, while each leaves fewer). The fifth checks issue 17's
knob that "buys standing capacity monotonically": per family and scale, the points where a
higher target costs more than `INVERSION_COST_SHARE` less than some lower target did and
attains less than the best lower target did (by the table's last digit or more): a user
who raises the target there pays less and loses requests; beside each, its attainment less
that best lower target's on each tuning seed, which says whether both seeds show it.
gpufleet's knob only: a higher target attainment must buy more (HPA's and KEDA's targets
run the other way).
"""

import argparse
import concurrent.futures
import dataclasses
import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench import overrides
from bench.entry import exit_with
from bench.heldout_bench import (
    _VISIBLE_ATTAINMENT,
    _VISIBLE_GPU_HOURS,
    FAMILIES,
    TUNING_SEEDS,
    _specs,
    knob_inversions,
)
from gpufleet.autoscaler.core import factory as policies
from gpufleet.autoscaler.replay.core import sweep
from gpufleet.autoscaler.replay.core.model import ROUTINGS

Key = tuple[str, int, float]  # family, scale, knob value
Runs = tuple[tuple[float, float], ...]  # per tuning seed, in order: (attainment, billed GPU-h)


def _run(job: tuple[sweep.RunSpec, Sequence[overrides.Override]]) -> tuple[float, float]:
    spec, changes = job
    result = sweep.run(spec, policy=overrides.tuned_policy(spec, changes))
    return result.slo_attainment, result.node_gpu_hours


def grid(
    policy: str,
    families: Sequence[str],
    scales: Sequence[int],
    *,
    duration: int,
    jobs: int,
    knobs: Sequence[float] = (),
    routing: str = ROUTINGS[0],
    changes: Sequence[overrides.Override] = (),
) -> dict[Key, Runs]:
    """(family, scale, knob) -> (attainment, billed GPU-h) on each tuning seed, at each value
    of the policy's sweep, or at `knobs` where given, with the simulator's `routing`, and
    gpufleet's settings `changes` on top of what each knob value maps to."""
    specs = [
        (family, scale, spec)
        for family in families
        for scale in scales
        for spec in _specs(family, scale, TUNING_SEEDS, policy, duration, {"routing": routing})
    ]
    if knobs:  # one planned run per trace, at each value asked for instead
        traces = {(f, s, spec.trace.name): (f, s, spec) for f, s, spec in specs}.values()
        specs = [
            (f, s, dataclasses.replace(spec, knob_value=k)) for f, s, spec in traces for k in knobs
        ]
    keyed = [((f, s, float(spec.knob_value)), spec) for f, s, spec in specs]
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(_run, [(spec, changes) for _, spec in keyed]))
    by_key: dict[Key, list[tuple[float, float]]] = {}
    for (key, _), result in zip(keyed, results, strict=True):
        by_key.setdefault(key, []).append(result)
    return {key: tuple(rs) for key, rs in by_key.items()}


def _mean(runs: Runs) -> tuple[float, float]:
    return statistics.fmean(a for a, _ in runs), statistics.fmean(g for _, g in runs)


def compare(before: dict[Key, tuple[float, float]], after: dict[Key, tuple[float, float]]) -> str:
    """Markdown: each point that moved (on either axis, by the table's last digit or more),
    then the count of unchanged, better, worse and traded ones."""
    lines = [
        "| family | scale | knob | before: attainment / GPU-h | after |",
        "|---|---:|---:|---:|---:|",
    ]
    counts = {"unchanged": 0, "better": 0, "worse": 0, "traded": 0}
    for key in sorted(before.keys() & after.keys()):
        (a0, g0), (a1, g1) = before[key], after[key]
        if abs(a1 - a0) < _VISIBLE_ATTAINMENT and abs(g1 - g0) < _VISIBLE_GPU_HOURS:
            counts["unchanged"] += 1
            continue
        if a1 >= a0 and g1 <= g0:
            counts["better"] += 1
        elif a1 <= a0 and g1 >= g0:
            counts["worse"] += 1
        else:
            counts["traded"] += 1
        family, scale, value = key
        lines.append(
            f"| {family} | {scale} | {value:g} | {a0:.2%} / {g0:.2f} | {a1:.2%} / {g1:.2f} |"
        )
    summary = ", ".join(f"{n} {what}" for what, n in counts.items())
    return "\n".join(lines) + f"\n\n{summary}\n"


def _uncovered(
    ours: dict[Key, tuple[float, float]], baseline: dict[Key, tuple[float, float]]
) -> dict[tuple[str, int], list[sweep.Point]]:
    """Per (family, scale) that both grids ran, the baseline points no point of ours matches
    or beats on both axes."""
    cells = sorted({(f, s) for f, s, _ in baseline} & {(f, s) for f, s, _ in ours})
    return {
        cell: sweep.uncovered(sweep.pareto_front(_points(ours, cell)), _points(baseline, cell))
        for cell in cells
    }


def unmatched(
    ours: dict[Key, tuple[float, float]], baseline: dict[Key, tuple[float, float]]
) -> str:
    """Markdown: per (family, scale) that both grids ran, the baseline points no point of
    ours matches or beats on both axes, then their count."""
    by_cell = _uncovered(ours, baseline)
    lines = [
        f"- {f} x{s}: "
        + ", ".join(f"{p.label}: {p.attainment:.2%} / {p.gpu_hours:.2f}" for p in missed)
        for (f, s), missed in by_cell.items()
        if missed
    ]
    total = sum(len(missed) for missed in by_cell.values())
    return "\n".join(
        [*lines, f"\nunmatched baseline points: {total}, in {len(by_cell)} family-scale cells\n"]
    )


def choose(
    ours: dict[Key, tuple[float, float]],
    candidates: dict[Key, tuple[float, float]],
    baseline: dict[Key, tuple[float, float]],
) -> str:
    """Markdown: each knob value of `candidates` judged alone beside `ours` (the baseline
    points it leaves unmatched, and those it newly matches), then the values chosen
    greedily while each leaves fewer unmatched (ties: the lower value)."""

    def missed(values: set[float]) -> set[tuple[str, int, str]]:
        grid = {**ours, **{k: v for k, v in candidates.items() if k[2] in values}}
        return {(f, s, p.label) for (f, s), pts in _uncovered(grid, baseline).items() for p in pts}

    before = missed(set())
    values = sorted({k for _, _, k in candidates})
    lines = ["| added value | unmatched baseline points | newly matched |", "|---|---:|---|"]
    for value in values:
        after = missed({value})
        newly = ", ".join(f"{f} x{s} {label}" for f, s, label in sorted(before - after))
        lines.append(f"| {value:g} | {len(after)} | {newly or 'none'} |")
    chosen: list[float] = []
    left = len(before)
    while rest := [v for v in values if v not in chosen]:
        count, value = min((len(missed({*chosen, v})), v) for v in rest)
        if count >= left:
            break
        chosen.append(value)
        left = count
    picked = ", ".join(f"{v:g}" for v in chosen) or "none"
    lines.append(
        f"\nunmatched baseline points: {len(before)} without them; chosen greedily: {picked} "
        f"({left} unmatched)\n"
    )
    return "\n".join(lines)


def inversions(grid: dict[Key, tuple[float, float]], runs: Mapping[Key, Runs] | None = None) -> str:
    """Markdown: per family and scale, each point where a higher knob value costs over
    `INVERSION_COST_SHARE` less than a lower one did and attains less than the best lower
    one did (`sweep.inversions`), with its attainment less that one's on each tuning seed
    (from `runs`; "-" where they are not known), then their count."""
    seeds = ", ".join(map(str, TUNING_SEEDS))
    lines = [
        "| family | scale | knob | attainment / GPU-h | below it: best attainment / most GPU-h "
        f"| seed by seed ({seeds}): attainment less that best's |",
        "|---|---:|---:|---:|---:|---|",
    ]
    count = 0
    for family, scale in sorted({(f, s) for f, s, _ in grid}):
        points = sorted(_points(grid, (family, scale)), key=lambda p: float(p.label))
        found = knob_inversions(points)
        count += len(found)
        lines += [
            f"| {family} | {scale} | {i.point.label} "
            f"| {i.point.attainment:.2%} / {i.point.gpu_hours:.2f} "
            f"| {i.best_below.attainment:.2%} / {i.most_below:.2f} "
            f"| {_seed_by_seed(runs or {}, (family, scale), i)} |"
            for i in found
        ]
    return "\n".join([*lines, f"\nknob inversions: {count}\n"])


def _seed_by_seed(runs: Mapping[Key, Runs], cell: tuple[str, int], i: sweep.Inversion) -> str:
    """An inversion's attainment less the best lower target's on each seed, in points; "-"
    without both points' runs."""
    a, b = (
        [att for att, _ in runs.get((*cell, float(p.label)), ())] for p in (i.point, i.best_below)
    )
    if not a or len(a) != len(b):
        return "-"
    return ", ".join(f"{d * 100:+.2f}" for d in sweep.seed_differences(a, b))


def _points(grid: dict[Key, tuple[float, float]], cell: tuple[str, int]) -> list[sweep.Point]:
    return [sweep.Point(a, g, f"{k:g}") for (f, s, k), (a, g) in grid.items() if (f, s) == cell]


def _save(path: Path, runs: dict[Key, Runs]) -> None:
    """Each point as [family, scale, knob, mean attainment, mean GPU-h, runs seed by seed]."""
    path.write_text(
        json.dumps([[*key, *_mean(rs), [list(r) for r in rs]] for key, rs in sorted(runs.items())])
    )


def _read(paths: str, flag: str) -> dict[Key, tuple[tuple[float, float], Runs]]:
    """One grid from the comma-separated --json files `paths` (later files win a key): each
    point's means and its runs seed by seed (none from a file that predates them)."""
    grid: dict[Key, tuple[tuple[float, float], Runs]] = {}
    for path in paths.split(","):
        try:
            rows = json.loads(Path(path).read_text())
            grid.update(
                {
                    (str(f), int(s), float(k)): (
                        (float(a), float(g)),
                        tuple((float(x), float(y)) for x, y in (runs[0] if runs else ())),
                    )
                    for f, s, k, a, g, *runs in rows
                }
            )
        except (OSError, ValueError, TypeError) as err:
            raise SystemExit(f"{flag} {path}: not a --json of bench.tuning_grid ({err})") from None
    return grid


def _load(paths: str, flag: str = "--compare") -> dict[Key, tuple[float, float]]:
    """The means of `_read`."""
    return _means(_read(paths, flag))


def _means(read: dict[Key, tuple[tuple[float, float], Runs]]) -> dict[Key, tuple[float, float]]:
    return {key: means for key, (means, _) in read.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default=policies.GPUFLEET, choices=policies.POLICIES)
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--scales", default="1,4,10")
    parser.add_argument("--knobs", default="", help="knob values instead of the policy's sweep")
    parser.add_argument("--duration", type=int, default=1800)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--routing",
        choices=ROUTINGS,
        default=ROUTINGS[0],
        help="the simulator's --routing (least-in-flight by default)",
    )
    overrides.add_flag(
        parser,
        help="a gpufleet setting on top of what each knob value maps to (GpufleetSettings, "
        "dotted into forecast., capacity. and feedback.), to try it without a rebuild",
    )
    parser.add_argument("--json", type=Path, help="write the grid here")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--unmatched", nargs=2, metavar=("OURS", "BASELINE"))
    parser.add_argument("--choose", nargs=3, metavar=("OURS", "CANDIDATES", "BASELINE"))
    parser.add_argument("--inversions", metavar="OURS")
    args = parser.parse_args(argv)
    if args.compare:
        print(compare(_load(args.compare[0]), _load(args.compare[1])), end="")
        return 0
    if args.unmatched:
        ours, theirs = (_load(paths, "--unmatched") for paths in args.unmatched)
        print(unmatched(ours, theirs), end="")
        return 0
    if args.choose:
        ours, candidates, theirs = (_load(paths, "--choose") for paths in args.choose)
        print(choose(ours, candidates, theirs), end="")
        return 0
    if args.inversions:
        read = _read(args.inversions, "--inversions")
        print(inversions(_means(read), {key: rs for key, (_, rs) in read.items() if rs}), end="")
        return 0
    if args.json is None:
        parser.error(
            "--json is required unless --compare, --unmatched, --choose or --inversions is given"
        )
    families = args.families.split(",")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        parser.error(f"--families: unknown {', '.join(unknown)} (known: {', '.join(FAMILIES)})")
    try:
        scales = [int(s) for s in args.scales.split(",")]
    except ValueError:
        parser.error(f"--scales: not a comma list of integers: {args.scales!r}")
    try:
        knobs = [float(k) for k in args.knobs.split(",")] if args.knobs else []
    except ValueError:
        parser.error(f"--knobs: not a comma list of numbers: {args.knobs!r}")
    try:
        overrides.check(args.policy, args.set)
    except overrides.SettingError as exc:
        parser.error(str(exc))
    runs = grid(
        args.policy,
        families,
        scales,
        duration=args.duration,
        jobs=args.jobs,
        knobs=knobs,
        routing=args.routing,
        changes=args.set,
    )
    _save(args.json, runs)
    return 0


if __name__ == "__main__":
    exit_with(main)
