"""Speed of the trace simulator: wall time per policy on the conversation trace, one core.

Why: issue 4 asks for one policy over the one-hour Azure conversation trace (19,366
requests) in <= 10 s on one core, so that a sweep of ~20 points per trace stays minutes,
not hours. Each policy runs through `sweep.run`, the same path `gpufleet simulate` takes
(engine, pipeline, the real policy object ticking at its real interval; the oracle through
its own search), in this process, pinned to one CPU where the OS allows it.

- wall is time.perf_counter around one run, CPU is time.process_time (this process, all
  threads; numpy may use a second thread, which would show as CPU > wall); each is the best
  of `--repeat` runs, the one least disturbed by the rest of the machine;
- loading and parsing the CSV is timed once, separately, and is not in the per-policy rows;
- "simulated x real time" is the trace's span over the wall time.

Run from the repository root:
    python3 -m bench.autoscaler_bench [--trace ../shared/traces/azure-llm-2023-conv.csv]
        [--policy hpa,keda,gpufleet,oracle] [--repeat 3] [--json PATH]
Prints a Markdown report on stdout; the 10-s target is reported PASS/FAIL, never enforced.
"""

import argparse
import dataclasses
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

from bench import procstat
from bench.entry import exit_with
from gpufleet.autoscaler.core import factory as policies
from gpufleet.autoscaler.core.factory import Tuning
from gpufleet.autoscaler.core.workload import WorkloadConfig
from gpufleet.autoscaler.replay.core import sweep
from gpufleet.autoscaler.replay.core.model import ReplayConfig
from gpufleet.autoscaler.replay.trace_file import load_trace

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "azure-llm-2023-conv.csv"
TARGET_SECONDS = 10.0  # issue 4: one policy, conversation trace, one core


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    policy: str
    wall_seconds: float
    cpu_seconds: float
    requests: int
    decisions: int
    simulated_seconds: float


def pin_to_one_cpu() -> str:
    """Restrict this process to its first allowed CPU; what happened, for the report."""
    if not hasattr(os, "sched_setaffinity"):
        return "not pinned (no sched_setaffinity on this OS)"
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return f"pinned to CPU {cpu}"


def time_policy(spec: sweep.RunSpec, *, repeat: int) -> Timing:
    """Best-of-`repeat` wall and CPU time of one run of `spec`."""
    walls, cpus = [], []
    for _ in range(repeat):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        result = sweep.run(spec)
        walls.append(time.perf_counter() - wall0)
        cpus.append(time.process_time() - cpu0)
    return Timing(
        policy=spec.policy,
        wall_seconds=min(walls),
        cpu_seconds=min(cpus),
        requests=result.requests,
        decisions=len(result.decisions),
        simulated_seconds=spec.trace.duration_seconds,
    )


def render(timings: list[Timing], *, header: dict[str, str]) -> str:
    lines = ["# gpufleet simulator benchmark", ""]
    lines += [f"- {key}: {value}" for key, value in header.items()]
    lines += [
        "",
        "| policy | wall (s) | CPU (s) | requests/s simulated | decisions "
        "| simulated x real time | <= 10 s |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for t in timings:
        verdict = "PASS" if t.wall_seconds <= TARGET_SECONDS else "FAIL"
        lines.append(
            f"| {t.policy} | {t.wall_seconds:.2f} | {t.cpu_seconds:.2f} "
            f"| {t.requests / t.wall_seconds:,.0f} | {t.decisions:,} "
            f"| {t.simulated_seconds / t.wall_seconds:,.0f}x | {verdict} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--policy", default=",".join(policies.NAMES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the timings here")
    args = parser.parse_args(argv)
    names = policies.check_names(tuple(n.strip() for n in args.policy.split(",") if n.strip()))
    pinned = pin_to_one_cpu()
    load0 = time.perf_counter()
    trace = load_trace(args.trace)
    load_seconds = time.perf_counter() - load0
    specs = sweep.plan(
        [trace],
        names,
        workload=WorkloadConfig(name="llm", max_replicas=200),
        config=ReplayConfig(),
        tuning=Tuning(),
        sweep=False,
    )
    timings = [time_policy(spec, repeat=max(1, args.repeat)) for spec in specs]
    machine = procstat.machine_info()
    header = {
        "command": f"`python3 -m bench.autoscaler_bench {shlex.join(argv or sys.argv[1:])}`",
        "machine": f"{machine['cpu_model']}, {machine['cores']} cores, {pinned}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "trace": f"{trace.name}: {len(trace):,} requests over {trace.duration_seconds / 60:.1f} "
        f"min (CSV load {load_seconds:.2f} s, not counted below)",
        "method": f"best of {max(1, args.repeat)} runs per policy, default simulator settings",
    }
    print(render(timings, header=header), end="")
    if args.json:
        rows = [dataclasses.asdict(t) for t in timings]
        args.json.write_text(json.dumps({"header": header, "timings": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    exit_with(main)
