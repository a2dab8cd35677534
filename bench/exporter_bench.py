"""Benchmark of the exporter against a naive dcgm-exporter-shaped baseline (issue 2, section 6)
and the Python peer nvitop-exporter (issue 15, section 4).

Workload: the simulated node `gpufleet.lab.node.NodeLayout()` (8 x H100, two of them split
into 7 x 1g.10gb MIG slices, 104 pods, 88 of them on time-sliced GPUs) at a 1 s collection
interval. This process runs the node's kubelet side (a FakeKubelet serving pod-resources
with no rate limit, so the baseline's per-scrape `List` is never throttled) and the scrape
client; each exporter runs alone in a child process and is measured from outside through
/proc/<pid>: gpufleet with `-k` and without (`bench.exporter_child`), the baseline
(`bench.naive_baseline`) and nvitop-exporter in its own environment on the same simulator
(`bench.peer_child`, `bench.peer_env`). They run one after the other, never together, so
none steals CPU from another. The memory floors (the stack's libraries and the simulator
in a fresh interpreter, `bench.import_cost`) are measured in the same run.

Run from the repository root:  python3 -m bench.exporter_bench [--quick] [--json PATH]
Prints a Markdown report on stdout. Exits 1 if the run fails or its output checks fail (no
pod labels, different metric families). Loopback only; every phase is bounded in count.
The first run installs the peer from PyPI (pip) into `.bench/`.
"""

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import platform
import re
import shlex
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import aiohttp

from bench import import_cost, loadgen, peer_env, procstat, report
from bench.entry import exit_with
from bench.exposition import metric_value
from bench.report import CollectionStats, ExporterRun, Floors, OutputStats, Phase
from gpufleet.lab.node import DEFAULT_FLEET, NodeLayout, SimNode

REPO = Path(__file__).resolve().parent.parent
# gpufleet's collection threads: the scheduler "gpufleet-collector" and the thread(s) each
# collection runs on ("gpufleet-collect..."); short-lived ones are counted as ended threads.
COLLECT_THREAD_PREFIX = "gpufleet-collect"
INTERVAL_MS = 1000
STARTUP_TIMEOUT_SECONDS = 60.0
READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 10.0
QUICK = {"scrapes": 50, "baseline_scrapes": 10, "peer_scrapes": 10, "idle_seconds": 2.0}
FULL = {"scrapes": 10_000, "baseline_scrapes": 300, "peer_scrapes": 300, "idle_seconds": 15.0}
PEER_SERIES = "process_gpu_memory_MiB{"  # nvitop has collected the GPU processes once


class BenchError(Exception):
    """The benchmark could not run or its output checks failed."""


@dataclasses.dataclass(slots=True, kw_only=True)
class Child:
    """A running exporter process and what it announced on stdout."""

    name: str
    pid: int
    url: str
    threads: dict[str, int]  # thread name -> native id, where the child reports them
    scrapes_sent: int = 0


@contextlib.asynccontextmanager
async def running(
    name: str,
    module: str,
    args: list[str],
    log_dir: Path,
    *,
    python: Path | None = None,
    env: dict[str, str] | None = None,
) -> AsyncIterator[Child]:
    """Start `python -m module args`, read its JSON announcement, SIGTERM it on exit.

    `python` defaults to this interpreter. A failure while it runs becomes a BenchError
    carrying the tail of its log (stderr).
    """
    log_path = log_dir / f"{name}.log"
    with log_path.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            *(str(python or sys.executable), "-m", module, *args),
            cwd=REPO,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), STARTUP_TIMEOUT_SECONDS)
            if not line:
                raise BenchError(f"{module} exited at start")
            info = json.loads(line)
            yield Child(
                name=name,
                pid=proc.pid,
                url=f"http://127.0.0.1:{info['port']}/metrics",
                threads=info.get("threads", {}),
            )
        except (BenchError, OSError, TimeoutError, aiohttp.ClientError, loadgen.ScrapeError) as exc:
            raise BenchError(
                f"{name}: {str(exc) or type(exc).__name__}\n"
                f"--- {module} log tail ---\n{_tail(log_path)}"
            ) from exc
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_SECONDS)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()


def _tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def output_stats(text: str, prometheus_body: bytes) -> OutputStats:
    """Series and family counts of a text exposition; sizes as text and as Prometheus gets it."""
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    return OutputStats(
        series_total=len(series),
        series_dcgm=sum(line.startswith("DCGM_") for line in series),
        series_with_pod=sum(bool(re.search(r'[{,]pod="[^"]', line)) for line in series),
        dcgm_families=tuple(re.findall(r"^# TYPE (DCGM_\S+) ", text, re.MULTILINE)),
        text_bytes=len(text.encode()),
        prometheus_body_bytes=len(prometheus_body),
    )


