"""The simulator's Markdown text: the results table, the sweep table, parameters, reproduce line.

Pure string building over results, so tests assert the exact text; it writes nothing:
`replay.plots` draws the PNGs and `replay.main` writes the files. Every number is printed
with fixed precision so two runs with the same seed give the same bytes.
"""

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence

from gpufleet.autoscaler.core import factory as policies
from gpufleet.autoscaler.core.factory import Tuning
from gpufleet.autoscaler.core.workload import WorkloadConfig
from gpufleet.autoscaler.replay.core import sweep
from gpufleet.autoscaler.replay.core.model import ReplayConfig
from gpufleet.autoscaler.replay.core.result import RunResult

_HEADER = (
    "| policy | SLO attainment | feasible | TTFT p50 / p99 (s) | e2e p50 / p99 (s) "
    "| replica GPU-h | billed node GPU-h | x oracle (billed) | scale events | node events |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
)
_SWEEP_HEADER = (
    "| policy | knob | SLO attainment | feasible | billed node GPU-h | x oracle (billed) "
    "| on front |\n"
    "|---|---|---:|---:|---:|---:|---|\n"
)
# The x oracle cell when the oracle's replay missed its own target.
_NOT_MEANINGFUL = "not meaningful"


def by_trace(results: Iterable[RunResult]) -> dict[str, list[RunResult]]:
    """Results grouped by trace name, traces and runs in the order given."""
    groups: dict[str, list[RunResult]] = {}
    for result in results:
        groups.setdefault(result.trace, []).append(result)
    return groups


def oracle_gpu_hours(results: Iterable[RunResult]) -> float | None:
    """The oracle's billed GPU-hours among `results` (one trace's), or None if it did not run."""
    return next((r.node_gpu_hours for r in results if r.policy == policies.ORACLE), None)


def oracle_valid(results: Iterable[RunResult]) -> bool:
    """False when the oracle ran and its replay missed its own target: it is then no
    yardstick, and every x oracle ratio against it is not meaningful."""
    return all(r.oracle.valid for r in results if r.oracle is not None)


def results_table(results: Sequence[RunResult]) -> str:
    """One trace's table, one row per run, with each run's billed GPU-hours over the oracle's."""
    ratio = _ratios(results)
    rows = [
        f"| {r.policy} | {_percent(r.slo_attainment)} | {_percent(r.feasible_attainment)} "
        f"| {r.ttft_p50_seconds:.2f} / {r.ttft_p99_seconds:.2f} "
        f"| {r.e2e_p50_seconds:.2f} / {r.e2e_p99_seconds:.2f} "
        f"| {r.replica_gpu_hours:.2f} | {r.node_gpu_hours:.2f} "
        f"| {ratio(r.node_gpu_hours)} "
        f"| {r.scale_events} | {r.node_events} |\n"
        for r in results
    ]
    return _HEADER + "".join(rows) + _feasible_note(results) + _oracle_note(results)


def _ratios(results: Sequence[RunResult]) -> Callable[[float], str]:
    """The x oracle cell for a run's billed GPU-hours among `results` (one trace's)."""
    oracle, valid = oracle_gpu_hours(results), oracle_valid(results)
    return lambda gpu_hours: x_oracle(gpu_hours, oracle, valid=valid)


def oracle_ratio(gpu_hours: float, oracle_gpu_hours: float | None, *, valid: bool) -> float | None:
    """Billed GPU-hours over the oracle's; None where the oracle is no yardstick: it missed
    its own target (`oracle_valid`), did not run or billed nothing."""
    if not valid or oracle_gpu_hours is None or oracle_gpu_hours <= 0:
        return None
    return gpu_hours / oracle_gpu_hours


