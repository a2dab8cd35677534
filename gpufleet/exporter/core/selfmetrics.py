"""The exporter's own health metrics, `gpufleet_exporter_*`, as metric families.

Pure: the collector gathers the numbers (counters it keeps, process stats it reads) into a
`SelfStats` record and this module shapes them; they are rendered with the GPU series.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpufleet.core.server_stats import HELP as HTTP_HELP
from gpufleet.exporter.core.fields import MetricType
from gpufleet.exporter.core.series import MetricFamily, Sample

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
    entities_selected: int | None = None  # entities -d reports; None before a discovery
    errors_total: Mapping[str, int]  # collection errors by kind, cumulative
    kubelet_errors_total: Mapping[str, int]  # pod-resources / checkpoint errors by kind
    kubelet_last_success_timestamp_seconds: float | None
    kube_api_errors_total: Mapping[str, int]  # pod labels / ResourceSlices list errors
    attribution: Mapping[str, int]  # current unknown ids / unresolved uids / ...
    requests_total: Mapping[tuple[str, int], int]  # (route, HTTP status) -> count
    request_seconds_total: Mapping[str, float]  # route -> seconds spent serving it
    write_timeouts_total: int  # responses abandoned because the client stopped reading
    bad_requests_total: int = 0  # requests refused because they did not parse
    accept_errors_total: int = 0  # failed accept() calls (out of file descriptors)
    resident_memory_bytes: int | None
    process_cpu_seconds_total: float | None


_Read = Callable[[SelfStats], list[Sample]]


def _value(attr: str) -> _Read:
    """One unlabelled sample; none (the family is left out) when the value is unknown."""

    def read(stats: SelfStats) -> list[Sample]:
        value = getattr(stats, attr)
        return [] if value is None else [Sample(labels=(), value=value)]

    return read


def _by(attr: str, *labels: str) -> _Read:
    """One sample per key of a mapping, sorted; a tuple key fills several labels."""

    def read(stats: SelfStats) -> list[Sample]:
        samples = []
        for key, value in sorted(getattr(stats, attr).items()):
            parts = key if isinstance(key, tuple) else (key,)
            samples.append(
                Sample(labels=tuple(zip(labels, map(str, parts), strict=True)), value=value)
            )
        return samples

    return read


def _build_info(stats: SelfStats) -> list[Sample]:
    return [Sample(labels=(("version", stats.version),), value=1)]


G, C = MetricType.GAUGE, MetricType.COUNTER
# (name after the prefix, type, help, samples); the order is the exposition's.
FAMILIES: tuple[tuple[str, MetricType, str, _Read], ...] = (
    ("build_info", G, "gpufleet version; value is always 1.", _build_info),
    ("collections_total", C, "Collections completed.", _value("collections_total")),
    (
        "collection_duration_seconds",
        G,
        "Wall time of the last collection.",
        _value("collection_duration_seconds"),
    ),
    (
        "collection_cpu_seconds_total",
        C,
        "CPU time of completed collections (reading, attribution, rendering, gzip).",
        _value("collection_cpu_seconds_total"),
    ),
    (
        "last_success_timestamp_seconds",
        G,
        "Unix time of the last collection.",
        _value("last_success_timestamp_seconds"),
    ),
    ("series", G, "GPU series served (self-metrics excluded).", _value("series")),
    (
        "entities",
        G,
        "GPUs and MIG instances the -d/--devices selection reports, as of the last discovery; "
        "0: the selection matches nothing on this node.",
        _value("entities_selected"),
    ),
    (
        "errors_total",
        C,
        "Collection errors by kind (a lost GPU, an NVML error, a collection that timed out).",
        _by("errors_total", "kind"),
    ),
    (
        "kubelet_errors_total",
        C,
        "pod-resources and checkpoint read errors by kind.",
        _by("kubelet_errors_total", "kind"),
    ),
    (
        "kube_api_errors_total",
        C,
        "Kubernetes API list errors (pod labels, DRA ResourceSlices) by kind.",
        _by("kube_api_errors_total", "kind"),
    ),
    (
        "attribution_dropped",
        G,
        "Items pod attribution could not place in the last collection, by reason.",
        _by("attribution", "reason"),
    ),
    ("http_requests_total", C, HTTP_HELP["requests_total"], _by("requests_total", "route", "code")),
    (
        "http_request_seconds_total",
        C,
        HTTP_HELP["request_seconds_total"],
        _by("request_seconds_total", "route"),
    ),
    (
        "http_write_timeouts_total",
        C,
        HTTP_HELP["write_timeouts_total"],
        _value("write_timeouts_total"),
    ),
    ("http_bad_requests_total", C, HTTP_HELP["bad_requests_total"], _value("bad_requests_total")),
    (
        "http_accept_errors_total",
        C,
        HTTP_HELP["accept_errors_total"],
        _value("accept_errors_total"),
    ),
    (
        "kubelet_last_success_timestamp_seconds",
        G,
        "Unix time of the last successful pod-resources List.",
        _value("kubelet_last_success_timestamp_seconds"),
    ),
    (
        "resident_memory_bytes",
        G,
        "Resident set size of the exporter.",
        _value("resident_memory_bytes"),
    ),
    (
        "process_cpu_seconds_total",
        C,
        "CPU time of the whole exporter process.",
        _value("process_cpu_seconds_total"),
    ),
)


def self_families(stats: SelfStats) -> tuple[MetricFamily, ...]:
    """The self-metric families in `FAMILIES` order; one with no samples is left out."""
    families = ((P + name, kind, help, read(stats)) for name, kind, help, read in FAMILIES)
    return tuple(
        MetricFamily(name=name, type=kind, help=help, samples=tuple(samples))
        for name, kind, help, samples in families
        if samples
    )
