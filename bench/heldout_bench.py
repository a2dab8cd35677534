"""Policies judged on traffic they were not tuned on: tune on some seeds, report on others.

Why: issue 17. A policy tuned on the traces it is judged on proves nothing. For each workload
family (`replay.core.workloads`) and scale, every policy's knob is chosen on the TUNING
seeds (the cheapest knob value whose mean SLO attainment there reaches `--target`, else the
one with the highest attainment), then that one setting is run on the HELD-OUT seeds, which
no choice ever looked at. Everything else is `gpufleet simulate`'s defaults (warm start,
gpufleet filling the nodes it pays for), except that KEDA runs with `minReplicaCount: 0`
on the families with quiet periods (`FAMILY_TUNING`), as it is deployed for them. The
held-out seeds also get every knob value, for the Pareto fronts that the front comparison
uses; fronts choose nothing, so they may be drawn there.

The oracle's replay runs on the held-out seeds too (it chooses nothing), so every chosen
setting gets an "x oracle (billed)", and gpufleet at its default target (0.99) is judged
against issue 17's "Cost at the SLO" (`bench.cost_at_slo`).

Front comparison: at each point of gpufleet's held-out front, the GPU-hours a baseline's
front needs for the same attainment, linear between the two baseline points around it
(`sweep.cost_at`); gpufleet is strictly better where that is more than its own cost.
Each baseline point gpufleet's front does not match names how near the front comes to it
and on which held-out seeds gpufleet's nearest front points match it: two seeds are few,
and a point missed on their mean but matched on one of them is missed within their spread.

Tuning seeds: 0 and 1. Held-out seeds: 1000 and 1001 (`--heldout-seeds` judges on others,
say 1000-1005, to see how much a verdict owes to two seeds). Never swap them, never choose a
knob, a default or a policy change by what the held-out columns say.

Run from the repository root:
    python3 -m bench.heldout_bench [--families flash-short,longctx,...] [--scales 1,4,10]
        [--duration 3600] [--jobs 2] [--target 0.99] [--json PATH] [--heldout-seeds 1000,1001]
        [--no-chunked-prefill] [--long-prefill-token-threshold N] [--routing least-tokens]
    python3 -m bench.heldout_bench --merge a.json b.json ...
    python3 -m bench.heldout_bench --rerun gpufleet a.json [--jobs 2] [--json PATH]
Prints a Markdown report on stdout: one table per family (every scale and policy, the
oracle and gpufleet's default included, with the simulator's CPU seconds per policy-hour),
then the front comparison per scale and gpufleet's knob inversions held out (section 3:
where a higher target costs less and attains less; `knob_inversions`; each with its
difference from the best lower target seed by seed and that mean's standard error, so a
gap within the seeds' spread shows as one), then the section-4 verdicts: the baseline
points not matched, per family and scale, and the cost at the SLO; last, which baseline
settings are over the cost bound that target puts on gpufleet's default, and how many of
the points not matched they are (informative: no verdict moves). The full grid (7 families
x 3 scales) is long on a small machine; shard it with --families/--scales and --json, and
print one report from the shards with --merge. After a change to one policy, --rerun runs
that policy's rows of a shard again and keeps the rest.
"""

import argparse
import concurrent.futures
import dataclasses
import functools
import json
import os
import shlex
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from bench import cost_at_slo
from bench.entry import exit_with
from gpufleet.autoscaler.core import factory as policies
from gpufleet.autoscaler.core import knob
from gpufleet.autoscaler.replay.core import report as sim_report
from gpufleet.autoscaler.replay.core import sweep
from gpufleet.autoscaler.replay.core.model import ROUTINGS
from gpufleet.autoscaler.replay.core.result import RunResult
from gpufleet.autoscaler.replay.core.workloads import workload_trace
from gpufleet.autoscaler.replay.settings import SimulateSettings

