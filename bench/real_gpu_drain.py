"""Which NVML call costs more on a real GPU while nobody reads its per-process utilization.

Why: bench.real_gpu_ab found an exporter that skips nvmlDeviceGetProcessUtilization no
cheaper alone on an H200, yet 3.9 ms per collection cheaper beside one that makes the call.
This times the calls of an exporter's collection one by one (the default counters, no
per-process reads), in-process at one collection a second, in three phases: alone, while
another process calls nvmlDeviceGetProcessUtilization on every GPU once a second (the
drain), and alone again. Under PyTorch (when it is there) a load holds the GPU throughout.

Run (a machine with the NVIDIA driver): python3 -m bench.real_gpu_drain --out FILE.json
A dry run without a GPU: add --sim-fleet 1xH100 (a test does).
"""

import argparse
import json
import shutil
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from bench.real_gpu import LOAD, TimedNvml
from gpufleet.exporter.nvml.reader import NvmlReader

DRAIN = """
import time, pynvml
pynvml.nvmlInit()
handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
while True:
    for handle in handles:
        try:
            pynvml.nvmlDeviceGetProcessUtilization(handle, 0)
        except pynvml.NVMLError:
            pass
    time.sleep(1)
"""


def phase(reader: NvmlReader, timed: TimedNvml, collections: int) -> dict[str, Any]:
    """`collections` collections a second apart: thread CPU per collection, and each NVML
    function's wall ms per collection."""
    timed.calls.clear()
    timed.seconds.clear()
    cpu = 0.0
    for _ in range(collections):
        started, cpu_started = time.monotonic(), time.thread_time()
        reader.collect(started, processes_of=())
        cpu += time.thread_time() - cpu_started
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    profile = timed.profile(collections)
    return {
        "cpu_ms": round(cpu * 1000 / collections, 3),
        "nvml_wall_ms": round(sum(p["ms"] for p in profile.values()), 3),
        "calls": profile,
    }


def run(sim_fleet: str | None, collections: int) -> dict[str, Any]:
    from gpufleet.exporter.daemon import prepare
    from gpufleet.exporter.settings import ExporterSettings
    from gpufleet.nvml.backend import start_backend
    from gpufleet.settings import settings_from_argv

    settings = settings_from_argv(
        ExporterSettings, prog="real_gpu_drain", description="", argv=["-a", "127.0.0.1:0"]
    )
    fields = [f.spec for f in prepare(settings).selection.fields]
    backend = start_backend(sim_fleet)
    timed = TimedNvml(backend.lib)
    reader = NvmlReader(timed, fields)
    load = drain = None
    found: dict[str, Any] = {}
    try:
        if sim_fleet is None and shutil.which("nvidia-smi") and find_spec("torch"):
            load = subprocess.Popen([sys.executable, "-c", LOAD, str(3 * collections + 30)])
            time.sleep(10)  # the load's allocation and first products
        found["load"] = load is not None
        reader.discover()
        for _ in range(3):  # GPM's first samples
            reader.collect(time.monotonic(), processes_of=())
        found["alone"] = phase(reader, timed, collections)
        if sim_fleet is None:  # the simulator has no driver to drain
            drain = subprocess.Popen([sys.executable, "-c", DRAIN])
        found["drained"] = phase(reader, timed, collections)
        if drain is not None:
            drain.kill()
            drain.wait()
            drain = None
        found["alone_again"] = phase(reader, timed, collections)
        return found
    finally:
        for process in (drain, load):
            if process is not None:
                process.kill()
                process.wait()
        reader.close()
        backend.lib.nvmlShutdown()
        backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sim-fleet", help="simulated GPUs instead of the real ones")
    parser.add_argument("--collections", type=int, default=60, help="per phase")
    args = parser.parse_args()
    args.out.write_text(json.dumps(run(args.sim_fleet, args.collections), indent=1))


if __name__ == "__main__":
    main()
