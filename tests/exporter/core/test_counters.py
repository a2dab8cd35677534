"""Counters CSV: dcgm-exporter's format, errors naming the line, selection against the catalog."""

from pathlib import Path

import pytest
from helpers import REPO, TEST_DATA
from helpers.fields import DRIVER, GPU_TEMP, SM_CLOCK

from gpufleet.exporter.core.counters import (
    CounterRow,
    CountersError,
    parse_counters,
    select_fields,
)
from gpufleet.exporter.core.fields import CATALOG, MetricType
from gpufleet.exporter.core.profiles import Profile, served_name, unit_scale

DCGM_USER_CSV = TEST_DATA / "dcgm-default-counters.csv"
SHIPPED_CSV = REPO / "gpufleet/exporter/default-counters.csv"

G, C, L = MetricType.GAUGE, MetricType.COUNTER, MetricType.LABEL
TYPES = "gauge, counter, histogram, summary, label"

SMALL_CATALOG = {spec.name: spec for spec in (SM_CLOCK, GPU_TEMP, DRIVER)}


def _row(line: int, field: str, type_: MetricType, help_: str) -> CounterRow:
    return CounterRow(line=line, field=field, type=type_, help=help_)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("A, gauge, Help text.", [_row(1, "A", G, "Help text.")]),
        ("A,gauge,Help", [_row(1, "A", G, "Help")]),
        ("  A  ,   counter ,  Help   ", [_row(1, "A", C, "Help")]),
        ("A ,     gauge, Decoder (in %).", [_row(1, "A", G, "Decoder (in %).")]),
        ("A, label, Driver Version", [_row(1, "A", L, "Driver Version")]),
        # dcgm-exporter's promMetricType admits both (issue 15).
        ("A, histogram, h", [_row(1, "A", MetricType.HISTOGRAM, "h")]),
        ("A, summary, h", [_row(1, "A", MetricType.SUMMARY, "h")]),
        ('A, gauge, "Help, with a comma"', [_row(1, "A", G, "Help, with a comma")]),
        ('A, gauge,"quoted"  ', [_row(1, "A", G, "quoted")]),
        ("A, gauge,", [_row(1, "A", G, "")]),
        ("# comment\n\nA, gauge, h\n", [_row(3, "A", G, "h")]),
        ("   # indented comment\nA, gauge, h", [_row(2, "A", G, "h")]),
        ("#A, gauge, h\n# B, gauge, h", []),
        ("A, gauge, h # not a comment", [_row(1, "A", G, "h # not a comment")]),
        ("A, gauge, h\r\nB, counter, i\r\n", [_row(1, "A", G, "h"), _row(2, "B", C, "i")]),
        ("\ufeffA, gauge, h", [_row(1, "A", G, "h")]),
        ("\n  \t\nA, gauge, h", [_row(3, "A", G, "h")]),
        ("", []),
    ],
    ids=[
        "dcgm-spacing",
        "no-spaces",
        "cells-trimmed",
        "blank-before-comma",
        "label-row",
        "histogram-row",
        "summary-row",
        "quoted-help-with-comma",
        "quoted-help-trailing-blanks",
        "empty-help-allowed",
        "comment-and-blank-lines-keep-line-numbers",
        "indented-comment",
        "commented-out-rows",
        "hash-inside-help-is-text",
        "crlf-line-endings",
        "utf8-bom",
        "whitespace-only-line",
        "empty-file",
    ],
)
def test_parse_counters(text: str, expected: list[CounterRow]) -> None:
    assert parse_counters(text, source="c.csv") == tuple(expected)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "A, gauge, ok\nB, gauge",
            "c.csv:2: expected 3 cells (field, type, help), found 2: B, gauge",
        ),
        (
            "# x\n\nB, gauge, help,",
            "c.csv:3: expected 3 cells (field, type, help), found 4: B, gauge, help,",
        ),
        (
            "A, gauge, Help, with a comma",
            "c.csv:1: expected 3 cells (field, type, help), found 4: A, gauge, Help, with a comma",
        ),
        ("B", "c.csv:1: expected 3 cells (field, type, help), found 1: B"),
        (" , gauge, help", "c.csv:1: empty field name:  , gauge, help"),
        (
            "A, gauge, ok\nB, gage, help",
            f"c.csv:2: unknown metric type 'gage' (expected {TYPES}): B, gage, help",
        ),
        (
            "B, Gauge, help",
            f"c.csv:1: unknown metric type 'Gauge' (expected {TYPES}): B, Gauge, help",
        ),
        (
            "B, , help",
            f"c.csv:1: unknown metric type '' (expected {TYPES}): B, , help",
        ),
        (
            'B, gauge, "unterminated',
            'c.csv:1: malformed CSV (unexpected end of data): B, gauge, "unterminated',
        ),
        (
            'B, gauge, "quoted" tail',
            "c.csv:1: malformed CSV (',' expected after '\"'): B, gauge, \"quoted\" tail",
        ),
    ],
    ids=[
        "too-few-cells",
        "trailing-comma",
        "unquoted-comma-in-help",
        "field-only",
        "empty-field-name",
        "misspelt-type",
        "type-is-case-sensitive",
        "empty-type",
        "unterminated-quote",
        "text-after-closing-quote",
    ],
)
def test_parse_errors_name_source_line_and_text(text: str, message: str) -> None:
    with pytest.raises(CountersError) as raised:
        parse_counters(text, source="c.csv")
    assert str(raised.value) == message