TUNING_SEEDS = (0, 1)
HELDOUT_SEEDS = (1000, 1001)
POLICIES = (policies.HPA, policies.KEDA, policies.GPUFLEET)
BASELINES = (policies.HPA, policies.KEDA)
# A saving smaller than the report's last digit is not one: equal runs differ by float noise.
_VISIBLE_GPU_HOURS = 0.005
# Nor is a move in attainment smaller than the last digit of its percentage.
_VISIBLE_ATTAINMENT = 0.00005
# A higher target that costs this share less than a lower one is a knob inversion (with
# less attainment); smaller differences are the seeds' noise in billed node-hours.
INVERSION_COST_SHARE = 0.03

# The families the issue names. Lead time is a cold start (60 s) plus node provisioning
# (180 s): flash-short is over before new capacity could serve it, flash-long is not. The
# mix is a diurnal day with a flash crowd on top, and longctx's heavy prompt tail (3% of
# prompts from a Pareto tail over 30k tokens) under a chat-sized body.
FAMILIES = {
    "flash-short": "flash:height=10,length=180",
    "flash-long": "flash:height=10,length=1200",
    "diurnal": "diurnal:peak=4",
    "onoff": "onoff:height=5,on=60,off=300",
    "quiet": "quiet:busy=600,idle=1200",
    "longctx": "longctx",
    "mix": "mix:of=diurnal+flash,flash.height=8,tail=0.03,tail_alpha=1.3",
}
# Tuning that differs by family: KEDA scales to zero where traffic stops (issue 17, §2).
FAMILY_TUNING: dict[str, dict[str, object]] = {"quiet": {"keda_min_replica_count": 0}}


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
    planned = _planned(family, scale, tuple(seeds), duration, tuple(sorted(service.items())))
    return [spec for spec in planned if spec.policy == policy]


@functools.lru_cache(maxsize=4)
def _planned(
    family: str,
    scale: int,
    seeds: tuple[int, ...],
    duration: int,
    service: tuple[tuple[str, object], ...],
) -> tuple[sweep.RunSpec, ...]:
    """Every policy's runs of one family, scale and seed set, planned once: the warm start
    searches engine runs per trace (up to ~19 s of CPU on mix x10), and planning each
    policy apart repeated it for every policy."""
    # The defaults, without reading env vars.
    defaults = SimulateSettings.model_construct(**dict(service))  # type: ignore[arg-type]
    tuning = dataclasses.replace(defaults.tuning(), **FAMILY_TUNING.get(family, {}))
    return tuple(
        sweep.plan(
            [workload_trace(_spec(family, duration), seed=seed, scale=scale) for seed in seeds],
            policies.NAMES,
            workload=defaults.workload(),
            config=defaults.sim_config(),
            tuning=tuning,
            sweep=True,
            warm_start=defaults.warm_start,
        )
    )


def _timed_run(spec: sweep.RunSpec) -> tuple[RunResult, float]:
    # CPU seconds of this worker, not wall: the simulator is single-threaded, and on a
    # shared machine wall time measures the neighbours' load as much as the simulator.
    started = time.process_time()
    result = sweep.run(spec)
    return result, time.process_time() - started


def _run_all(specs: list[sweep.RunSpec], jobs: int) -> list[tuple[RunResult, float]]:
    """Each spec's result and its CPU seconds (the run alone, in its worker)."""
    if jobs <= 1:
        return [_timed_run(spec) for spec in specs]
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(_timed_run, specs))


def _by_knob(results: Sequence[RunResult]) -> dict[str, list[RunResult]]:
    """knob label -> its runs, in seed order (`sweep.plan` plans trace by trace)."""
    grouped: dict[str, list[RunResult]] = {}
    for result in results:
        grouped.setdefault(result.knob, []).append(result)
    return grouped


def _per_seed_by_knob(results: Sequence[RunResult]) -> dict[str, list[tuple[float, float]]]:
    """knob label -> (attainment, billed GPU-h) on each seed, in seed order."""
    return {
        knob: [(r.slo_attainment, r.node_gpu_hours) for r in rs]
        for knob, rs in _by_knob(results).items()
    }


def _mean_by_knob(results: Sequence[RunResult]) -> dict[str, tuple[float, float]]:
    """knob label -> (mean attainment, mean billed GPU-h) over seeds."""
    return {
        knob: (statistics.fmean(a for a, _ in seeds), statistics.fmean(g for _, g in seeds))
        for knob, seeds in _per_seed_by_knob(results).items()
    }


