"""Two builds of the exporter on one real GPU: the CPU each spends per collection, over time.

Why: a change to how the exporter reads NVML can only be judged on a real driver, and the
driver's cost may depend on what every reader of the GPU does, and on how long it has run.
In bench.real_gpu's fifth pass, exporters that skipped the per-process calls grew from
15.8 to 17.5 ms per collection within a run, while in-process A/Bs found them 3 ms cheaper.

The exporter of BASE (a directory holding another revision's `gpufleet` package, e.g.
`git archive REV gpufleet | tar -x -C BASE`) and the one of this tree each run as a daemon,
`-k` at `-c 1000`, attributing the GPU through the lab's fake kubelet to one admitted pod,
in phases: by default this tree's alone, BASE's alone, then both at once (`--phases`
picks and orders them). Under PyTorch (when it is there) a load holds the GPU for the
whole run, so the driver has a process to sample.
Every 10 s each running exporter's self-metrics are read.

Run (a machine with the NVIDIA driver): python3 -m bench.real_gpu_ab --base DIR --out OUT
A dry run without a GPU: add --sim-fleet 1xH100 (a test does).

OUT then holds the daemons' logs and summary.json: per phase and exporter, the CPU per
collection of each 10 s interval (the deltas of gpufleet_exporter_collection_cpu_seconds_total
over those of gpufleet_exporter_collections_total) and of the whole phase, and exit codes.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from importlib.util import find_spec
from itertools import pairwise
from pathlib import Path
from typing import Any

from bench.real_gpu import (
    CONTAINER,
    LOAD,
    POD,
    RESOURCE,
    Daemon,
    collection_counters,
    exporter_flags,
    http_get,
    ms_per_collection,
    plugin_flags,
)
from gpufleet.lab.kubelet.kubelet import FakeKubelet

SAMPLE_SECONDS = 10.0
PHASES = {"head": ("head",), "base": ("base",), "both": ("head", "base")}


def counters(port: int) -> tuple[float, float] | None:
    """An exporter's (collections, collection CPU seconds) so far; None if unreadable."""
    status, text = http_get(f"http://127.0.0.1:{port}/metrics")
    return collection_counters(text) if status == 200 else None


def phase(
    name: str, builds: tuple[str, ...], flags: list[str], base: Path, out: Path, seconds: float
) -> dict[str, Any]:
    """Run `builds` together for `seconds`; their CPU per collection, interval by interval."""
    daemons = {
        build: Daemon(f"{name}-{build}", flags, out, python_path=base if build == "base" else None)
        for build in builds
    }
    found: dict[str, Any] = {}
    try:
        ports = {build: d.wait_port() for build, d in daemons.items()}
        time.sleep(3)  # past the first collections: discovery, GPM's first sample
        readings = {build: [counters(port)] for build, port in ports.items() if port}
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(min(SAMPLE_SECONDS, max(0.0, end - time.monotonic())))
            for build, port in ports.items():
                if port:
                    readings[build].append(counters(port))
        for build, series in readings.items():
            kept = [r for r in series if r is not None]
            found[build] = {
                "intervals_ms": [ms_per_collection(a, b) for a, b in pairwise(kept)],
                "phase_ms": ms_per_collection(kept[0], kept[-1]) if len(kept) > 1 else None,
                "collections": kept[-1][0] - kept[0][0] if kept else 0,
            }
    finally:
        for build, daemon in daemons.items():
            found.setdefault(build, {})["stop"] = daemon.stop()
    return found


def run(
    out: Path, *, base: Path, sim_fleet: str | None, phase_seconds: float, phases: list[str]
) -> None:
    summary: dict[str, Any] = {"started": time.time(), "phase_seconds": phase_seconds}
    root = Path(tempfile.mkdtemp(prefix="gfab", dir="/tmp"))
    kubelet = FakeKubelet(root)
    kubelet.start()
    plugin = Daemon("plugin", plugin_flags(kubelet, out, sim_fleet), out)
    load = None
    try:
        if not kubelet.device_plugins.wait_for_registrations(RESOURCE, 1, timeout_seconds=60):
            summary["error"] = "the plugin did not register"
            return
        time.sleep(1)  # ListAndWatch's first answer
        summary["admitted"] = kubelet.admit(POD, CONTAINER, RESOURCE, 1)
        if sim_fleet is None and shutil.which("nvidia-smi") and find_spec("torch"):
            total = len(phases) * (phase_seconds + 10)
            load = subprocess.Popen([sys.executable, "-c", LOAD, str(total)])
            time.sleep(10)  # the load's allocation and first products
        summary["load"] = load is not None
        flags = exporter_flags(["-k"], kubelet, sim_fleet)
        summary["phases"] = {
            name: phase(name, PHASES[name], flags, base, out, phase_seconds) for name in phases
        }
    finally:
        if load is not None:
            load.kill()
            load.wait()
        summary["plugin_stop"] = plugin.stop()
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="holds the other gpufleet/")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sim-fleet", help="simulated GPUs instead of the real ones")
    parser.add_argument("--phase-seconds", type=float, default=120.0)
    parser.add_argument(
        "--phases",
        default="head,base,both",
        help="which phases, in this order: head (this tree's alone), base (BASE's alone), "
        "both (side by side)",
    )
    args = parser.parse_args()
    if not (args.base / "gpufleet" / "__init__.py").is_file():
        parser.error(f"--base: {args.base} holds no gpufleet/ package")
    phases = args.phases.split(",")
    unknown = [name for name in phases if name not in PHASES]
    if unknown:
        parser.error(f"--phases: {', '.join(unknown)}: expected some of {', '.join(PHASES)}")
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    run(
        args.out,
        base=args.base.resolve(),
        sim_fleet=args.sim_fleet,
        phase_seconds=args.phase_seconds,
        phases=phases,
    )


if __name__ == "__main__":
    main()
