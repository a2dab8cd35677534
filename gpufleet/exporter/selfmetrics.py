"""The exporter's own health metrics, `gpufleet_exporter_*`, as metric families.

Pure: the collector gathers the numbers (counters it keeps, process stats it reads) into a
`SelfStats` record and this module shapes them; they are rendered with the GPU series.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.exporter.fields import MetricType
from gpufleet.exporter.series import MetricFamily, Sample

P = "gpufleet_exporter_"


@dataclass(frozen=True, slots=True, kw_only=True)
class SelfStats:
    """Everything the self-metrics report, as of the collection being rendered."""

    version: str
    collections_total: int
    collection_duration_seconds: float  # wall time of this collection
    collection_cpu_seconds_total: float  # CPU spent collecting, all collections
    last_success_timestamp_seconds: float
    series: int  # GPU series in this exposition (self-metrics excluded)
    errors_total: Mapping[str, int]  # collection errors by kind, cumulative
    kubelet_errors_total: Mapping[str, int]  # pod-resources / checkpoint errors by kind
    kubelet_last_success_timestamp_seconds: float | None
    attribution: Mapping[str, int]  # current unknown ids / unresolved uids / ...
    requests_total: Mapping[tuple[str, int], int]  # (route, HTTP status) -> count
    resident_memory_bytes: int | None
    process_cpu_seconds_total: float | None


def _family(name: str, kind: MetricType, help: str, samples: list[Sample]) -> MetricFamily:
    return MetricFamily(name=P + name, type=kind, help=help, samples=tuple(samples))


def _one(name: str, kind: MetricType, help: str, value: float) -> MetricFamily:
    return _family(name, kind, help, [Sample(labels=(), value=value)])


def _by(label: str, values: Mapping[str, int]) -> list[Sample]:
    return [Sample(labels=((label, k),), value=v) for k, v in sorted(values.items())]


def self_families(stats: SelfStats) -> tuple[MetricFamily, ...]:
    """The self-metric families, in a fixed order."""
    g, c = MetricType.GAUGE, MetricType.COUNTER
    families = [
        _family(
            "build_info",
            g,
            "gpufleet version; value is always 1.",
            [Sample(labels=(("version", stats.version),), value=1)],
        ),
        _one("collections_total", c, "Collections completed.", stats.collections_total),
        _one(
            "collection_duration_seconds",
            g,
            "Wall time of the last collection.",
            stats.collection_duration_seconds,
        ),
        _one(
            "collection_cpu_seconds_total",
            c,
            "CPU time spent collecting.",
            stats.collection_cpu_seconds_total,
        ),
        _one(
            "last_success_timestamp_seconds",
            g,
            "Unix time of the last collection.",
            stats.last_success_timestamp_seconds,
        ),
        _one("series", g, "GPU series served (self-metrics excluded).", stats.series),
        _family(
            "errors_total",
            c,
            "Collection errors by kind (a lost GPU, an NVML error, a collection that timed out).",
            _by("kind", stats.errors_total),
        ),
        _family(
            "kubelet_errors_total",
            c,
            "pod-resources and checkpoint read errors by kind.",
            _by("kind", stats.kubelet_errors_total),
        ),
        _family(
            "attribution_dropped",
            g,
            "Items pod attribution could not place in the last collection, by reason.",
            _by("reason", stats.attribution),
        ),
        _family(
            "http_requests_total",
            c,
            "HTTP requests served, by route and status code.",
            [
                Sample(labels=(("route", r), ("code", str(s))), value=v)
                for (r, s), v in sorted(stats.requests_total.items())
            ],
        ),
    ]
    if stats.kubelet_last_success_timestamp_seconds is not None:
        families.append(
            _one(
                "kubelet_last_success_timestamp_seconds",
                g,
                "Unix time of the last successful pod-resources List.",
                stats.kubelet_last_success_timestamp_seconds,
            )
        )
    if stats.resident_memory_bytes is not None:
        families.append(
            _one(
                "resident_memory_bytes",
                g,
                "Resident set size of the exporter.",
                stats.resident_memory_bytes,
            )
        )
    if stats.process_cpu_seconds_total is not None:
        families.append(
            _one(
                "process_cpu_seconds_total",
                c,
                "CPU time of the whole exporter process.",
                stats.process_cpu_seconds_total,
            )
        )
    return tuple(f for f in families if f.samples)