def test_selection_keeps_csv_order_and_splits_labels() -> None:
    rows = parse_counters(
        "DCGM_FI_DRIVER_VERSION, label, Driver Version\n"
        "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
        "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency (in MHz).\n",
        source="c.csv",
    )
    selection, warnings = select_fields(rows, SMALL_CATALOG, source="c.csv")
    assert warnings == ()
    assert [f.spec for f in selection.fields] == [DRIVER, GPU_TEMP, SM_CLOCK]
    assert [f.spec for f in selection.metrics] == [GPU_TEMP, SM_CLOCK]
    assert [f.spec for f in selection.labels] == [DRIVER]
    assert [f.line for f in selection.fields] == [1, 2, 3]
    assert selection.source == "c.csv"


def test_row_type_and_help_override_the_catalog() -> None:
    rows = parse_counters("DCGM_FI_DEV_SM_CLOCK, counter, My own help", source="c.csv")
    selection, _ = select_fields(rows, SMALL_CATALOG, source="c.csv")
    (selected,) = selection.fields
    assert (selected.spec, selected.type, selected.help) == (SM_CLOCK, C, "My own help")


def test_unknown_field_is_skipped_with_a_warning_naming_the_line() -> None:
    rows = parse_counters(
        "# header\nDCGM_FI_DEV_SM_CLOCK, gauge, h\nDCGM_FI_DEV_NOT_A_FIELD, gauge, h\n",
        source="/etc/dcgm-exporter/x.csv",
    )
    selection, warnings = select_fields(rows, SMALL_CATALOG, source="/etc/dcgm-exporter/x.csv")
    assert [f.spec for f in selection.fields] == [SM_CLOCK]
    assert warnings == (
        "/etc/dcgm-exporter/x.csv:3: unknown field 'DCGM_FI_DEV_NOT_A_FIELD' (not in "
        "gpufleet's field catalog); row skipped",
    )


@pytest.mark.parametrize(
    ("text", "warning"),
    [
        (
            "DCGM_FI_DEV_GPU_TEMP, gauge, a\nDCGM_FI_DEV_GPU_TEMP, counter, b",
            "c.csv:2: DCGM_FI_DEV_GPU_TEMP repeats line 1 (DCGM_FI_DEV_GPU_TEMP); row skipped",
        ),
        (
            "DCGM_FI_DEV_GPU_TEMP, gauge, a\n\nDCGM_FI_DEV_GPU_TEMP_CELSIUS, gauge, b",
            "c.csv:3: DCGM_FI_DEV_GPU_TEMP_CELSIUS repeats line 1 (DCGM_FI_DEV_GPU_TEMP); "
            "row skipped",
        ),
    ],
    ids=["same-spelling", "legacy-then-4.9-spelling"],
)
def test_duplicate_keeps_the_first_row(text: str, warning: str) -> None:
    selection, warnings = select_fields(
        parse_counters(text, source="c.csv"), SMALL_CATALOG, source="c.csv"
    )
    assert [(f.line, f.help) for f in selection.fields] == [(1, "a")]
    assert warnings == (warning,)


