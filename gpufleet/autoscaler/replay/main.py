"""`gpufleet simulate`: load traces, run the policies, print the table or write the report.

The command-line edge of the simulator: it reads flags and files, shows progress on stderr,
fans sweep runs out to processes and writes report.md and the PNGs. Everything it prints
comes from the pure `core.sweep` and `core.report` modules. Bad flags and unreadable traces
exit 2 with a message naming the flag or the file and line, before any run starts.
"""

import concurrent.futures
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from gpufleet.autoscaler.replay import plots
from gpufleet.autoscaler.replay.core import report, sweep
from gpufleet.autoscaler.replay.core.engine import SimulationError
from gpufleet.autoscaler.replay.core.result import RunResult
from gpufleet.autoscaler.replay.core.workloads import WorkloadError, workload_trace
from gpufleet.autoscaler.replay.settings import SimulateSettings, command_line, merge_repeated
from gpufleet.autoscaler.replay.trace_file import TraceError, load_trace
from gpufleet.settings import settings_from_argv

PROG = "gpufleet simulate"
DESCRIPTION = """Replay request traces through the autoscaling policies in a simulated GPU
cluster (replica cold starts, node provisioning, batch-slot serving, delayed metrics) and
compare SLO attainment and GPU-hours against a clairvoyant oracle.

  gpufleet simulate --trace ../shared/traces/azure-llm-2023-conv.csv
  gpufleet simulate --trace code.csv,conv.csv --report out/
  gpufleet simulate --trace conv.csv --sweep --report sweep/

The Azure LLM inference 2023 traces (code, conv) live in the shared traces folder
(../shared/traces next to a gpufleet checkout).
"""


