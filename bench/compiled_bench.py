"""The compiled simulator against the interpreted one: CPU seconds per policy-hour, same runs.

Why: issue 17 asks for <= 10 s of CPU per policy-hour of trace on this machine, and the
interpreted engine takes up to ~20 on the grid's heaviest runs (x10 crowds and mixes,
30-minute traces) when the shared machine is slow. `GPUFLEET_COMPILE=1` (setup.py)
compiles the engine's hot modules with mypyc; this bench builds that wheel (or takes
`--site`), then times the same runs in two child processes, one importing the compiled
modules and one the source, alternating (A B B A for `--repeat 2`), best of the repeats per
run. Each child checks which engine it imported and reports a digest of every run's
per-request TTFT and end-to-end times, so a speed-up that changed a result would show.

The runs are the held-out grid's (bench.heldout_bench: its families, first held-out seed,
warm start, 30-minute traces); each is one policy at one knob value, default: the heaviest
families at x10 for every policy.

Run from the repository root (the test extra's mypy builds the wheel):
    python3 -m bench.compiled_bench [--runs mix:10:gpufleet:0.99,...] [--repeat 2]
        [--site DIR] [--json PATH]
"""

import argparse
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from bench import heldout_bench, procstat
from bench.entry import exit_with
from gpufleet.autoscaler.core import factory as policies
from gpufleet.autoscaler.replay.core import engine, sweep

REPO = Path(__file__).resolve().parents[1]
ENGINE_DIR = "gpufleet/autoscaler/replay/core"  # where the wheel puts the extensions
TARGET_SECONDS = 10.0  # issue 17, §4: CPU seconds per policy-hour of trace
DURATION = 1800
FAMILIES = ("mix", "flash-long", "flash-short", "longctx")
# gpufleet's default, a chosen value, and its top (the largest fleets: the costliest routing).
KNOBS = (
    ("hpa", 80.0),
    ("keda", 2.0),
    ("gpufleet", 0.99),
    ("gpufleet", 0.998),
    ("gpufleet", 0.99999),
    ("oracle", None),
)
Run = tuple[str, int, str, float | None]  # family, scale, policy, knob value (oracle: None)
DEFAULT_RUNS = ",".join(
    f"{family}:10:{policy}" + ("" if value is None else f":{value:g}")
    for family in FAMILIES
    for policy, value in KNOBS
)


def parse_runs(text: str) -> list[Run]:
    """FAMILY:SCALE:POLICY[:KNOB],... -> runs; a bad entry raises ValueError naming it."""
    runs = []
    for entry in filter(None, (part.strip() for part in text.split(","))):
        parts = entry.split(":")
        bad = ValueError(
            f"--runs: {entry!r} is not FAMILY:SCALE:POLICY[:KNOB] "
            "(every policy but oracle takes a knob value)"
        )
        if len(parts) not in (3, 4) or (len(parts) == 3) != (parts[2] == "oracle"):
            raise bad
        if parts[0] not in heldout_bench.FAMILIES or parts[2] not in policies.NAMES:
            raise ValueError(
                f"--runs: {entry!r}: families are {', '.join(heldout_bench.FAMILIES)}; "
                f"policies {', '.join(policies.NAMES)}"
            )
        try:
            value = float(parts[3]) if len(parts) == 4 else None
            runs.append((parts[0], int(parts[1]), parts[2], value))
        except ValueError:
            raise bad from None
        if value is not None and value not in policies.knob(parts[2]).sweep:
            raise ValueError(f"--runs: {entry!r}: {value:g} is not in {parts[2]}'s sweep")
    return runs


def child(runs: list[Run]) -> None:
    """Time each run in this process; one JSON line per run, after the engine's path."""
    print(json.dumps({"engine": engine.__file__}), flush=True)
    for family, scale, policy, value in runs:
        seeds = heldout_bench.HELDOUT_SEEDS[:1]
        specs = heldout_bench._specs(family, scale, seeds, policy, DURATION, {})
        (spec,) = [s for s in specs if value is None or float(s.knob_value) == value]
        started = time.process_time()
        result = sweep.run(spec)
        cpu = time.process_time() - started
        digest = hashlib.sha256(result.ttft_seconds.tobytes() + result.e2e_seconds.tobytes())
        digest.update(repr(result.node_gpu_hours).encode())
        row = {
            "cpu": cpu,
            "hours": spec.trace.duration_seconds / 3600,
            "digest": digest.hexdigest(),
        }
        print(json.dumps(row), flush=True)