async def measure(child: Child, name: str, load: Awaitable[loadgen.LoadResult | int]) -> Phase:
    """Await one load (a LoadResult, or a plain scrape count for paced load) and read the
    child's CPU around it: the process, its long-lived threads by name, and the threads
    that ended during the load (the process clock keeps their time, /proc forgets them)."""
    cpu0, threads0 = procstat.cpu_seconds(child.pid), procstat.thread_cpu_seconds(child.pid)
    start = time.perf_counter()
    result = await load
    wall = time.perf_counter() - start
    threads1, cpu1 = procstat.thread_cpu_seconds(child.pid), procstat.cpu_seconds(child.pid)
    live = {tid: cpu - threads0.get(tid, 0.0) for tid, cpu in threads1.items()}
    named = {n: live[t] for n, t in child.threads.items() if t in live and t in threads0}
    timed = result if isinstance(result, loadgen.LoadResult) else None
    scrapes = timed.scrapes if timed else int(result)
    child.scrapes_sent += scrapes
    return Phase(
        name=name,
        concurrency=timed.concurrency if timed else 1,
        scrapes=scrapes,
        wall_seconds=wall,
        p50_ms=timed.percentile(50) * 1e3 if timed else None,
        p99_ms=timed.percentile(99) * 1e3 if timed else None,
        max_ms=timed.latencies_seconds[-1] * 1e3 if timed else None,
        process_cpu_seconds=cpu1 - cpu0,
        thread_cpu_seconds=named,
        other_threads_cpu_seconds=sum(live.values()) - sum(named.values()),
        ended_threads_cpu_seconds=max(0.0, cpu1 - cpu0 - sum(live.values())),
        rss_bytes_after=procstat.memory_bytes(child.pid)["VmRSS"],
        scrapes_sent_after=child.scrapes_sent,
    )


Ready = Callable[[str, int], bool]  # (text exposition, scrapes seen) -> warmed up


def collected(min_collections: int, *, pods: bool) -> Ready:
    """Ready once `min_collections` collections are behind the exposition (profiling rates
    need two) and, with `pods`, it has pod labels. An exporter that collects per scrape
    (the baseline) has as many collections as scrapes."""

    def ready(text: str, seen: int) -> bool:
        collections = metric_value(text, "gpufleet_exporter_collections_total")
        enough = (seen if collections is None else collections) >= min_collections
        return enough and (not pods or bool(re.search(r'[{,]pod="[^"]', text)))

    return ready


def peer_collected(text: str, seen: int) -> bool:
    """nvitop-exporter has read its GPU processes (its first collection is done)."""
    return PEER_SERIES in text and seen >= 3


async def wait_ready(child: Child, ready: Ready) -> str:
    """Poll /metrics until `ready` says it is warm; returns that text exposition."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    seen = 0
    while True:
        with contextlib.suppress(loadgen.ScrapeError):  # 503 until the first collection
            text = (await loadgen.fetch(child.url)).decode()
            child.scrapes_sent += 1
            seen += 1
            if ready(text, seen):
                return text
        if time.monotonic() > deadline:
            raise BenchError(f"{child.name}: not warmed up after {READY_TIMEOUT_SECONDS:.0f} s")
        await asyncio.sleep(0.1)


async def collection_phase(
    child: Child, *, seconds: float, headers: dict[str, str]
) -> tuple[Phase, CollectionStats]:
    """Scrape once a second; CPU per collection from the collection threads (the loop's and
    those that ran a collection and ended) and from the exporter's self-metrics."""
    before = (await loadgen.fetch(child.url)).decode()
    load = loadgen.paced(child.url, seconds=seconds, headers=headers)
    phase = await measure(child, "idle, 1 scrape/s", load)
    after = (await loadgen.fetch(child.url)).decode()
    child.scrapes_sent += 2

    def delta(name: str) -> float:
        return (metric_value(after, name) or 0.0) - (metric_value(before, name) or 0.0)

    collections = int(delta("gpufleet_exporter_collections_total"))
    collecting = phase.ended_threads_cpu_seconds + sum(
        cpu for n, cpu in phase.thread_cpu_seconds.items() if n.startswith(COLLECT_THREAD_PREFIX)
    )
    per_collection = collecting / collections if collections else None
    self_reported = None
    if collections:
        self_reported = delta("gpufleet_exporter_collection_cpu_seconds_total") / collections
    return phase, CollectionStats(
        collections=collections,
        interval_seconds=INTERVAL_MS / 1000,
        thread_cpu_seconds_per_collection=per_collection,
        self_reported_cpu_seconds_per_collection=self_reported,
        last_duration_seconds=metric_value(after, "gpufleet_exporter_collection_duration_seconds"),
    )


