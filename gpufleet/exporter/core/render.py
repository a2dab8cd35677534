"""Exposition rendering: metric families -> the bytes a scrape serves.

Runs once per collection, never per scrape; the result is published as an `Exposition`
holding every encoding served (Prometheus text 0.0.4, OpenMetrics 1.0.0 when enabled, each
also gzipped: text only while scrapers ask for it, see `http.store`), so a scrape only
picks bytes. Label values and help texts are escaped here
(dcgm-exporter's template does not escape, which corrupts the exposition on a quote in a
model name).

OpenMetrics would rename a counter that lacks `_total` (and dcgm-exporter's counters lack
it), silently breaking every query; such counters are declared `unknown` instead, so
sample names stay byte-identical in both formats. Prometheus then stores them as unknown,
not counters, which is why OpenMetrics is opt-in (`--openmetrics`), as dcgm-exporter only
ever serves text.

Pure: no I/O, no clock, no logging; the collection times are passed in.
"""

import math
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.exporter.core.fields import MetricType
from gpufleet.exporter.core.series import Labels, MetricFamily

# Measured on a 1.9 MB exposition (8 GPUs x 7 MIG slices x 4 pods, 5,600 series): level 1
# gives 53 KB in 2.5 ms, level 4 43 KB in 6.5 ms, level 6 (zlib's default) 42 KB in 10 ms,
# level 9 39 KB in 24 ms. What is served gzipped is compressed on every collection, which runs
# more often than Prometheus scrapes (5 s vs 15-30 s), so CPU is paid more often than bytes
# are sent; level 1 already compresses 35x and the ~10 KB a scrape it leaves is noise.
GZIP_LEVEL = 1
_INT64 = 2**63


@dataclass(frozen=True, slots=True, kw_only=True)
class Exposition:
    """One rendered snapshot, in every encoding a scrape may ask for."""

    text: bytes  # Prometheus text format 0.0.4
    text_gzip: bytes | None  # None: no client asked for it lately (see http.store)
    openmetrics: bytes | None  # OpenMetrics 1.0.0, ends with "# EOF"; None: not served
    openmetrics_gzip: bytes | None
    collected_at: float  # wall-clock seconds of the collection
    collected_monotonic: float  # monotonic seconds of the collection, for staleness


def render(
    families: Iterable[MetricFamily],
    *,
    collected_at: float,
    collected_monotonic: float,
    text_gzip: bool = True,
    openmetrics: bool = True,
) -> Exposition:
    """Render one collection: text, gzipped when asked; OpenMetrics (always gzipped too)
    when served. Gzip output uses mtime 0, so equal families give equal bytes."""
    bodies = _bodies(families)
    text = _assemble_text(bodies)
    om = _assemble_openmetrics(bodies) if openmetrics else None
    return Exposition(
        text=text,
        text_gzip=_gzip(text) if text_gzip else None,
        openmetrics=om,
        openmetrics_gzip=_gzip(om) if om is not None else None,
        collected_at=collected_at,
        collected_monotonic=collected_monotonic,
    )


def _gzip(data: bytes) -> bytes:
    # The gzip container straight from zlib (wbits 31, mtime 0): the same bytes as
    # gzip.compress(data, mtime=0) without holding the gzip module (issue 15).
    return zlib.compress(data, level=GZIP_LEVEL, wbits=31)


def render_text(families: Iterable[MetricFamily]) -> bytes:
    """Prometheus text format 0.0.4."""
    return _assemble_text(_bodies(families))


def render_openmetrics(families: Iterable[MetricFamily]) -> bytes:
    """OpenMetrics 1.0.0 text, ending with `# EOF`."""
    return _assemble_openmetrics(_bodies(families))


def format_value(value: float) -> str:
    """Integral values as integers (`79`), others as the shortest round-trip float;
    NaN and infinities in the exposition spelling."""
    if type(value) is int:  # the common case: NVML readings are integers
        return str(value)
    if isinstance(value, int):
        return str(int(value))  # a bool becomes 0/1
    if value.is_integer() and -_INT64 < value < _INT64:
        return str(int(value))
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def escape_label_value(value: str) -> str:
    """Escape `\\`, `"` and newline, the three characters both formats reserve."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def _escape_help_text(help_text: str) -> str:
    return help_text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_help_openmetrics(help_text: str) -> str:
    return escape_label_value(help_text)  # OpenMetrics also reserves `"` in HELP


# A family's samples are rendered once and shared by both formats: sample lines are
# identical in text 0.0.4 and OpenMetrics; only the HELP/TYPE lines and `# EOF` differ.
_Body = tuple[MetricFamily, bytes]


def _bodies(families: Iterable[MetricFamily]) -> list[_Body]:
    # Series builders reuse one labels tuple per entity/pod across families, so render
    # each distinct tuple once. Keyed by identity; the entry keeps the tuple alive so an
    # id cannot be reused by another tuple while this cache exists.
    rendered: dict[int, tuple[Labels, str]] = {}
    bodies = []
    for family in families:
        if family.type is MetricType.LABEL:
            continue
        name = family.name
        lines = []
        for sample in family.samples:
            labels = sample.labels
            entry = rendered.get(id(labels))
            if entry is None:
                entry = rendered[id(labels)] = (labels, _render_labels(labels))
            lines.append(f"{name}{entry[1]} {format_value(sample.value)}\n")
        bodies.append((family, "".join(lines).encode()))
    return bodies


def _render_labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels) + "}"


def _assemble_text(bodies: list[_Body]) -> bytes:
    parts = []
    for family, body in bodies:
        name = family.name
        help_text = _escape_help_text(family.help)
        parts.append(f"# HELP {name} {help_text}\n# TYPE {name} {family.type.value}\n".encode())
        parts.append(body)
    return b"".join(parts)


def _assemble_openmetrics(bodies: list[_Body]) -> bytes:
    parts = []
    for family, body in bodies:
        name, type_name = _openmetrics_family(family)
        help_text = _escape_help_openmetrics(family.help)
        parts.append(f"# HELP {name} {help_text}\n# TYPE {name} {type_name}\n".encode())
        parts.append(body)
    parts.append(b"# EOF\n")
    return b"".join(parts)


def _openmetrics_family(family: MetricFamily) -> tuple[str, str]:
    """(family name, type) as OpenMetrics declares them. A CSV's histogram or summary row is
    one plain sample, which OpenMetrics only admits as `unknown`."""
    if family.type is MetricType.GAUGE:
        return family.name, "gauge"
    if family.type is MetricType.COUNTER and family.name.endswith("_total"):
        return family.name.removesuffix("_total"), "counter"
    return family.name, "unknown"
