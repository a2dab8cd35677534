"""One pass of the exporter and the plugin over a real GPU, on the production code paths.

What no simulator can show: what the driver answers. The plugin (real NVML) registers with
the lab's fake kubelet, a pod is admitted to it, and exporters read the GPU with
dcgm-exporter's own counters files, attributing it to that pod through pod-resources. Each
exporter is scraped idle, under a PyTorch load (when PyTorch is there) and after it, each
scrape pair bracketing `nvidia-smi -q -x`, so the values can be compared field by field.
Then one collection is timed in-process, whole and NVML call by call, and every daemon is
stopped with SIGTERM. Last, a plugin with the `cdi-cri` strategy and
`--pass-device-specs` writes its CDI spec for the real driver (driver root '/', and each
--cdi-driver-root) and answers Allocate.

Run (a machine with the NVIDIA driver): python3 -m bench.real_gpu --out DIR
A dry run without a GPU: python3 -m bench.real_gpu --out DIR --sim-fleet 1xH100

DIR then holds the scrapes (*.prom), nvidia-smi's answers (*.xml, *-apps.csv), the
daemons' logs, the node labels, the CDI specs (cdiN/), the host's device nodes and driver
libraries (host-driver.txt), and summary.json: devices and Allocate answers, RSS (with
the floor of a bare Python and of one that loaded NVML), each exporter's CPU per
collection, the in-process timings and call profile, and exit codes.
bench/real_gpu_compare.py compares the scrapes with nvidia-smi.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict

from bench import procstat
from bench.exposition import metric_value
from gpufleet.exporter.nvml.reader import NvmlReader
from gpufleet.lab.kubelet.kubelet import FakeKubelet

REPO = Path(__file__).resolve().parent.parent
DCGM = REPO / "tests" / "data" / "dcgm-exporter"
RESOURCE = "nvidia.com/gpu"
POD = ("default", "llm-0", "0b9f2c1e-real-gpu-pod")
CONTAINER = "vllm"
CLI = "import sys; from gpufleet.cli import main; sys.exit(main())"

# Each exporter: (name, flags). `-k` ones attribute through the fake kubelet.
EXPORTERS = (
    ("dcp", ["-k", "-f", str(DCGM / "dcp-metrics-included.csv")]),
    ("compat", ["-f", str(DCGM / "1.x-compatibility-metrics.csv")]),
    ("default", ["-k"]),
)
# Every daemon listens on a port of the kernel's choosing and logs it.
LISTENING = re.compile(r"listening on \[\('127\.0\.0\.1', (\d+)\)\]")

LOAD = """
import sys, time, torch
hold = torch.empty(16 << 30, dtype=torch.uint8, device="cuda")  # 16 GiB: FB_USED moves
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(50):
        b = a @ a
    torch.cuda.synchronize()
"""


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except OSError as exc:
        return 0, str(exc)


def healthy(port: int | None, timeout: float = 30.0) -> bool:
    """Whether the exporter on `port` answers `/health` with 200 within `timeout`. It says
    503 until its first collection, which a loaded machine delays past the moment its port
    opens: read once, it failed the dry-run test in a CI run (the compat exporter, under
    the suite's load on two cores)."""
    if port is None:
        return False
    deadline = time.monotonic() + timeout
    while http_get(f"http://127.0.0.1:{port}/health")[0] != 200:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


class Daemon:
    """A gpufleet daemon in its own process, logging to DIR/NAME.log."""

    def __init__(
        self, name: str, args: list[str], out: Path, python_path: Path | None = None
    ) -> None:
        """`python_path`: run the gpufleet package found there, not this tree's."""
        self.name = name
        self.log = (out / f"{name}.log").open("w")
        command, env = [sys.executable, "-c", CLI, *args], None
        if python_path is not None:  # -P: the working directory's gpufleet is not on the path
            command.insert(1, "-P")
            paths = [str(python_path), os.environ.get("PYTHONPATH", "")]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def wait_port(self, timeout: float = 60.0) -> int | None:
        """The port the daemon logged it listens on; None if it exited or never did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            found = LISTENING.search(Path(self.log.name).read_text())
            if found:
                return int(found.group(1))
            time.sleep(0.2)
        return None

    def memory(self) -> dict[str, int]:
        return _kib(procstat.memory_bytes(self.proc.pid))

    def stop(self) -> dict[str, Any]:
        started = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = "killed after 20 s"
        self.log.close()
        return {"rc": rc, "seconds_to_exit": round(time.monotonic() - started, 3)}


def smi(out: Path, name: str) -> None:
    """nvidia-smi's full answer and its compute processes, when it is installed."""
    if shutil.which("nvidia-smi") is None:
        return
    for suffix, args in (
        (".xml", ["-q", "-x"]),
        ("-apps.csv", ["--query-compute-apps=pid,process_name,used_memory", "--format=csv"]),
    ):
        result = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True)
        (out / f"{name}{suffix}").write_text(result.stdout + result.stderr)


