"""Issue 17, section 4, "Cost at the SLO": judged from the held-out bench's numbers.

The target: where demand is predictable from its history (no crowd shorter than the lead
time) and the oracle is valid, gpufleet at its default setting keeps >= 99% of feasible
requests within the SLO at <= 1.15x the oracle's billed GPU-hours. Which families are
predictable is argued here, one line each, from their definitions in
`gpufleet.autoscaler.replay.core.workloads` and `heldout_bench.FAMILIES`; the oracle's
validity is `replay.core.report.oracle_valid` of its held-out replays, decided where they
ran. Every run starts warm with the replicas the first minutes need
(`oracle.warm_start_replicas`), and no policy's replicas serve before a cold start: so
the table also gives attainment over the feasible requests after the lead time (cold
start plus node provisioning), the ones the oracle is judged on, and a miss that is the
warm start's says so. Pure: judges and renders numbers, runs nothing.
"""

from collections.abc import Sequence

import numpy as np

from gpufleet.autoscaler.replay.core import report
from gpufleet.autoscaler.replay.core.oracle import judged_requests
from gpufleet.autoscaler.replay.core.result import RunResult
from gpufleet.autoscaler.replay.core.sweep import RunSpec

MIN_FEASIBLE_ATTAINMENT = 0.99
MAX_X_ORACLE = 1.15

# family -> (predictable from its history?, why). The lead time is the simulator's cold
# start plus node provisioning (60 + 180 s): capacity asked for at a crowd's sight serves
# only that long after.
PREDICTABLE: dict[str, tuple[bool, str]] = {
    "flash-short": (False, "a 10x crowd for 180 s, shorter than the 240-s lead time"),
    "flash-long": (
        False,
        "one 10x step up within a 10-s ramp, which nothing in its history announces: the "
        "crowd outlasts the lead time, but its first 240 s are a crowd no online policy "
        "sees coming",
    ),
    "diurnal": (
        True,
        "a sine over the whole trace: the rate rises over half of it (15 minutes in a "
        "30-minute trace), far slower than the 4-minute lead time",
    ),
    "onoff": (False, "5x bursts of 60 s on average (exponential), shorter than the lead time"),
    "quiet": (
        True,
        "the base rate, busy 600 s of every 1,800: each rise repeats the level of 20 minutes "
        "before, within the policy's 30-minute history (a 30-minute trace has one, at the "
        "start, which the warm start covers)",
    ),
    "longctx": (
        True,
        "a constant rate; its heavy tail is in prompt sizes, not arrivals, and attainment "
        "over feasible requests leaves out the prompts no replica prefills within the SLO",
    ),
    "mix": (False, "the diurnal day with an 8x flash crowd of 180 s on top"),
}


def split(spec: RunSpec, result: RunResult) -> tuple[float, float]:
    """Attainment over feasible requests arriving before and after the lead time (cold
    start plus node provisioning: the oracle's warm-up), by the rule the oracle is judged
    by (`oracle.judged_requests`)."""
    slo = result.slo_ttft_seconds
    can, late = judged_requests(spec.trace, slo_seconds=slo, config=spec.config)
    met = result.ttft_seconds <= slo
    return tuple(  # type: ignore[return-value]
        float(np.mean(met[can & part])) if np.any(can & part) else 1.0 for part in (~late, late)
    )


def verdict(
    family: str,
    *,
    feasible_attainment: float,
    after_lead_time: float,
    gpu_hours: float,
    oracle_gpu_hours: float,
    oracle_valid: bool,
) -> str:
    """ "met", "missed: ..." naming each bound missed, or "not judged: ..." with why. An
    attainment miss that the requests after the lead time do not show is the warm start's."""
    if not PREDICTABLE[family][0]:
        return "not judged: not predictable"
    ratio = report.oracle_ratio(gpu_hours, oracle_gpu_hours, valid=oracle_valid)
    if ratio is None:
        return "not judged: the oracle is not valid"
    misses = []
    if feasible_attainment < MIN_FEASIBLE_ATTAINMENT:
        warm = " (the warm start's)" if after_lead_time >= MIN_FEASIBLE_ATTAINMENT else ""
        misses.append(f"attainment {feasible_attainment:.2%} < {MIN_FEASIBLE_ATTAINMENT:.0%}{warm}")
    if ratio > MAX_X_ORACLE:
        misses.append(f"cost {ratio:.3f}x > {MAX_X_ORACLE:g}x")
    return "missed: " + ", ".join(misses) if misses else "met"


def over_bound(
    family: str, *, gpu_hours: float, oracle_gpu_hours: float, oracle_valid: bool
) -> float | None:
    """`gpu_hours` as a multiple of the oracle's where this target judges `family` (its
    demand predictable, the oracle valid) and the multiple is over `MAX_X_ORACLE`; else
    None. The bound the target puts on gpufleet's default, for any other setting."""
    if not PREDICTABLE[family][0]:
        return None
    ratio = report.oracle_ratio(gpu_hours, oracle_gpu_hours, valid=oracle_valid)
    return ratio if ratio is not None and ratio > MAX_X_ORACLE else None


def markdown(results: Sequence[dict]) -> str:
    """The section-4 table over `heldout_bench` results (each family and scale), then why
    each family is or is not predictable."""
    lines = [
        "### Cost at the SLO (issue 17, section 4)",
        "",
        "gpufleet at its default target (0.99) on the held-out seeds, against the oracle's "
        "replay on the same seeds (mean of the seeds; the oracle is valid only where its "
        "replay met its own target on every seed):",
        "",
        "| family | scale | predictable | oracle: judged attainment per seed / billed GPU-h "
        "| gpufleet default: feasible attainment (after the lead time) / billed GPU-h "
        "| x oracle (billed) | section 4 |",
        "|---|---:|---|---:|---:|---:|---|",
    ]
    families: list[str] = []
    for result in results:
        family, oracle = result["family"], result["oracle"]
        (row,) = (r for r in result["rows"] if "default" in r)
        default = row["default"]
        gpu_hours, oracle_gpu_hours = default["heldout"][1], oracle["heldout"][1]
        judged = ", ".join(f"{a:.2%}" for a in oracle["judged"])
        valid = "" if oracle["valid"] else " (not valid)"
        cell = report.x_oracle(gpu_hours, oracle_gpu_hours, valid=oracle["valid"])
        said = verdict(
            family,
            feasible_attainment=default["heldout_feasible"],
            after_lead_time=default["heldout_feasible_after_lead_time"],
            gpu_hours=gpu_hours,
            oracle_gpu_hours=oracle_gpu_hours,
            oracle_valid=oracle["valid"],
        )
        lines.append(
            f"| {family} | {result['scale']} | {'yes' if PREDICTABLE[family][0] else 'no'} "
            f"| {judged}{valid} / {oracle_gpu_hours:.2f} "
            f"| {default['heldout_feasible']:.2%} "
            f"({default['heldout_feasible_after_lead_time']:.2%}) / {gpu_hours:.2f} "
            f"| {cell} | {said} |"
        )
        families += [] if family in families else [family]
    lines += ["", "Predictable from its history (no crowd shorter than the lead time)?", ""]
    lines += [
        f"- {f}: {'yes' if PREDICTABLE[f][0] else 'no'}, {PREDICTABLE[f][1]}." for f in families
    ]
    return "\n".join([*lines, ""])