def _mean_feasible_by_knob(results: Sequence[RunResult]) -> dict[str, float]:
    """knob label -> mean attainment over feasible requests (prompts one replica can
    prefill within the SLO), over seeds."""
    return {
        knob: statistics.fmean(r.feasible_attainment for r in rs)
        for knob, rs in _by_knob(results).items()
    }


def choose_knob(tuned: dict[str, tuple[float, float]], target: float) -> str:
    """The cheapest knob reaching `target` mean attainment, else the most attaining one."""
    reaching = [(gpu_h, knob) for knob, (att, gpu_h) in tuned.items() if att >= target]
    if reaching:
        return min(reaching)[1]
    return max(tuned.items(), key=lambda kv: (kv[1][0], -kv[1][1]))[0]


def knob_inversions(points: Sequence[sweep.Point]) -> tuple[sweep.Inversion, ...]:
    """gpufleet's `points` in knob order where a higher target costs over
    `INVERSION_COST_SHARE` less than a lower one did and attains less than the best lower
    one did (`sweep.inversions`)."""
    return sweep.inversions(
        points, cost_share=INVERSION_COST_SHARE, attainment_step=_VISIBLE_ATTAINMENT
    )


def evaluate(
    family: str,
    scale: int,
    *,
    duration: int,
    jobs: int,
    target: float,
    service: dict[str, object] | None = None,
    seeds: Sequence[int] = HELDOUT_SEEDS,
) -> dict:
    """One family at one scale: each policy's row (`_row`), the oracle's, and the settings
    they ran with (what `--rerun` reads back), judged on the held-out `seeds`."""
    service = service or {}
    rows = [
        _row(
            family,
            scale,
            policy,
            duration=duration,
            jobs=jobs,
            target=target,
            service=service,
            seeds=seeds,
        )
        for policy in POLICIES
    ]
    oracle = _oracle(family, scale, duration=duration, jobs=jobs, service=service, seeds=seeds)
    return {
        "family": family,
        "scale": scale,
        "rows": rows,
        "oracle": oracle,
        "duration": duration,
        "target": target,
        "service": service,
        "seeds": list(seeds),
    }


def _row(
    family: str,
    scale: int,
    policy: str,
    *,
    duration: int,
    jobs: int,
    target: float,
    service: dict[str, object],
    seeds: Sequence[int],
) -> dict:
    """One policy's tuned knob, its numbers on the held-out `seeds`, its held-out front, and
    the simulator's CPU seconds per policy-hour over all its runs (mean, max)."""
    tuning = _run_all(_specs(family, scale, TUNING_SEEDS, policy, duration, service), jobs)
    tuned = _mean_by_knob([r for r, _ in tuning])
    chosen = choose_knob(tuned, target)
    held_specs = _specs(family, scale, seeds, policy, duration, service)
    timed = _run_all(held_specs, jobs)
    held = [r for r, _ in timed]
    by_knob = _mean_by_knob(held)
    front = sweep.pareto_front(
        sweep.Point(att, gpu_h, knob) for knob, (att, gpu_h) in by_knob.items()
    )
    per_hour = [seconds * 3600 / duration for _, seconds in tuning + timed]
    feasible = _mean_feasible_by_knob(held)
    row = {
        "policy": policy,
        "chosen": chosen,
        "tuning": tuned[chosen],
        "heldout": by_knob[chosen],
        "heldout_feasible": feasible[chosen],
        "front": [list(p) for p in front],
        # Each knob value on each held-out seed (`seeds` in the cell), for how far apart
        # the seeds put a point the front misses on their mean.
        "seeds": _per_seed_by_knob(held),
        "seconds_per_policy_hour": (statistics.fmean(per_hour), max(per_hour)),
    }
    if policy == policies.GPUFLEET:
        # Every knob value, in knob order, for the knob's inversions (section 3).
        row["points"] = [[label, *by_knob[label]] for label in sorted(by_knob, key=_knob_value)]
        # What section 4 judges: the default, whatever the tuning seeds chose.
        default = policies.knob_label(policy, knob.DEFAULT_TARGET)
        after = [
            cost_at_slo.split(spec, result)[1]
            for spec, result in zip(held_specs, held, strict=True)
            if result.knob == default
        ]
        row["default"] = {
            "knob": default,
            "tuning": tuned[default],
            "heldout": by_knob[default],
            "heldout_feasible": feasible[default],
            "heldout_feasible_after_lead_time": statistics.fmean(after),
        }
    return row