class ProgressBar:
    """One stderr line per run: a bar redrawn in place while it runs, then a summary.

    Drawn only when `live` (stderr is a terminal and progress was not turned off); the
    final line is printed either way, so logs still show each run once.
    """

    WIDTH = 30

    def __init__(
        self,
        label: str,
        *,
        stream: TextIO,
        live: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.stream = stream
        self.live = live
        self.percent = -1
        self.clock = clock
        self.started = clock()

    def __call__(self, fraction: float) -> None:
        percent = int(100 * min(max(fraction, 0.0), 1.0))
        if not self.live or percent == self.percent:
            return
        self.percent = percent
        filled = self.WIDTH * percent // 100
        bar = "#" * filled + "." * (self.WIDTH - filled)
        self.stream.write(f"\r{self.label} [{bar}] {percent:3d}%")
        self.stream.flush()

    def done(self, result: RunResult) -> None:
        elapsed = self.clock() - self.started
        clear = "\r\x1b[K" if self.live else ""
        self.stream.write(f"{clear}{self.label}: {summary(result)} ({elapsed:.1f} s)\n")
        self.stream.flush()


def summary(result: RunResult) -> str:
    return (
        f"{100 * result.slo_attainment:.2f}% within {result.slo_ttft_seconds:g} s SLO, "
        f"{result.node_gpu_hours:.2f} billed GPU-h"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = merge_repeated(list(sys.argv[1:] if argv is None else argv), "--trace")
    args = merge_repeated(args, "--workload", sep=";")
    settings = settings_from_argv(SimulateSettings, prog=PROG, description=DESCRIPTION, argv=args)
    if not settings.trace_paths and not settings.workload_specs:
        return _usage_error("flag --trace or --workload is required (see --help)")
    try:
        traces = [
            load_trace(path, scale=settings.scale, seed=settings.seed)
            for path in settings.trace_paths
        ]
    except TraceError as exc:
        return _usage_error(f"invalid flag --trace: {exc}")
    try:
        traces += [
            workload_trace(spec, seed=settings.seed, scale=settings.scale)
            for spec in settings.workload_specs
        ]
    except WorkloadError as exc:
        return _usage_error(f"invalid flag --workload: {exc}")
    out_dir = Path(settings.report) if settings.report else None
    if out_dir is not None:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return _usage_error(f"invalid flag --report: cannot create {out_dir}: {exc.strerror}")
        try:  # before the runs, not after them: /proc and /sys exist but take no files
            tempfile.TemporaryFile(dir=out_dir).close()
        except OSError as exc:
            return _usage_error(f"invalid flag --report: cannot write in {out_dir}: {exc.strerror}")
    specs = sweep.plan(
        traces,
        settings.policy_names,
        workload=settings.workload(),
        config=settings.sim_config(),
        tuning=settings.tuning(),
        sweep=settings.sweep,
        warm_start=settings.warm_start,
    )
    live = settings.progress and sys.stderr.isatty()
    try:
        if settings.sweep:
            jobs = settings.jobs or os.cpu_count() or 1
            results = run_parallel(specs, jobs=jobs, stream=sys.stderr)
        else:
            results = run_serial(specs, stream=sys.stderr, live=live)
    except SimulationError as exc:  # a run that never ends: not the user's input
        if live:
            sys.stderr.write("\n")  # past the progress bar
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    if out_dir is None:
        print(_tables(settings, results), end="")
        return 0
    warm = {s.trace.name: s.config.initial_replicas for s in specs} if settings.warm_start else {}
    try:
        _write_report(settings, results, out_dir, warm_start=warm)
    except OSError as exc:  # the disk filled, or the directory went, during the runs
        print(f"{PROG}: error: cannot write the report in {out_dir}: {exc}", file=sys.stderr)
        print(_tables(settings, results), end="")
        return 1
    return 0


def run_serial(specs: Sequence[sweep.RunSpec], *, stream: TextIO, live: bool) -> list[RunResult]:
    """Each spec in turn in this process, one progress line each."""
    results = []
    for spec in specs:
        bar = ProgressBar(spec.label, stream=stream, live=live)
        result = sweep.run(spec, progress=bar)
        bar.done(result)
        results.append(result)
    return results


def run_parallel(
    specs: Sequence[sweep.RunSpec],
    *,
    jobs: int,
    stream: TextIO,
    run: Callable[[sweep.RunSpec], RunResult] = sweep.run,
) -> list[RunResult]:
    """Every spec in a pool of `jobs` processes; results in `specs` order, whatever finishes
    first. A line per finished run on `stream` (the runs overlap, so no bars)."""
    results: list[RunResult | None] = [None] * len(specs)
    started = time.monotonic()
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=max(1, jobs))
    try:
        futures = {pool.submit(run, spec): i for i, spec in enumerate(specs)}
        for done, future in enumerate(concurrent.futures.as_completed(futures), start=1):
            i = futures[future]
            results[i] = future.result()
            elapsed = time.monotonic() - started
            stream.write(
                f"[{done}/{len(specs)}] {specs[i].label}: {summary(results[i])} "
                f"({elapsed:.0f} s elapsed)\n"
            )
            stream.flush()
    finally:
        # After a failed run (or Ctrl-C) the queued runs are dropped, not run to the end.
        pool.shutdown(wait=True, cancel_futures=True)
    return [r for r in results if r is not None]


def _tables(settings: SimulateSettings, results: list[RunResult]) -> str:
    """The results as the terminal shows them: the fronts of a sweep, else one table."""
    return report.sweep_tables(results) if settings.sweep else report.tables(results)


def _write_report(
    settings: SimulateSettings,
    results: list[RunResult],
    out_dir: Path,
    *,
    warm_start: dict[str, int],
) -> None:
    images = plots.write_plots(
        results, out_dir, gpus_per_node=settings.gpus_per_node, sweep_mode=settings.sweep
    )
    if images is None:
        print(plots.INSTALL_HINT, file=sys.stderr)
    build = report.sweep_report if settings.sweep else report.markdown_report
    text = build(
        results,
        parameters=report.parameters(
            workload=settings.workload(),
            config=settings.sim_config(),
            tuning=settings.tuning(),
            scale=settings.scale,
            seed=settings.seed,
            warm_start=warm_start,
        ),
        command=command_line(settings),
        images=images,
    )
    path = out_dir / "report.md"
    path.write_text(text)
    print(f"wrote {path}", file=sys.stderr)


def _usage_error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2
