"""The benchmark's results as records, and their Markdown report with the issues' targets.

Pure: no I/O, no clock. Builds text from the numbers `exporter_bench` measured; judging a
target is a comparison stated in the report, never a hidden threshold elsewhere.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

MIB = 1 << 20
# Issue 2, section 6.
TARGET_P99_MS = 2.0
TARGET_RSS_BYTES = 60 * MIB
TARGET_COLLECTION_CORE_RATIO = 0.01
TARGET_CPU_RATIO = 10.0
# Issue 15, section 4.
TARGET_RSS_K_BYTES = 56 * MIB
TARGET_RSS_PLAIN_BYTES = 45 * MIB


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputStats:
    """What one exporter serves once warm."""

    series_total: int
    series_dcgm: int  # DCGM_* series (the rest are the exporter's own metrics)
    series_with_pod: int  # series with a non-empty pod label
    dcgm_families: tuple[str, ...]
    text_bytes: int  # text format 0.0.4, uncompressed
    prometheus_body_bytes: int  # as sent for the benchmark's scrape headers


@dataclass(frozen=True, slots=True, kw_only=True)
class Phase:
    """One load phase: client-side latency and the exporter's CPU and memory."""

    name: str
    concurrency: int
    scrapes: int
    wall_seconds: float
    p50_ms: float | None  # None for paced phases (latency not the point there)
    p99_ms: float | None
    max_ms: float | None
    process_cpu_seconds: float
    thread_cpu_seconds: dict[str, float]  # long-lived threads the exporter named
    other_threads_cpu_seconds: float  # long-lived threads not named (gRPC core, ...)
    ended_threads_cpu_seconds: float  # threads that ended during the phase
    rss_bytes_after: int
    scrapes_sent_after: int  # scrapes the exporter has answered so far, warm-ups included

    @property
    def cpu_ms_per_scrape(self) -> float:
        return self.process_cpu_seconds / self.scrapes * 1e3

    @property
    def cpu_core_percent(self) -> float:
        return self.process_cpu_seconds / self.wall_seconds * 100


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectionStats:
    """gpufleet's collection cost over the idle phase."""

    collections: int
    interval_seconds: float
    thread_cpu_seconds_per_collection: float | None  # collection threads, from the kernel
    self_reported_cpu_seconds_per_collection: float | None  # collection_cpu_seconds_total
    last_duration_seconds: float | None

    @property
    def core_ratio(self) -> float | None:
        """Share of one core the collection thread takes at this interval."""
        cpu = self.thread_cpu_seconds_per_collection
        return None if cpu is None else cpu / self.interval_seconds


@dataclass(frozen=True, slots=True, kw_only=True)
class ExporterRun:
    name: str
    output: OutputStats
    phases: tuple[Phase, ...]  # the idle phase first, then one per concurrency level
    collection: CollectionStats | None  # gpufleet only
    rss_bytes_warm: int
    rss_bytes_end: int
    peak_rss_bytes: int
    pss_bytes_end: int  # proportional: pages shared with other processes count in part
    pss_anon_bytes_end: int  # heap and stacks
    pss_file_bytes_end: int  # code and shared libraries
    scrapes_sent: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerCalls:
    """NVML functions the peer called that the simulator lacks, and over how long."""

    missing: dict[str, int] = field(default_factory=dict)  # function -> calls
    seconds: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Floors:
    """Resident bytes of fresh interpreters holding what every exporter here holds."""

    interpreter: int  # nothing imported
    stack: int  # asyncio, pydantic-settings, nvidia-ml-py and the simulated node
    stack_h2: int  # the same and h2: what the exporter with -k loads
    stack_k: int  # aiohttp, pydantic-settings, nvidia-ml-py, grpc: issue 15's stack with -k