def _knob_value(label: str) -> float:
    """The value in a sweep point's label (`target_attainment=0.993`)."""
    return float(label.rpartition("=")[2])


def _oracle(
    family: str, scale: int, *, duration: int, jobs: int, service: dict, seeds: Sequence[int]
) -> dict:
    """The oracle's replays on the held-out seeds (it chooses nothing, so it may run there):
    mean attainment and billed GPU-h, each seed's judged attainment, and whether it is a
    yardstick (`report.oracle_valid`: its replay met its own target on every seed)."""
    timed = _run_all(_specs(family, scale, seeds, policies.ORACLE, duration, service), jobs)
    results = [r for r, _ in timed]
    ((_, heldout),) = _mean_by_knob(results).items()
    per_hour = [seconds * 3600 / duration for _, seconds in timed]
    return {
        "heldout": heldout,
        "heldout_feasible": statistics.fmean(r.feasible_attainment for r in results),
        "judged": [r.oracle.judged_attainment for r in results if r.oracle is not None],
        "valid": sim_report.oracle_valid(results),
        "seconds_per_policy_hour": (statistics.fmean(per_hour), max(per_hour)),
    }


def _front(result: dict, policy: str) -> tuple[sweep.Point, ...]:
    (row,) = (r for r in result["rows"] if r["policy"] == policy)
    return tuple(sweep.Point(*p) for p in row["front"])


class SeedRuns(NamedTuple):
    """Each knob value's held-out (attainment, GPU-h) seed by seed, ours and a baseline's."""

    seeds: Sequence[int]
    ours: Mapping[str, Sequence[Sequence[float]]]
    theirs: Mapping[str, Sequence[Sequence[float]]]

    def matched_on(self, ours: Sequence[sweep.Point], theirs: sweep.Point) -> list[int]:
        """The seeds on which one of our front points nearest to `theirs` matches it."""
        near = [p for p in sweep.nearest(ours, theirs) if p is not None]
        candidates = [[sweep.Point(*run) for run in self.ours[p.label]] for p in near]
        target = [sweep.Point(*run) for run in self.theirs[theirs.label]]
        return [self.seeds[i] for i in sweep.matching_seeds(candidates, target)]


def _seed_runs(result: dict, baseline: str) -> SeedRuns | None:
    """The cell's `SeedRuns` against `baseline`; None where its --json predates them."""
    rows = {r["policy"]: r for r in result["rows"]}
    ours, theirs = rows[policies.GPUFLEET], rows[baseline]
    if "seeds" not in result or "seeds" not in ours or "seeds" not in theirs:
        return None
    return SeedRuns(result["seeds"], ours["seeds"], theirs["seeds"])


def compare(
    ours: Sequence[sweep.Point],
    theirs: Sequence[sweep.Point],
    name: str,
    seed_runs: SeedRuns | None = None,
) -> str:
    """One sentence: does our front dominate theirs, where is it strictly cheaper at equal
    attainment and by how much, and what of theirs it does not reach: with `seed_runs`,
    also on which held-out seeds our nearest points match each such point."""
    uncovered = sweep.uncovered(ours, theirs)
    verdict = "dominates" if not uncovered else "does not dominate"
    saved = sweep.savings(ours, theirs)
    better = [s for s in saved if s.gpu_hours >= _VISIBLE_GPU_HOURS]
    if better:
        best = max(better, key=lambda s: s.gpu_hours)
        share = best.gpu_hours / best.theirs_gpu_hours
        cheaper = (
            f"strictly cheaper at {len(better)} of its {len(saved)} points that {name} "
            f"reaches, by up to {best.gpu_hours:.2f} GPU-h ({share:.0%}) at "
            f"{best.ours.attainment:.2%} ({best.ours.label})"
        )
    elif saved:
        cheaper = f"not cheaper than {name} at equal attainment"
    else:
        cheaper = f"{name} reaches none of its attainments"
    missed = ""
    if uncovered:
        points = ", ".join(
            f"{p.attainment:.2%} / {p.gpu_hours:.2f} ({p.label}; {_gap(ours, p)}"
            f"{_seed_clause(ours, p, seed_runs)})"
            for p in uncovered
        )
        missed = f"; not matched: {points}"
    return f"vs {name}: {verdict}, {cheaper}{missed}"