async def run_exporter(
    child: Child,
    options: argparse.Namespace,
    *,
    scrapes: int,
    headers: dict[str, str],
    gpufleet: bool,
    ready: Ready,
    concurrency: tuple[int, ...],
) -> ExporterRun:
    """Warm up, check the output, then the idle phase and one closed-loop phase per
    concurrency level."""
    text = await wait_ready(child, ready)
    body = await loadgen.fetch(child.url, headers)
    output = output_stats(text, body)
    rss_warm = procstat.memory_bytes(child.pid)["VmRSS"]
    collection = None
    if gpufleet:
        idle, collection = await collection_phase(
            child, seconds=options.idle_seconds, headers=headers
        )
    else:
        idle = await measure(
            child,
            "idle, 1 scrape/s",
            loadgen.paced(child.url, seconds=options.idle_seconds, headers=headers),
        )
    phases = [idle]
    for level in concurrency:
        async with loadgen.Clients(child.url, concurrency=level, headers=headers) as clients:
            child.scrapes_sent += clients.warmup_scrapes
            phases.append(await measure(child, f"{level} concurrent", clients.run(scrapes)))
    memory = procstat.memory_bytes(child.pid)
    smaps = procstat.smaps_rollup_bytes(child.pid)
    return ExporterRun(
        name=child.name,
        output=output,
        phases=tuple(phases),
        collection=collection,
        rss_bytes_warm=rss_warm,
        rss_bytes_end=memory["VmRSS"],
        peak_rss_bytes=memory["VmHWM"],
        pss_bytes_end=smaps["Pss"],
        pss_anon_bytes_end=smaps["Pss_Anon"],
        pss_file_bytes_end=smaps["Pss_File"],
        scrapes_sent=child.scrapes_sent,
    )


async def run_all(options: argparse.Namespace) -> report.Results:
    """gpufleet with and without -k, the baseline, then the peer, against one node."""
    headers = dict(loadgen.PROMETHEUS_HEADERS)
    if options.encoding == "identity":
        headers["Accept-Encoding"] = "identity"
    with (
        SimNode(NodeLayout(), rate_limit=None) as node,
        tempfile.TemporaryDirectory(prefix="gpufleet-bench-") as logs,
    ):
        kubelet = node.kubelet
        assert kubelet is not None
        log_dir = Path(logs)
        socket_args = ["--kubelet-socket", str(kubelet.pod_resources_socket)]
        interval_args = ["--interval-ms", str(INTERVAL_MS)]
        k_args = [*socket_args, "--checkpoint", str(kubelet.checkpoint_path), *interval_args]

        async def measured(
            name: str,
            module: str,
            args: list[str],
            *,
            scrapes: int,
            ready: Ready,
            concurrency: tuple[int, ...] = options.concurrency,
            **spawn: Any,
        ) -> ExporterRun:
            async with running(name, module, args, log_dir, **spawn) as child:
                return await run_exporter(
                    child,
                    options,
                    scrapes=scrapes,
                    headers=headers,
                    gpufleet=module == "bench.exporter_child",
                    ready=ready,
                    concurrency=concurrency,
                )

        gpufleet = "bench.exporter_child"
        ours = await measured(
            "gpufleet", gpufleet, k_args, scrapes=options.scrapes, ready=collected(3, pods=True)
        )
        plain = await measured(
            "gpufleet without -k",
            gpufleet,
            interval_args,
            scrapes=options.scrapes,
            ready=collected(3, pods=False),
        )
        base = await measured(
            "baseline",
            "bench.naive_baseline",
            socket_args,
            scrapes=options.baseline_scrapes,
            ready=collected(3, pods=True),
        )
        peer = peer_calls = None
        if options.peer_python:
            calls_path = log_dir / "peer-calls.json"
            peer = await measured(
                "nvitop-exporter",
                "bench.peer_child",
                ["--calls", str(calls_path), "--interval", str(INTERVAL_MS / 1000)],
                scrapes=options.peer_scrapes,
                ready=peer_collected,
                concurrency=options.peer_concurrency,
                python=options.peer_python,
                env={**os.environ, "PYTHONPATH": str(REPO)},  # the simulator only
            )
            peer_calls = report.PeerCalls(**json.loads(calls_path.read_text()))
        return report.Results(
            ours=ours, plain=plain, base=base, peer=peer, peer_calls=peer_calls, pods=len(node.pods)
        )


def floors() -> Floors:
    """The memory floors: the stack's libraries and the simulated node, no exporter."""
    sim = import_cost.SIM_NODE
    return Floors(
        interpreter=import_cost.rss_after(()),
        stack=import_cost.rss_after(import_cost.STACK, setup=sim),
        stack_k=import_cost.rss_after(import_cost.STACK_K, setup=sim),
        stack_h2=import_cost.rss_after(import_cost.STACK_H2, setup=sim),
    )