def build_compiled(into: Path) -> Path:
    """The compiled wheel of this checkout, unpacked under `into`: a folder to put first on
    a path. Built from a copy of the source, so no extension lands in the checkout (where
    it would shadow the source), with this environment's mypy: nothing is fetched."""
    src = into / "src"
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "setup.py", "README.md", "MANIFEST.in"):
        shutil.copy(REPO / name, src / name)
    skip = shutil.ignore_patterns("__pycache__")
    for tree in ("gpufleet", "rules"):  # the wheel ships rules/ (setup.py)
        shutil.copytree(REPO / tree, src / tree, ignore=skip)
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run(
        [*pip, "-w", str(into / "wheel"), str(src)],
        env={**os.environ, "GPUFLEET_COMPILE": "1"},
        check=True,
    )
    (wheel,) = (into / "wheel").glob("gpufleet-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(into / "site")
    return into / "site"


def time_in_child(runs_text: str, site: Path | None) -> tuple[str, list[dict[str, float]]]:
    """One child's engine path and rows; `site` first on its path, else the source."""
    path = [str(site), str(REPO)] if site else [str(REPO)]
    done = subprocess.run(
        [sys.executable, "-P", "-m", "bench.compiled_bench", "--child", "--runs", runs_text],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    return lines[0]["engine"], lines[1:]


def render(
    runs: list[Run],
    best: dict[str, list[dict[str, float]]],
    engines: dict[str, str],
    *,
    header: dict[str, str],
) -> str:
    lines = ["# The compiled simulator against the interpreted one", ""]
    lines += [f"- {key}: {value}" for key, value in header.items()]
    lines += [f"- {build} engine: `{path}`" for build, path in engines.items()]
    lines += [
        "",
        "| run | interpreted: CPU s per policy-hour | compiled | compiled / interpreted "
        "| same results |",
        "|---|---:|---:|---:|---|",
    ]
    for i, (family, scale, policy, value) in enumerate(runs):
        slow, fast = best["interpreted"][i], best["compiled"][i]
        knob = "" if value is None else f" {value:g}"
        lines.append(
            f"| {family} x{scale} {policy}{knob} | {slow['cpu'] / slow['hours']:.2f} "
            f"| {fast['cpu'] / fast['hours']:.2f} | {fast['cpu'] / slow['cpu']:.2f} "
            f"| {'yes' if slow['digest'] == fast['digest'] else '**no**'} |"
        )
    # The oracle is a search (its repairs replay the trace up to 12 times), not a policy.
    policy_rows = [i for i, run in enumerate(runs) if run[2] != "oracle"]
    for build_name, rows in best.items():
        worst = max((rows[i]["cpu"] / rows[i]["hours"] for i in policy_rows), default=0.0)
        verdict = "met" if worst <= TARGET_SECONDS else "not met"
        lines.append("")
        lines.append(
            f"{build_name}: the policies' runs at most {worst:.2f} s per policy-hour "
            f"(<= {TARGET_SECONDS:g} s: {verdict})"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default=DEFAULT_RUNS, help="FAMILY:SCALE:POLICY[:KNOB],...")
    parser.add_argument("--repeat", type=int, default=2, help="children per build (A B B A)")
    parser.add_argument("--site", type=Path, help="an unpacked compiled wheel; else build one")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        runs = parse_runs(args.runs)
    except ValueError as error:
        parser.error(str(error))
    if args.child:
        child(runs)
        return 0
    if args.site and not any((args.site / ENGINE_DIR).glob("engine.*.so")):
        parser.error(f"--site {args.site}: no compiled engine there ({ENGINE_DIR}/engine.*.so)")
    with tempfile.TemporaryDirectory(prefix="gf-compiled-") as tmp:
        site = args.site or build_compiled(Path(tmp))
        order = ["interpreted", "compiled"]
        best: dict[str, list[dict[str, float]]] = {}
        engines: dict[str, str] = {}
        for k in range(max(1, args.repeat)):
            for name in order if k % 2 == 0 else order[::-1]:
                engines[name], rows = time_in_child(args.runs, site if name == "compiled" else None)
                best[name] = [
                    min(old, new, key=lambda row: row["cpu"])
                    for old, new in zip(best.get(name, rows), rows, strict=True)
                ]
    machine = procstat.machine_info()
    header = {
        "command": f"`python3 -m bench.compiled_bench {shlex.join(argv or sys.argv[1:])}`",
        "machine": f"{machine['cpu_model']}, {machine['cores']} cores",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "method": f"best of {max(1, args.repeat)} children per build, alternating; "
        f"held-out seed, {DURATION // 60}-minute traces, warm start, CPU of the run alone",
    }
    print(render(runs, best, engines, header=header), end="")
    if args.json:
        payload = {"header": header, "engines": engines, "runs": args.runs, "best": best}
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    exit_with(main)