def _gap(ours: Sequence[sweep.Point], theirs: sweep.Point) -> str:
    """How near our front comes to a point it does not match, on each axis: the most we
    attain at no more than its cost, and the least we pay for at least its attainment."""
    cheap, high = sweep.nearest(ours, theirs)
    at_cost = (
        f"{(cheap.attainment - theirs.attainment) * 100:+.2f} points at its cost"
        if cheap
        else "none as cheap"
    )
    at_attainment = (
        f"{high.gpu_hours - theirs.gpu_hours:+.2f} GPU-h at its attainment"
        if high
        else "none as high"
    )
    return f"ours {at_cost}, {at_attainment}"


def _seed_clause(ours: Sequence[sweep.Point], theirs: sweep.Point, seeds: SeedRuns | None) -> str:
    if seeds is None:
        return ""
    matched = seeds.matched_on(ours, theirs)
    return f"; seed by seed, matched on {', '.join(map(str, matched)) or 'none'}"


def markdown(results: Sequence[dict]) -> str:
    """One family's table (every scale and policy), then its front comparison per scale."""
    family = results[0]["family"]
    lines = [
        f"### {family} (`{FAMILIES[family]}`)",
        "",
        "| scale | policy | knob (chosen on tuning seeds) | tuning: attainment / GPU-h "
        "| held-out: attainment / GPU-h | held-out: feasible attainment "
        "| held-out: x oracle (billed) | sim CPU s per policy-hour (mean / max) |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        lines += _rows(result)
    lines += [
        "",
        "Held-out fronts, gpufleet's against each baseline's (the baseline's GPU-h at each "
        "gpufleet front point's attainment: linear between the two baseline front points "
        "around it):",
        "",
    ]
    for result in results:
        ours = _front(result, policies.GPUFLEET)
        sentences = [compare(ours, _front(result, b), b, _seed_runs(result, b)) for b in BASELINES]
        lines.append(f"- x{result['scale']}: " + "; ".join(sentences) + ".")
    inverted = [_inversions(result) for result in results]
    if any(line is not None for line in inverted):
        lines += [
            "",
            "gpufleet's knob inversions, held out (a higher target that costs over "
            f"{INVERSION_COST_SHARE:.0%} less than a lower one did and attains less than the "
            "best lower one did; below it: that best attainment / the most GPU-h, and the "
            "attainment's difference from that target's on the same held-out seeds: its mean "
            "and the standard error of that mean):",
            "",
            *(line for line in inverted if line is not None),
        ]
    return "\n".join([*lines, ""])


def _inversions(result: dict) -> str | None:
    """One scale's line of gpufleet's knob inversions; None where the --json predates
    them (no `points`)."""
    (row,) = (r for r in result["rows"] if r["policy"] == policies.GPUFLEET)
    if "points" not in row:
        return None
    found = knob_inversions([sweep.Point(a, g, label) for label, a, g in row["points"]])
    listed = ", ".join(
        f"{_knob_value(i.point.label):g} {i.point.attainment:.2%} / "
        f"{i.point.gpu_hours:.2f} (below it: {i.best_below.attainment:.2%} / {i.most_below:.2f}"
        f"{_seed_by_seed(row.get('seeds'), i)})"
        for i in found
    )
    return f"- x{result['scale']}: {listed or 'none'}"


def _seed_by_seed(seeds: Mapping[str, Sequence[Sequence[float]]] | None, i: sweep.Inversion) -> str:
    """An inversion's attainment against the best lower target's, seed by seed: the mean
    difference and its standard error; "" where the --json predates the seed runs."""
    best = i.best_below.label
    if not seeds or i.point.label not in seeds or best not in seeds:
        return ""
    mean, error = sweep.paired_difference(
        *([run[0] for run in seeds[k]] for k in (i.point.label, best))
    )
    spread = "" if error is None else f", standard error {error * 100:.2f}"
    return f"; against {_knob_value(best):g} seed by seed: {mean * 100:+.2f} points{spread}"


def _rows(result: dict) -> list[str]:
    """One scale's table rows: each policy at its chosen knob, gpufleet also at its default
    (section 4 judges that one), then the oracle, each with its x oracle."""
    oracle = result["oracle"]
    oracle_gpu_hours, valid = oracle["heldout"][1], oracle["valid"]
    cells = []
    for row in result["rows"]:
        cells.append((row["policy"], row["chosen"], row, row["seconds_per_policy_hour"]))
        if "default" in row:
            default = row["default"]
            cells.append((f"{row['policy']} (default)", default["knob"], default, None))
    lines = []
    for name, knob_label, numbers, seconds in cells:
        (t_att, t_gpu), (h_att, h_gpu) = numbers["tuning"], numbers["heldout"]
        ratio = sim_report.x_oracle(h_gpu, oracle_gpu_hours, valid=valid)
        lines.append(
            f"| {result['scale']} | {name} | {knob_label} "
            f"| {t_att:.2%} / {t_gpu:.2f} | {h_att:.2%} / {h_gpu:.2f} "
            f"| {numbers['heldout_feasible']:.2%} | {ratio} | {_seconds(seconds)} |"
        )
    o_att, o_gpu = oracle["heldout"]
    judged = ", ".join(f"{a:.2%}" for a in oracle["judged"])
    lines.append(
        f"| {result['scale']} | oracle | - (judged: {judged}{'' if valid else ', not valid'}) "
        f"| - | {o_att:.2%} / {o_gpu:.2f} | {oracle['heldout_feasible']:.2%} "
        f"| {sim_report.x_oracle(o_gpu, o_gpu, valid=valid)} "
        f"| {_seconds(oracle['seconds_per_policy_hour'])} |"
    )
    return lines


def _seconds(mean_max: Sequence[float] | None) -> str:
    return "-" if mean_max is None else f"{mean_max[0]:.2f} / {mean_max[1]:.2f}"


def report(results: Sequence[dict]) -> str:
    """Every family's section, families in `FAMILIES` order, scales ascending, then the
    section-4 verdicts over all of them."""
    ordered = sorted(results, key=lambda r: (list(FAMILIES).index(r["family"]), r["scale"]))
    by_family: dict[str, list[dict]] = {}
    for result in ordered:
        by_family.setdefault(result["family"], []).append(result)
    sections = [markdown(rs) for rs in by_family.values()]
    verdicts = [unmatched(ordered), cost_at_slo.markdown(ordered), settings_over_bound(ordered)]
    return "\n".join([*sections, *verdicts])


def unmatched(results: Sequence[dict]) -> str:
    """Section 4's tally: per family and scale, each baseline's held-out front points that
    gpufleet's does not match, and of those, how many its nearest points match on at least
    one held-out seed ("-" where the --json predates the seeds)."""
    head = "| family | scale | " + " | ".join(
        f"{b}: not matched | {b}: of them, matched on a seed" for b in BASELINES
    )
    lines = [
        "### Baseline points not matched, held out (issue 17, section 4)",
        "",
        "A baseline's front point is matched where some gpufleet front point attains at "
        "least as much for no more GPU-h, each the mean of the held-out seeds. Of those not "
        "matched, some are matched on a seed by gpufleet's nearest front points (the most "
        "attaining at no more than its cost, the cheapest at no less than its attainment): "
        "there the gap is within the seeds' spread.",
        "",
        f"{head} |",
        "|---|---:|" + "---:|---:|" * len(BASELINES),
    ]
    totals = [[0, 0] for _ in BASELINES]
    for result in results:
        ours = _front(result, policies.GPUFLEET)
        cells = []
        for total, baseline in zip(totals, BASELINES, strict=True):
            missed = sweep.uncovered(ours, _front(result, baseline))
            runs = _seed_runs(result, baseline)
            split = None if runs is None else sum(bool(runs.matched_on(ours, p)) for p in missed)
            total[0] += len(missed)
            total[1] += split or 0
            cells += [str(len(missed)), "-" if split is None else str(split)]
        lines.append(f"| {result['family']} | {result['scale']} | {' | '.join(cells)} |")
    sums = " | ".join(f"**{n}** | **{split}**" for n, split in totals)
    lines.append(f"| all | | {sums} |")
    return "\n".join([*lines, ""])


def settings_over_bound(results: Sequence[dict]) -> str:
    """Each baseline setting over the cost bound that "Cost at the SLO" puts on gpufleet's
    default (its held-out mean billed GPU-h over `cost_at_slo.MAX_X_ORACLE` on a row that
    target judges), and how many of the baseline points gpufleet's front does not match
    are settings over it at their scale. Informative only: section 4's verdicts stand."""
    over: dict[tuple[str, int, str], list[str]] = {}  # (baseline, scale, knob) -> rows
    missed: list[tuple[str, int, str]] = []
    for result in results:
        oracle, scale = result["oracle"], result["scale"]
        rows = {r["policy"]: r for r in result["rows"]}
        ours = _front(result, policies.GPUFLEET)
        for baseline in BASELINES:
            missed += [
                (baseline, scale, p.label) for p in sweep.uncovered(ours, _front(result, baseline))
            ]
            for label, runs in rows[baseline].get("seeds", {}).items():
                ratio = cost_at_slo.over_bound(
                    result["family"],
                    gpu_hours=statistics.fmean(run[1] for run in runs),
                    oracle_gpu_hours=oracle["heldout"][1],
                    oracle_valid=oracle["valid"],
                )
                if ratio is not None:
                    over.setdefault((baseline, scale, label), []).append(
                        f"{result['family']} {ratio:.2f}x"
                    )
    lines = [
        "### Baseline settings over the cost bound (issue 17, section 4)",
        "",
        f"Cost at the SLO holds gpufleet's default to {cost_at_slo.MAX_X_ORACLE:g}x the "
        "oracle's billed GPU-h where demand is predictable and the oracle valid. The same "
        "bound on each baseline setting's held-out mean, scale by scale (attainment not "
        "judged here):",
        "",
    ]
    for baseline in BASELINES:
        settings = sorted(
            (k for k in over if k[0] == baseline), key=lambda k: (k[1], _knob_value(k[2]))
        )
        listed = "; ".join(
            f"x{scale} {label} ({', '.join(over[b, scale, label])})" for b, scale, label in settings
        )
        count = sum(point in over for point in missed if point[0] == baseline)
        total = sum(point[0] == baseline for point in missed)
        lines.append(
            f"- {baseline}: {listed or 'none'}. Points not matched: {total}; of them, "
            f"settings over the bound at their scale: {count}."
        )
    return "\n".join([*lines, ""])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.heldout_bench", description=__doc__)
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--scales", default="1,4,10")
    parser.add_argument("--duration", type=int, default=3600, help="seconds of each trace")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--target", type=float, default=0.99, help="attainment to tune for")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="print one report from the --json files of earlier (sharded) runs; runs nothing",
    )
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
    parser.add_argument(
        "--routing",
        choices=ROUTINGS,
        default=ROUTINGS[0],
        help="the simulator's --routing (least-in-flight by default)",
    )
    parser.add_argument(
        "--rerun",
        nargs=2,
        metavar=("POLICY", "JSON"),
        help="rerun only POLICY's rows of every cell of an earlier run's --json (after a "
        "change to that policy alone) and keep the other rows and the oracle's: the engine "
        "is deterministic, so they are what a full run would print. Each cell runs with the "
        "duration, target and simulator flags recorded in it (files from before they were "
        "recorded: the ones given here)",
    )
    parser.add_argument(
        "--heldout-seeds",
        default=",".join(map(str, HELDOUT_SEEDS)),
        help="the seeds to judge on (default: %(default)s); more seeds narrow the spread a "
        "front is judged within, and the tuning seeds "
        f"({', '.join(map(str, TUNING_SEEDS))}) are refused",
    )
    args = parser.parse_args(argv)
    if args.merge:
        return _merge(parser, args.merge)
    families = [f for f in args.families.split(",") if f]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        parser.error(f"unknown family {unknown[0]!r}; known: {', '.join(FAMILIES)}")
    scales = _integers(parser, "--scales", args.scales)
    seeds = _integers(parser, "--heldout-seeds", args.heldout_seeds)
    tuned_on = sorted(set(seeds) & set(TUNING_SEEDS))
    if tuned_on:
        parser.error(f"--heldout-seeds {args.heldout_seeds}: {tuned_on[0]} is a tuning seed")
    service = {
        "chunked_prefill": args.chunked_prefill,
        "long_prefill_token_threshold": args.long_prefill_token_threshold,
        "routing": args.routing,
    }
    started = time.perf_counter()
    if args.rerun:
        results = _rerun(parser, args, service, seeds)
    else:
        results = [
            evaluate(
                family,
                scale,
                duration=args.duration,
                jobs=args.jobs,
                target=args.target,
                service=service,
                seeds=seeds,
            )
            for family in families
            for scale in scales
        ]
    minutes = (time.perf_counter() - started) / 60
    command = shlex.join(["python3", "-m", "bench.heldout_bench", *(argv or sys.argv[1:])])
    print(f"Reproduce: `{command}` ({minutes:.1f} min wall with --jobs {args.jobs})\n")
    print(
        f"Tuning seeds {', '.join(map(str, TUNING_SEEDS))}; held-out seeds "
        f"{', '.join(map(str, seeds))}; target {args.target:.1%}; "
        f"{args.duration} s per trace.\n"
    )
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def _merge(parser: argparse.ArgumentParser, paths: Sequence[Path]) -> int:
    results = []
    for path in paths:
        results += _load(parser, "--merge", path)
    print(report(results))
    return 0