@dataclass(frozen=True, slots=True, kw_only=True)
class Results:
    """One benchmark run: gpufleet with -k (ours) and without, the baseline and the peer."""

    ours: ExporterRun
    plain: ExporterRun
    base: ExporterRun
    peer: ExporterRun | None
    peer_calls: PeerCalls | None
    pods: int


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _mib(value: int) -> str:
    return f"{value / MIB:.1f}"


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def output_problems(ours: ExporterRun, base: ExporterRun) -> list[str]:
    """The run's correctness checks: pod labels present, same DCGM families on both sides."""
    problems = []
    if not ours.output.series_with_pod:
        problems.append("gpufleet served no series with a pod label")
    if set(ours.output.dcgm_families) != set(base.output.dcgm_families):
        only_ours = sorted(set(ours.output.dcgm_families) - set(base.output.dcgm_families))
        only_base = sorted(set(base.output.dcgm_families) - set(ours.output.dcgm_families))
        problems.append(
            f"metric families differ: only gpufleet {only_ours}, only baseline {only_base}"
        )
    return problems


def _output_table(runs: Sequence[ExporterRun]) -> list[str]:
    lines = [
        "| output | " + " | ".join(r.name for r in runs) + " |",
        "|---|" + "---:|" * len(runs),
    ]
    rows = [
        ("series (all)", lambda r: str(r.output.series_total)),
        ("series DCGM_*", lambda r: str(r.output.series_dcgm)),
        ('series with pod="..."', lambda r: str(r.output.series_with_pod)),
        ("DCGM_* families", lambda r: str(len(r.output.dcgm_families))),
        ("text body (KiB)", lambda r: f"{r.output.text_bytes / 1024:.0f}"),
        ("body as scraped (KiB)", lambda r: f"{r.output.prometheus_body_bytes / 1024:.0f}"),
    ]
    lines += [f"| {label} | " + " | ".join(get(r) for r in runs) + " |" for label, get in rows]
    return lines