def point(out: Path, name: str, ports: dict[str, int]) -> None:
    """Every exporter scraped, then nvidia-smi, then every exporter again after its next
    collection (-c 1000)."""
    for when in ("before", "after"):
        if when == "after":
            smi(out, name)
            time.sleep(1.1)  # a collection after nvidia-smi's, so the two bracket it
        for exporter, port in ports.items():
            status, text = http_get(f"http://127.0.0.1:{port}/metrics")
            (out / f"{name}-{exporter}-{when}.prom").write_text(text if status == 200 else "")


def plugin_flags(kubelet: FakeKubelet, out: Path, sim_fleet: str | None) -> list[str]:
    flags = [
        "plugin",
        "--kubelet-socket",
        str(kubelet.device_plugins_dir / "kubelet.sock"),
        "--node-labels-file",
        str(out / "node-labels.txt"),
        "--metrics-address",
        "127.0.0.1:0",
    ]
    return flags + (["--sim-fleet", sim_fleet] if sim_fleet else [])


def exporter_flags(flags: list[str], kubelet: FakeKubelet, sim: str | None) -> list[str]:
    args = ["exporter", "-a", "127.0.0.1:0", "-c", "1000", *flags]
    if "-k" in flags:
        args += ["--pod-resources-kubelet-socket", str(kubelet.pod_resources_socket)]
        args += ["--kubelet-checkpoint", str(kubelet.checkpoint_path)]
    return args + (["--sim-fleet", sim] if sim else [])