def x_oracle(gpu_hours: float, oracle_gpu_hours: float | None, *, valid: bool) -> str:
    """The x oracle cell of `oracle_ratio`: "not meaningful" when the oracle missed its own
    target, "n/a" when it did not run or billed none."""
    if not valid:
        return _NOT_MEANINGFUL
    ratio = oracle_ratio(gpu_hours, oracle_gpu_hours, valid=valid)
    return "n/a" if ratio is None else f"{ratio:.2f}x"


def _feasible_note(results: Sequence[RunResult]) -> str:
    """Below a table: how many requests the feasible column counts."""
    if not results:
        return ""
    first = results[0]
    return (
        f"\nfeasible: attainment over the {first.feasible_requests:,} of {first.requests:,} "
        f"requests whose prompt one idle replica can prefill within the "
        f"{first.slo_ttft_seconds:g} s SLO.\n"
    )


def _oracle_note(results: Iterable[RunResult]) -> str:
    """Below a table with the oracle: the bound its replay started from, which the replay
    (what `x oracle` divides by) is not, and whether the replay met its target."""
    bound = next((r.oracle for r in results if r.oracle is not None), None)
    if bound is None:
        return ""
    target = _percent(bound.target_attainment)
    met = (
        ""
        if bound.valid
        else f" That is short of its {target} target (its repairs ran out), so the oracle is "
        f"no yardstick here and x oracle is not meaningful."
    )
    return (
        f"\nx oracle divides by the oracle's replay: the cheapest clairvoyant schedule found "
        f"that meets the SLO for {target} of the requests it is judged on (after the warm-up, "
        f"prompts that fit the SLO); it met {_percent(bound.judged_attainment)} of them.{met} "
        f"The lower bound it was built from (necessary conditions only, before repairs): "
        f"{bound.replica_gpu_hours:.2f} replica GPU-h, {bound.node_gpu_hours:.2f} billed "
        f"node GPU-h.\n"
    )


def tables(results: Sequence[RunResult]) -> str:
    """Every trace's heading and table: what `gpufleet simulate` prints without --report."""
    return "\n".join(
        f"## {trace} ({runs[0].requests:,} requests)\n\n{results_table(runs)}"
        for trace, runs in by_trace(results).items()
    )


def sweep_tables(results: Sequence[RunResult]) -> str:
    """Every trace's sweep table and dominance lines: `--sweep` without --report."""
    return "\n".join(
        f"## {trace} ({runs[0].requests:,} requests)\n\n{sweep_table(runs)}\n{dominance(runs)}"
        for trace, runs in by_trace(results).items()
    )


def markdown_report(
    results: Sequence[RunResult],
    *,
    parameters: Sequence[tuple[str, str]],
    command: str,
    images: Mapping[str, Sequence[tuple[str, str]]] | None = None,
) -> str:
    """The whole report.md: per trace its table and plots, then parameters and command.

    `images` maps a trace name to (alt text, file name) pairs, relative to the report.
    """
    sections = ["# gpufleet simulate\n"]
    for trace, runs in by_trace(results).items():
        section = f"## {trace} ({runs[0].requests:,} requests)\n\n{results_table(runs)}"
        section += _images((images or {}).get(trace, ()))
        sections.append(section)
    sections += [_parameters_section(parameters), _reproduce_section(command)]
    return "\n".join(sections)


def sweep_report(
    results: Sequence[RunResult],
    *,
    parameters: Sequence[tuple[str, str]],
    command: str,
    images: Mapping[str, Sequence[tuple[str, str]]] | None = None,
) -> str:
    """A sweep's report.md: per trace every point, the fronts, and which front dominates."""
    sections = ["# gpufleet simulate --sweep\n"]
    for trace, runs in by_trace(results).items():
        sections.append(
            f"## {trace} ({runs[0].requests:,} requests)\n\n{sweep_table(runs)}\n"
            f"{dominance(runs)}{_images((images or {}).get(trace, ()))}"
        )
    sections += [_parameters_section(parameters), _reproduce_section(command)]
    return "\n".join(sections)