def _phase_table(runs: Sequence[ExporterRun]) -> list[str]:
    lines = [
        "| exporter | load | scrapes | p50 ms | p99 ms | max ms | scrapes/s "
        "| CPU ms/scrape | CPU % of a core | RSS after (MiB) | after N scrapes |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        for p in run.phases:
            rate = p.scrapes / p.wall_seconds
            lines.append(
                f"| {run.name} | {p.name} | {p.scrapes} | {_ms(p.p50_ms)} | {_ms(p.p99_ms)} "
                f"| {_ms(p.max_ms)} | {rate:.1f} | {p.cpu_ms_per_scrape:.3f} "
                f"| {p.cpu_core_percent:.1f} | {_mib(p.rss_bytes_after)} | {p.scrapes_sent_after} |"
            )
    return lines


def _thread_table(run: ExporterRun) -> list[str]:
    names = sorted({n for p in run.phases for n in p.thread_cpu_seconds})
    if not names:
        return []
    lines = [
        "| load | " + " | ".join(names) + " | other threads (gRPC core) | ended threads |",
        "|---|" + "---:|" * (len(names) + 2),
    ]
    for p in run.phases:
        cpu = [p.thread_cpu_seconds.get(n, 0.0) for n in names]
        cpu += [p.other_threads_cpu_seconds, p.ended_threads_cpu_seconds]
        cells = [f"{c / p.wall_seconds * 100:.2f}" for c in cpu]
        lines.append(f"| {p.name} | " + " | ".join(cells) + " |")
    return lines


def _collection_lines(stats: CollectionStats) -> list[str]:
    cpu = stats.thread_cpu_seconds_per_collection
    own = stats.self_reported_cpu_seconds_per_collection
    ratio = stats.core_ratio
    duration = stats.last_duration_seconds
    return [
        f"- collections in the idle phase: {stats.collections} "
        f"(interval {stats.interval_seconds:g} s)",
        f"- CPU per collection, all of it (gather, attribution, series, render, gzip), from "
        f"the kernel's counters of the collection threads: "
        f"{_ms(None if cpu is None else cpu * 1e3)} ms = "
        f"{'n/a' if ratio is None else f'{ratio * 100:.2f}'} % of one core",
        f"- self-reported `gpufleet_exporter_collection_cpu_seconds_total` per collection: "
        f"{_ms(None if own is None else own * 1e3)} ms",
        f"- last `gpufleet_exporter_collection_duration_seconds`: "
        f"{_ms(None if duration is None else duration * 1e3)} ms",
    ]


def targets(ours: ExporterRun, base: ExporterRun) -> list[str]:
    """The issue's targets, each with the measured value and PASS/FAIL."""
    lines = ["| target | measured | result |", "|---|---|---|"]
    for p in ours.phases[1:]:
        lines.append(
            f"| scrape p99 <= {TARGET_P99_MS:g} ms ({p.name}) | {_ms(p.p99_ms)} ms "
            f"| {_verdict(p.p99_ms is not None and p.p99_ms <= TARGET_P99_MS)} |"
        )
    lines.append(
        f"| RSS <= {_mib(TARGET_RSS_BYTES)} MiB after {ours.scrapes_sent} scrapes "
        f"| {_mib(ours.rss_bytes_end)} MiB (peak {_mib(ours.peak_rss_bytes)}) "
        f"| {_verdict(ours.rss_bytes_end <= TARGET_RSS_BYTES)} |"
    )
    ratio = ours.collection.core_ratio if ours.collection else None
    lines.append(
        f"| collection <= {TARGET_COLLECTION_CORE_RATIO:.0%} of one core at 1 s "
        f"| {'n/a' if ratio is None else f'{ratio * 100:.2f} %'} "
        f"| {_verdict(ratio is not None and ratio <= TARGET_COLLECTION_CORE_RATIO)} |"
    )
    for index, (ours_phase, base_phase) in enumerate(zip(ours.phases, base.phases, strict=True)):
        times = base_phase.cpu_ms_per_scrape / max(ours_phase.cpu_ms_per_scrape, 1e-9)
        load = ours_phase.name + (", gpufleet's collections included" if index == 0 else "")
        lines.append(
            f"| baseline CPU/scrape >= {TARGET_CPU_RATIO:g}x gpufleet's ({load}) "
            f"| {base_phase.cpu_ms_per_scrape:.3f} / {ours_phase.cpu_ms_per_scrape:.3f} ms "
            f"= {times:.1f}x | {_verdict(times >= TARGET_CPU_RATIO)} |"
        )
    return lines


def _memory_table(runs: Sequence[ExporterRun]) -> list[str]:
    lines = [
        "| exporter | RSS warm | RSS end | peak RSS | PSS end | PSS anon | PSS file |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        values = (
            r.rss_bytes_warm,
            r.rss_bytes_end,
            r.peak_rss_bytes,
            r.pss_bytes_end,
            r.pss_anon_bytes_end,
            r.pss_file_bytes_end,
        )
        lines.append(f"| {r.name} | " + " | ".join(_mib(v) for v in values) + " |")
    return lines


def _floor_lines(floors: Floors) -> list[str]:
    return [
        "Floors, fresh interpreters holding no exporter (MiB): "
        f"interpreter {_mib(floors.interpreter)}; asyncio + pydantic-settings + nvidia-ml-py "
        f"+ the simulated node {_mib(floors.stack)} (what the exporter loads); the same + h2 "
        f"{_mib(floors.stack_h2)} (with -k); aiohttp + pydantic-settings + nvidia-ml-py + grpc "
        f"+ the simulated node {_mib(floors.stack_k)} (issue 15's stack with -k).",
    ]


def _peer_call_lines(calls: PeerCalls) -> list[str]:
    if not calls.missing:
        return [f"None: every NVML function it called in {calls.seconds:.0f} s is simulated."]
    lines = ["| function | calls |", "|---|---:|"]
    lines += [f"| `{name}` | {n} |" for name, n in sorted(calls.missing.items())]
    return [*lines, "", f"over the peer's {calls.seconds:.0f} s."]


def memory_targets(results: Results, floors: Floors) -> list[str]:
    """Issue 15's targets: RSS with and without -k (over its floor), CPU against the peer."""
    lines = ["| target | measured | result |", "|---|---|---|"]
    k, plain = results.ours, results.plain
    lines += [
        f"| RSS <= {_mib(TARGET_RSS_K_BYTES)} MiB ({k.name}) | {_mib(k.rss_bytes_end)} MiB; "
        f"issue 15's floor (aiohttp and grpc) {_mib(floors.stack_k)}, RSS minus that floor "
        f"{_mib(k.rss_bytes_end - floors.stack_k)} MiB; the floor of what it loads "
        f"(h2, no aiohttp or grpc) {_mib(floors.stack_h2)}, so "
        f"{_mib(k.rss_bytes_end - floors.stack_h2)} MiB is gpufleet's "
        f"| {_verdict(k.rss_bytes_end <= TARGET_RSS_K_BYTES)} |",
        f"| RSS <= {_mib(TARGET_RSS_PLAIN_BYTES)} MiB ({plain.name}) | "
        f"{_mib(plain.rss_bytes_end)} MiB; its floor {_mib(floors.stack)}, so "
        f"{_mib(plain.rss_bytes_end - floors.stack)} MiB is gpufleet's "
        f"| {_verdict(plain.rss_bytes_end <= TARGET_RSS_PLAIN_BYTES)} |",
    ]
    if results.peer:
        peer_phases = {p.name: p for p in results.peer.phases}
        pairs = [(p, peer_phases[p.name]) for p in results.ours.phases if p.name in peer_phases]
        for ours_phase, peer_phase in pairs:
            times = peer_phase.cpu_ms_per_scrape / max(ours_phase.cpu_ms_per_scrape, 1e-9)
            lines.append(
                f"| less CPU per scrape than nvitop-exporter ({ours_phase.name}, "
                "collections included) "
                f"| {ours_phase.cpu_ms_per_scrape:.3f} vs {peer_phase.cpu_ms_per_scrape:.3f} "
                f"ms = {times:.1f}x less | {_verdict(times > 1)} |"
            )
    return lines


def markdown(
    results: Results, *, floors: Floors, environment: dict[str, str], problems: list[str]
) -> str:
    """The whole report."""
    ours, base = results.ours, results.base
    runs = [r for r in (ours, results.plain, base, results.peer) if r]
    lines = ["# gpufleet exporter benchmark", ""]
    lines += [f"- {key}: {value}" for key, value in environment.items()]
    lines += ["", "## Output", "", *_output_table(runs), ""]
    lines += [f"Output check: {'OK' if not problems else '; '.join(problems)}", ""]
    lines += ["## Scrape latency, CPU and memory", "", *_phase_table(runs), ""]
    lines += [
        "Idle rows: one scrape per second, so gpufleet's and the peer's CPU per scrape there "
        "is mostly their 1 s collection; latency is not sampled. CPU is the exporter "
        "process's alone; the client's runs in the benchmark process, on the same cores.",
        "",
    ]
    if ours.collection:
        lines += ["## gpufleet collection", "", *_collection_lines(ours.collection), ""]
    thread_lines = _thread_table(ours)
    if thread_lines:
        lines += [
            "CPU % of one core, by gpufleet thread (each collection runs on a thread of its "
            "own, so its time shows under ended threads):",
            "",
            *thread_lines,
            "",
        ]
    lines += ["## Targets (issue 2, section 6)", "", *targets(ours, base), ""]
    lines += ["## Memory (MiB, after the last phase)", "", *_memory_table(runs), ""]
    lines += [*_floor_lines(floors), ""]
    if results.peer_calls:
        lines += ["## NVML functions nvitop-exporter called that the simulator lacks", ""]
        lines += [*_peer_call_lines(results.peer_calls), ""]
    lines += ["## Targets (issue 15, section 4)", "", *memory_targets(results, floors), ""]
    return "\n".join(lines)