def environment(options: argparse.Namespace, command: str, pods: int) -> dict[str, str]:
    """Machine, versions, workload and method, for the report's header."""
    machine = procstat.machine_info()
    versions = ", ".join(
        f"{dist} {metadata.version(dist)}"
        for dist in ("aiohttp", "prometheus-client", "grpcio", "nvidia-ml-py")
    )
    return {
        "command": f"`{command}`",
        "machine": f"{machine['cpu_model']}, {machine['cores']} cores, "
        f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}; {versions}",
        "workload": f"simulated node `NodeLayout()`: {DEFAULT_FLEET}, {pods} pods; "
        f"collection interval {INTERVAL_MS} ms; fake kubelet without rate limit; the "
        "simulated NVML runs inside each exporter process, so its Python cost counts as theirs",
        "client": "aiohttp in the parent process, one keep-alive connection per concurrent "
        f"client, Prometheus 2.x Accept header, Accept-Encoding: {options.encoding}; latency "
        "client-side (time.perf_counter, request sent to body read)",
        "baseline": "prometheus-client Gauge per field, refreshed per scrape (NvmlReader, "
        "List on a new gRPC channel), generate_latest + gzip as make_wsgi_app, on aiohttp; "
        f"{options.baseline_scrapes} scrapes per phase",
        "peer": (
            f"{peer_env.PEER} in its own venv, on the same simulated NVML swapped in as "
            f"`pynvml`, collecting every {INTERVAL_MS / 1000:g} s, prometheus-client's WSGI "
            f"server; {options.peer_scrapes} scrapes per phase"
            if options.peer_python
            else "not run (--no-peer)"
        ),
        "CPU": "the exporter process's CPU-time clock (ns, threads that ended included) over "
        "the phase, divided by its scrapes (gpufleet's and the peer's collections in the "
        "phase included)",
        "memory": "VmRSS and VmHWM from /proc/<pid>/status, PSS from /proc/<pid>/smaps_rollup, "
        "after the last phase; floors from fresh interpreters (`python3 -m bench.import_cost`)",
    }


def _concurrency(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text!r}"
        ) from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"concurrency levels must be >= 1: {text!r}")
    return levels


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python3 -m bench.exporter_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--scrapes", type=int, help=f"gpufleet scrapes per phase (default {FULL['scrapes']})"
    )
    parser.add_argument(
        "--baseline-scrapes",
        type=int,
        help=f"baseline scrapes per phase (default {FULL['baseline_scrapes']}: it is slow)",
    )
    parser.add_argument(
        "--concurrency",
        type=_concurrency,
        default=(1, 8, 50),
        help="concurrent clients per phase, comma separated (default 1,8,50)",
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        help=f"length of the 1 scrape/s phase (default {FULL['idle_seconds']:g})",
    )
    parser.add_argument(
        "--encoding",
        choices=("gzip", "identity"),
        default="gzip",
        help="Accept-Encoding of the scrapes (Prometheus sends gzip)",
    )
    parser.add_argument(
        "--peer-scrapes",
        type=int,
        help=f"nvitop-exporter scrapes per phase (default {FULL['peer_scrapes']})",
    )
    parser.add_argument(
        "--peer-concurrency",
        type=_concurrency,
        default=(1, 8),
        help="the peer's concurrent clients per phase (default 1,8: prometheus-client's "
        "server listens with a backlog of 5, so 50 clients wait on SYN retries, not on it)",
    )
    parser.add_argument(
        "--no-peer",
        action="store_true",
        help=f"leave out nvitop-exporter (else {peer_env.PEER} is installed from PyPI)",
    )
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK}")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    options = parser.parse_args(argv)
    for key, value in (QUICK if options.quick else FULL).items():
        if getattr(options, key) is None:
            setattr(options, key, value)
    if min(options.scrapes, options.baseline_scrapes, options.peer_scrapes) < 1:
        parser.error("--scrapes, --baseline-scrapes and --peer-scrapes must be >= 1")
    if options.idle_seconds < 1:
        parser.error("--idle-seconds must be >= 1")
    return options


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    options = parse_args(argv)
    command = shlex.join(["python3", "-m", "bench.exporter_bench", *argv])
    try:
        options.peer_python = None if options.no_peer else peer_env.peer_python()
        results = asyncio.run(run_all(options))
    except (BenchError, peer_env.PeerEnvError) as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    problems = report.output_problems(results.ours, results.base)
    env = environment(options, command, results.pods)
    print(report.markdown(results, floors=floors(), environment=env, problems=problems))
    if options.json:
        runs = [results.ours, results.plain, results.base, results.peer]
        data = {
            "environment": env,
            "problems": problems,
            "runs": [dataclasses.asdict(run) for run in runs if run],
            "peer_calls": results.peer_calls and dataclasses.asdict(results.peer_calls),
        }
        options.json.write_text(json.dumps(data, indent=2) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    exit_with(main)
