"""dcgm-exporter's counters CSV: which fields to serve, with which type and help text.

The CSV is the user's contract with dcgm-exporter (`-f`, the Helm chart's ConfigMap), so it
is read the way dcgm-exporter reads it with Go's encoding/csv (Comment '#', cells trimmed):
one `field, type, help` record per line, `#` lines and blank lines skipped, a help text that
contains a comma quoted. The type is exact and case-sensitive, as in dcgm-exporter, which
also admits `histogram` and `summary` (declared as such over the field's one sample).

Pure: parses text the caller read and resolves names against a catalog the caller passes.
It never reads files and never logs; recoverable problems come back as warning strings.
A malformed row is never skipped silently: it raises `CountersError` naming the line.
"""

import csv
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from gpufleet.exporter.core.fields import FieldSpec, MetricType

_TYPES = {t.value: t for t in MetricType}


class CountersError(ValueError):
    """A counters CSV row that cannot be used; the message is `<source>:<line>: <why>: <row>`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CounterRow:
    """One record of a counters CSV, cells trimmed."""

    line: int  # 1-based line number in the source
    field: str  # DCGM field name as written (legacy or 4.9 spelling)
    type: MetricType
    help: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SelectedField:
    """A CSV row resolved to a catalog field. The row's type and help win over the
    catalog's: the CSV is what the user asked for, as in dcgm-exporter."""

    spec: FieldSpec
    type: MetricType
    help: str
    line: int
    csv_name: str  # as spelled in the CSV; the served name follows the profile instead


@dataclass(frozen=True, slots=True, kw_only=True)
class Selection:
    """The fields to serve, in CSV order (which is the family order of the exposition)."""

    source: str
    fields: tuple[SelectedField, ...]

    @property
    def metrics(self) -> tuple[SelectedField, ...]:
        """Rows served as metric families (gauge, counter)."""
        return tuple(f for f in self.fields if f.type is not MetricType.LABEL)

    @property
    def labels(self) -> tuple[SelectedField, ...]:
        """Rows served as a label on every series (type `label`)."""
        return tuple(f for f in self.fields if f.type is MetricType.LABEL)


def parse_counters(text: str, *, source: str) -> tuple[CounterRow, ...]:
    """Parse a counters CSV.

    Args:
        text: the whole file, decoded.
        source: where it came from (a path, "ConfigMap ns/name"), used in error messages.

    Raises:
        CountersError: on the first malformed row (wrong number of cells, empty field
            name, unknown type, broken quoting), naming source, line and the line's text.
    """
    rows = []
    # Split on "\n" only (as Go's reader does), so line numbers match what editors show.
    for number, raw in enumerate(text.removeprefix("\ufeff").split("\n"), start=1):
        line = raw.rstrip()
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        rows.append(_parse_row(line, number=number, source=source))
    return tuple(rows)


def _parse_row(line: str, *, number: int, source: str) -> CounterRow:
    def fail(why: str) -> CountersError:
        return CountersError(f"{source}:{number}: {why}: {line}")

    try:
        # One record per line: a quoted help may hold commas but not newlines.
        cells = next(csv.reader([line], skipinitialspace=True, strict=True))
    except csv.Error as exc:
        raise fail(f"malformed CSV ({exc})") from None
    cells = [cell.strip() for cell in cells]
    if len(cells) != 3:
        raise fail(f"expected 3 cells (field, type, help), found {len(cells)}")
    field, type_name, help_text = cells
    if not field:
        raise fail("empty field name")
    metric_type = _TYPES.get(type_name)
    if metric_type is None:
        raise fail(f"unknown metric type {type_name!r} (expected {', '.join(_TYPES)})")
    return CounterRow(line=number, field=field, type=metric_type, help=help_text)


def select_fields(
    rows: Iterable[CounterRow], catalog: Mapping[str, FieldSpec], *, source: str
) -> tuple[Selection, tuple[str, ...]]:
    """Resolve CSV rows against the field catalog.

    Both the legacy (<= 4.8) and the 4.9 spelling of a field are accepted, so a 4.9 CSV
    works; which names and units are served is the profile's business, not the CSV's.
    dcgm-exporter 1.x's lowercase names (`dcgm_sm_clock`) are accepted too and, as in
    dcgm-exporter, served under that very name and unit (`FieldSpec.served_v1`).
    Partial by design: an unknown field or a repeated field (in either spelling) skips that
    row with a warning naming source and line; every other row is kept, in CSV order.

    Returns:
        The selection and the warnings, for the caller to log.
    """
    by_v49 = {spec.name_v49: spec for spec in catalog.values() if spec.name_v49}
    by_v1 = {
        spec.name_v1: replace(spec, served_v1=True) for spec in catalog.values() if spec.name_v1
    }
    chosen: dict[str, SelectedField] = {}
    warnings = []
    for row in rows:
        spec = catalog.get(row.field) or by_v49.get(row.field) or by_v1.get(row.field)
        if spec is None:
            warnings.append(
                f"{source}:{row.line}: unknown field {row.field!r} (not in gpufleet's field "
                f"catalog); row skipped"
            )
            continue
        first = chosen.get(spec.name)
        if first is not None:
            warnings.append(
                f"{source}:{row.line}: {row.field} repeats line {first.line} "
                f"({first.csv_name}); row skipped"
            )
            continue
        chosen[spec.name] = SelectedField(
            spec=spec, type=row.type, help=row.help, line=row.line, csv_name=row.field
        )
    return Selection(source=source, fields=tuple(chosen.values())), tuple(warnings)