def test_v49_names_resolve_to_the_same_fields() -> None:
    rows = parse_counters(
        "DCGM_FI_DEV_GPU_TEMP_CELSIUS, gauge, GPU temperature (in C).\n"
        "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency (in Hz).\n"
        "DCGM_FI_SYSTEM_DRIVER_VERSION, label, Driver Version\n",
        source="c.csv",
    )
    selection, warnings = select_fields(rows, SMALL_CATALOG, source="c.csv")
    assert warnings == ()
    assert [(f.spec, f.csv_name) for f in selection.fields] == [
        (GPU_TEMP, "DCGM_FI_DEV_GPU_TEMP_CELSIUS"),
        (SM_CLOCK, "DCGM_FI_DEV_SM_CLOCK"),
        (DRIVER, "DCGM_FI_SYSTEM_DRIVER_VERSION"),
    ]


# --- the real catalog and the real files -------------------------------------------------

DEFAULT_FIELDS = [spec.name for spec in CATALOG.values() if spec.default]


def test_catalog_default_set_is_dcgm_exporters() -> None:
    # 25 metrics plus the driver-version label, dcgm-exporter 4.x (<= 4.8).
    assert len(DEFAULT_FIELDS) == 26
    assert [CATALOG[n].type for n in DEFAULT_FIELDS].count(L) == 1


@pytest.mark.parametrize("path", [DCGM_USER_CSV, SHIPPED_CSV], ids=["dcgm-user-file", "shipped"])
def test_default_files_select_every_default_field(path: Path) -> None:
    rows = parse_counters(path.read_text(), source=str(path))
    selection, warnings = select_fields(rows, CATALOG, source=str(path))
    assert warnings == ()
    assert [f.spec.name for f in selection.fields] == DEFAULT_FIELDS
    for selected in selection.fields:
        assert (selected.type, selected.help) == (selected.spec.type, selected.spec.help)


def test_shipped_optional_rows_work_when_uncommented() -> None:
    # Uncommenting an optional row must never meet an "unknown field" warning.
    lines = SHIPPED_CSV.read_text().splitlines()
    optional = [line.removeprefix("# ") for line in lines if line.startswith("# DCGM_")]
    selection, warnings = select_fields(
        parse_counters("\n".join(optional), source="x"), CATALOG, source="x"
    )
    assert warnings == ()
    assert len(selection.fields) == len(optional)
    for selected in selection.fields:
        assert not selected.spec.default
        assert (selected.type, selected.help) == (selected.spec.type, selected.spec.help)


def test_full_v49_csv_selects_the_same_fields() -> None:
    v49_text = "\n".join(
        f"{spec.name_v49 or spec.name}, {spec.type.value}, {spec.help_v49 or spec.help}"
        for spec in CATALOG.values()
        if spec.default
    )
    selection, warnings = select_fields(
        parse_counters(v49_text, source="v49.csv"), CATALOG, source="v49.csv"
    )
    assert warnings == ()
    assert [f.spec.name for f in selection.fields] == DEFAULT_FIELDS


def test_v1_lowercase_names_resolve_and_keep_their_spelling() -> None:
    # dcgm-exporter 1.x names (go-dcgm's legacy_fields.csv); issue 15.
    rows = parse_counters(
        "dcgm_sm_clock, gauge, SM clock frequency (in MHz).\n"
        "dcgm_gpu_utilization, gauge, GPU utilization (in %).\n"
        "DCGM_FI_DEV_SM_CLOCK, gauge, again\n",
        source="c.csv",
    )
    selection, warnings = select_fields(rows, CATALOG, source="c.csv")
    assert warnings == (
        "c.csv:3: DCGM_FI_DEV_SM_CLOCK repeats line 1 (dcgm_sm_clock); row skipped",
    )
    sm, util = (f.spec for f in selection.fields)
    assert (sm.name, sm.name_v1, sm.served_v1) == ("DCGM_FI_DEV_SM_CLOCK", "dcgm_sm_clock", True)
    for profile in Profile:
        assert served_name(util, profile) == "dcgm_gpu_utilization"
        assert unit_scale(util, profile) == 1.0  # the 1.x name keeps its % unit
    assert not CATALOG["DCGM_FI_DEV_SM_CLOCK"].served_v1
    assert served_name(CATALOG["DCGM_FI_DEV_GPU_UTIL"], Profile.V49) == "DCGM_FI_DEV_GPU_UTIL_RATIO"