class TimedNvml:
    """An NVML library whose nvml* functions count their calls and wall time: where a
    collection's time goes inside the driver."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        self.calls: Counter[str] = Counter()
        self.seconds: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._lib, name)
        if not (name.startswith("nvml") and callable(value)):
            return value

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start
                self.calls[name] += 1

        return timed

    def profile(self, collections: int) -> dict[str, dict[str, float]]:
        """Per function: calls and milliseconds per collection, slowest first."""
        return {
            name: {
                "calls": round(self.calls[name] / collections, 2),
                "ms": round(self.seconds[name] * 1000 / collections, 4),
            }
            for name, _ in self.seconds.most_common()
        }


def time_collections(sim_fleet: str | None, n: int) -> dict[str, Any]:
    """One collection of dcp-metrics-included's fields (no -k), in-process: thread CPU and
    wall time per collection, the NVML read alone and the whole collection; then the NVML
    read's calls, timed one by one."""
    from gpufleet.exporter.daemon import build, prepare
    from gpufleet.exporter.settings import ExporterSettings
    from gpufleet.nvml.backend import start_backend
    from gpufleet.settings import settings_from_argv

    argv = ["-f", str(DCGM / "dcp-metrics-included.csv"), "-a", "127.0.0.1:0"]
    settings = settings_from_argv(ExporterSettings, prog="real_gpu", description="", argv=argv)
    prepared = prepare(settings)
    backend = start_backend(sim_fleet)
    parts = build(prepared, backend.lib)
    collector, reader = parts.collector, parts.collector._reader
    try:
        for _ in range(3):  # GPM rates need two samples
            collector.collect_once()
        result: dict[str, Any] = {}
        for label, fn in (
            ("read", lambda: reader.collect(time.monotonic())),
            ("collect", collector.collect_once),
        ):
            walls, cpus = [], []
            for _ in range(n):
                wall, cpu = time.perf_counter(), time.thread_time()
                fn()
                cpus.append((time.thread_time() - cpu) * 1000)
                walls.append((time.perf_counter() - wall) * 1000)
            walls.sort()
            cpus.sort()
            result[f"{label}_wall_ms_p50"] = round(walls[n // 2], 3)
            result[f"{label}_wall_ms_p99"] = round(walls[min(n - 1, n * 99 // 100)], 3)
            result[f"{label}_cpu_ms_p50"] = round(cpus[n // 2], 3)
    finally:
        collector.close()
    timed = TimedNvml(backend.lib)
    fields = (f.spec for f in prepared.selection.fields)
    reader = NvmlReader(timed, fields)  # every GPU's processes, as -k on shared GPUs
    try:
        reader.discover()
        for _ in range(3):
            reader.collect(time.monotonic())
        timed.calls.clear()
        timed.seconds.clear()
        for _ in range(n):
            reader.collect(time.monotonic())
        result["nvml_calls"] = timed.profile(n)
        result["field_values_ms"] = time_field_values(backend.lib, reader, n)
        return result
    finally:
        reader.close()
        backend.lib.nvmlShutdown()
        backend.close()


def time_field_values(lib: Any, reader: NvmlReader, n: int) -> dict[str, float]:
    """nvmlDeviceGetFieldValues asked for one field at a time on GPU 0, in ms per call:
    which fields make the batched call slow."""
    handle = lib.nvmlDeviceGetHandleByIndex(0)
    found = {}
    for request in reader._fv_request:
        start = time.perf_counter()
        for _ in range(n):
            lib.nvmlDeviceGetFieldValues(handle, [request])
        found[str(request)] = round((time.perf_counter() - start) * 1000 / n, 4)
    return dict(sorted(found.items(), key=lambda item: -item[1]))


FLOOR = """
import sys
if sys.argv[1] != "python":
    import pynvml
    pynvml.nvmlInit()
    if sys.argv[1] == "nvml+gpm":
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        pynvml.nvmlGpmSampleGet(handle, pynvml.nvmlGpmSampleAlloc())
print(open("/proc/self/status").read())
"""


def memory_floor() -> dict[str, dict[str, int]]:
    """RSS of a bare Python, of one that has initialised NVML, and of one that has also
    taken a GPM sample: what any NVML reader pays before its own code."""
    found = {}
    for what in ("python", "nvml", "nvml+gpm"):
        status = subprocess.run(
            [sys.executable, "-c", FLOOR, what], capture_output=True, text=True
        ).stdout
        found[what] = _kib(procstat.status_memory_bytes(status))
    return found


def _kib(values: dict[str, int]) -> dict[str, int]:
    return {key: value // 1024 for key, value in values.items()}


def versions() -> dict[str, str]:
    import grpc
    import pynvml
    from google.protobuf import __version__ as protobuf

    pynvml.nvmlInit()
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        nvml = pynvml.nvmlSystemGetNVMLVersion()
    finally:
        pynvml.nvmlShutdown()
    return {
        "python": sys.version.split()[0],
        "grpc": grpc.__version__,
        "protobuf": protobuf,
        "driver": str(driver),
        "nvml": str(nvml),
    }


def collection_counters(metrics: str) -> tuple[float, float] | None:
    """A running exporter's (collections, collection CPU seconds) so far, from its
    self-metrics; None where either is missing."""
    collections = metric_value(metrics, "gpufleet_exporter_collections_total")
    seconds = metric_value(metrics, "gpufleet_exporter_collection_cpu_seconds_total")
    return None if collections is None or seconds is None else (collections, seconds)


def ms_per_collection(first: tuple[float, float], last: tuple[float, float]) -> float | None:
    """CPU ms per collection between two `collection_counters` readings."""
    collections = last[0] - first[0]
    return round((last[1] - first[1]) * 1000 / collections, 3) if collections > 0 else None


def collection_cpu_ms(metrics: str) -> float | None:
    """A running exporter's mean CPU per collection so far, from its self-metrics."""
    counters = collection_counters(metrics)
    return None if counters is None else ms_per_collection((0.0, 0.0), counters)


def cdi_allocations(out: Path, sim_fleet: str | None, driver_roots: list[str]) -> dict[str, Any]:
    """Per driver root: the CDI spec a plugin with `cdi-cri` and `--pass-device-specs`
    writes (into DIR/cdiN) and what its Allocate answers, on a kubelet of its own."""
    found: dict[str, Any] = {}
    for n, driver_root in enumerate(driver_roots):
        root = Path(tempfile.mkdtemp(prefix="gfc", dir="/tmp"))
        kubelet = FakeKubelet(root)
        kubelet.start()
        flags = [
            *("plugin", "--kubelet-socket", str(kubelet.device_plugins_dir / "kubelet.sock")),
            *("--node-labels-file", "", "--metrics-address", ""),
            *("--device-list-strategy", "cdi-cri", "--pass-device-specs"),
            *("--cdi-spec-dirs", str(out / f"cdi{n}"), "--driver-root", driver_root),
            *(["--sim-fleet", sim_fleet] if sim_fleet else []),
        ]
        plugin = Daemon(f"plugin-cdi{n}", flags, out)
        try:
            result: dict[str, Any] = {"dir": f"cdi{n}"}
            if kubelet.device_plugins.wait_for_registrations(RESOURCE, 1, timeout_seconds=60):
                time.sleep(1)
                kubelet.admit(POD, CONTAINER, RESOURCE, 1)
                response = kubelet.allocation_response(POD[0], POD[1], CONTAINER)
                result["allocate"] = MessageToDict(response)
            found[driver_root] = result
        finally:
            found.setdefault(driver_root, {})["stop"] = plugin.stop()
            kubelet.stop()
            shutil.rmtree(root, ignore_errors=True)
    return found


def host_driver(out: Path) -> None:
    """The device nodes and the driver libraries the loader knows, for reading the specs."""
    text = subprocess.run(
        "ls -l /dev/nvidia* /dev/nvidia-caps 2>&1; ldconfig -p | grep -E 'nvidia|cuda' 2>&1; "
        "ls -l /usr/local/nvidia /usr/local/nvidia/* 2>&1 | head -200",
        shell=True,
        capture_output=True,
        text=True,
    ).stdout
    (out / "host-driver.txt").write_text(text)


def run(
    out: Path,
    *,
    sim_fleet: str | None,
    load_seconds: float,
    collections: int,
    driver_roots: list[str],
) -> None:
    summary: dict[str, Any] = {"started": time.time()}
    try:
        pass_over(
            out, summary, sim_fleet=sim_fleet, load_seconds=load_seconds, collections=collections
        )
        host_driver(out)
        summary["cdi"] = cdi_allocations(out, sim_fleet, driver_roots)
    finally:
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))


def pass_over(
    out: Path,
    summary: dict[str, Any],
    *,
    sim_fleet: str | None,
    load_seconds: float,
    collections: int,
) -> None:
    """The plugin and the exporters over the GPU, idle, under load and after; then one
    collection timed in-process."""
    if sim_fleet is None:
        summary["versions"] = versions()
        summary["memory_floor_kib"] = memory_floor()
    smi(out, "start")
    root = Path(tempfile.mkdtemp(prefix="gfk", dir="/tmp"))
    kubelet = FakeKubelet(root)
    kubelet.start()
    daemons: list[Daemon] = []
    try:
        plugin = Daemon("plugin", plugin_flags(kubelet, out, sim_fleet), out)
        daemons.append(plugin)
        registered = kubelet.device_plugins.wait_for_registrations(RESOURCE, 1, timeout_seconds=60)
        summary["plugin_registered"] = registered
        if registered:
            time.sleep(1)  # ListAndWatch's first answer
            devices = kubelet.device_plugins.devices(RESOURCE)
            summary["plugin_devices"] = [d._asdict() for d in devices]
            summary["admitted"] = kubelet.admit(POD, CONTAINER, RESOURCE, 1)
            response = kubelet.allocation_response(POD[0], POD[1], CONTAINER)
            summary["allocate"] = MessageToDict(response)
        for name, flags in EXPORTERS:
            daemons.append(Daemon(name, exporter_flags(flags, kubelet, sim_fleet), out))
        ports = {d.name: d.wait_port() for d in daemons[1:]}
        summary["ready"] = {name: healthy(port) for name, port in ports.items()}
        time.sleep(3)  # a few collections, the pod-resources view, GPM's second sample
        point(out, "idle", ports)
        # The load needs PyTorch with CUDA; without it the run has idle points only.
        if shutil.which("nvidia-smi") and load_seconds > 0 and find_spec("torch"):
            load = subprocess.Popen([sys.executable, "-c", LOAD, str(load_seconds)])
            summary["load_pid"] = load.pid
            for k in range(3):
                time.sleep(load_seconds / 4)
                point(out, f"load{k}", ports)
            load.wait()
            time.sleep(3)
            point(out, "after", ports)
        summary["plugin_metrics"] = http_get(f"http://127.0.0.1:{plugin.wait_port()}/metrics")[1]
        summary["memory_kib"] = {d.name: d.memory() for d in daemons if d.proc.poll() is None}
        summary["collection_cpu_ms"] = {
            name: collection_cpu_ms(http_get(f"http://127.0.0.1:{port}/metrics")[1])
            for name, port in ports.items()
        }
        summary["timing"] = time_collections(sim_fleet, collections)
    finally:
        summary["stop"] = {d.name: d.stop() for d in reversed(daemons)}
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sim-fleet", help="simulated GPUs instead of the real ones")
    parser.add_argument("--load-seconds", type=float, default=32.0)
    parser.add_argument("--collections", type=int, default=200)
    parser.add_argument(
        "--cdi-driver-root",
        action="append",
        default=[],
        help="also generate CDI specs with this --driver-root (repeatable; '/' always)",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    run(
        args.out,
        sim_fleet=args.sim_fleet,
        load_seconds=args.load_seconds,
        collections=args.collections,
        driver_roots=["/", *args.cdi_driver_root],
    )


if __name__ == "__main__":
    main()