def _integers(parser: argparse.ArgumentParser, flag: str, text: str) -> list[int]:
    """A comma-separated list of integers, or one line naming `flag` and the bad value."""
    try:
        values = [int(part) for part in text.split(",") if part]
    except ValueError:
        parser.error(f"{flag} {text}: not a comma-separated list of integers")
    if not values:
        parser.error(f"{flag}: empty")
    return values


def _rerun(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    service: dict,
    seeds: Sequence[int],
) -> list:
    """The cells of `args.rerun`'s file, each with its POLICY row run again on the seeds
    recorded in it (files from before they were recorded: `seeds`)."""
    policy, path = args.rerun
    if policy not in POLICIES:
        parser.error(f"--rerun {policy}: not a policy of the grid ({', '.join(POLICIES)})")
    cells = _load(parser, "--rerun", Path(path))
    for cell in cells:
        row = _row(
            cell["family"],
            cell["scale"],
            policy,
            duration=cell.get("duration", args.duration),
            jobs=args.jobs,
            target=cell.get("target", args.target),
            service=cell.get("service", service),
            seeds=cell.get("seeds", seeds),
        )
        cell["rows"] = [row if r["policy"] == policy else r for r in cell["rows"]]
    return cells


def _load(parser: argparse.ArgumentParser, flag: str, path: Path) -> list:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        parser.error(f"{flag} {path}: {e}")
    if not isinstance(loaded, list) or not all(_is_result(r) for r in loaded):
        parser.error(f"{flag} {path}: not the --json of python3 -m bench.heldout_bench")
    return loaded


def _is_result(value: object) -> bool:
    return (
        isinstance(value, dict)
        and value.get("family") in FAMILIES
        and isinstance(value.get("scale"), int)
        and isinstance(value.get("rows"), list)
        and isinstance(value.get("oracle"), dict)
        and {row.get("policy") for row in value["rows"] if isinstance(row, dict)} >= set(POLICIES)
    )


if __name__ == "__main__":
    exit_with(main)