def sweep_table(results: Sequence[RunResult]) -> str:
    """One trace's sweep points, one row each, marking those on their policy's front."""
    ratio = _ratios(results)
    on_front = {(key[1], p) for key, front in sweep.fronts(results).items() for p in front}
    rows = [
        f"| {r.policy} | {r.knob or '-'} | {_percent(r.slo_attainment)} "
        f"| {_percent(r.feasible_attainment)} "
        f"| {r.node_gpu_hours:.2f} | {ratio(r.node_gpu_hours)} "
        f"| {'yes' if (r.policy, sweep.point(r)) in on_front else ''} |\n"
        for r in results
    ]
    return _SWEEP_HEADER + "".join(rows) + _feasible_note(results) + _oracle_note(results)


def dominance(results: Sequence[RunResult]) -> str:
    """One line per (gpufleet, baseline) pair of one trace: does our front dominate theirs?"""
    fronts = {policy: front for (_, policy), front in sweep.fronts(results).items()}
    ours = fronts.get(policies.GPUFLEET)
    if ours is None:
        return ""
    lines = []
    for name in (policies.HPA, policies.KEDA):
        if name not in fronts:
            continue
        missed = sweep.uncovered(ours, fronts[name])
        verdict = "yes" if not missed else "no; not matched: " + ", ".join(map(_point, missed))
        lines.append(f"- gpufleet's front dominates {name}'s: {verdict}\n")
    if lines:  # the rule, so that a tie read as "dominates" is not a surprise
        lines.append(
            "\n(A front dominates another when every point of the other is matched or beaten"
            " on both attainment and billed GPU-h: an equal point counts as matched.)\n"
        )
    return "".join(lines)


def parameters(
    *,
    workload: WorkloadConfig,
    config: ReplayConfig,
    tuning: Tuning,
    scale: int,
    seed: int = 0,
    warm_start: Mapping[str, int] | None = None,
) -> list[tuple[str, str]]:
    """The numbers a run depends on, as (name, value) rows, in the dataclasses' order.

    `warm_start` maps each trace to the replicas its runs started with when --warm-start
    chose them, which then replace `initial_replicas`."""
    rows = [
        ("trace copies (--scale)", str(scale)),
        ("seed (--seed)", str(seed)),
        ("min_replicas", str(workload.min_replicas)),
        ("max_replicas", str(workload.max_replicas)),
        ("slo_ttft_seconds", str(workload.slo_ttft_seconds)),
    ]
    started = None
    if warm_start:
        started = ", ".join(f"{trace} {n}" for trace, n in warm_start.items())
        started += " (--warm-start: what each trace's first minutes need)"
    rows += [
        (name, started) if name == "initial_replicas" and started else (name, value)
        for name, value in _flatten("", config)
    ]
    rows += [(f"tuning.{k}", str(v)) for k, v in _flatten("", tuning) if v != "None"]
    return rows


def _flatten(prefix: str, value: object) -> list[tuple[str, str]]:
    if not dataclasses.is_dataclass(value):
        return [(prefix, str(value))]
    rows = []
    for f in dataclasses.fields(value):
        rows += _flatten(f"{prefix}.{f.name}" if prefix else f.name, getattr(value, f.name))
    return rows


def _parameters_section(rows: Sequence[tuple[str, str]]) -> str:
    body = "".join(f"| {name} | {value} |\n" for name, value in rows)
    return f"## Parameters\n\n| parameter | value |\n|---|---|\n{body}"


def _reproduce_section(command: str) -> str:
    return f"## Reproduce\n\n```sh\n{command}\n```\n"


def _images(images: Iterable[tuple[str, str]]) -> str:
    lines = "".join(f"![{alt}]({name})\n" for alt, name in images)
    return f"\n{lines}" if lines else ""


def _point(p: sweep.Point) -> str:
    return f"{p.label or '-'} ({_percent(p.attainment)}, {p.gpu_hours:.2f} GPU-h)"


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.2f}%"
