"""Trace parsing: the Azure CSV format, errors that name the line, sorting and scaling."""

import tempfile
from pathlib import Path

import numpy as np
import pytest
from helpers import TRACES
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.autoscaler.replay.core.trace import trace_from_arrays
from gpufleet.autoscaler.replay.trace_file import TraceError, load_trace

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_reads_azure_format_with_seven_fractional_digits(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HEADER
        + "2023-11-16 18:17:03.9799600,4808,10\n"
        + "2023-11-16 18:17:04.0319600,3180,8\n"
        + "2023-11-16 18:17:05,110,27\n",
    )
    trace = load_trace(path)
    assert trace.name == "t"
    np.testing.assert_allclose(trace.arrival_seconds, [0.0, 0.052, 1.02004])
    assert trace.prompt_tokens.tolist() == [4808, 3180, 110]
    assert trace.output_tokens.tolist() == [10, 8, 27]
    assert trace.arrival_seconds.dtype == np.float64
    assert trace.prompt_tokens.dtype == np.int64
    assert trace.duration_seconds == pytest.approx(1.02004)


def test_columns_found_by_name_in_any_order(tmp_path: Path) -> None:
    path = write(
        tmp_path, "GeneratedTokens,extra,timestamp,contexttokens\n5,x,2023-11-16 00:00:00,7\n"
    )
    trace = load_trace(path)
    assert (trace.prompt_tokens.tolist(), trace.output_tokens.tolist()) == ([7], [5])


def test_unsorted_rows_are_sorted_stably(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HEADER
        + "2023-11-16 00:00:02,1,1\n"
        + "2023-11-16 00:00:01,2,2\n"
        + "2023-11-16 00:00:02,3,3\n",
    )
    trace = load_trace(path)
    assert trace.arrival_seconds.tolist() == [0.0, 1.0, 1.0]
    assert trace.prompt_tokens.tolist() == [2, 1, 3]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "t.csv:1: empty file", id="empty-file"),
        pytest.param(HEADER, "t.csv:2: no requests", id="header-only"),
        pytest.param(
            "TIMESTAMP,ContextTokens\n",
            "t.csv:1: missing column(s) generatedtokens",
            id="missing-column",
        ),
        pytest.param(
            HEADER + "2023-11-16 00:00:00,1,1\n2023-11-16 00:00:01,1\n",
            "t.csv:3: expected 3 columns, got 2",
            id="short-row",
        ),
        pytest.param(
            HEADER + "2023-11-16 00:00:00,1,1\nyesterday,1,1\n",
            "t.csv:3: bad timestamp 'yesterday'",
            id="bad-timestamp",
        ),
        pytest.param(
            HEADER + "2023-11-16 00:00:00,1,1\n2023-13-40 00:00:00,1,1\n",
            "t.csv:3: bad timestamp",
            id="impossible-date",
        ),
        pytest.param(
            HEADER + "0,1,1\n1,1,1\n",
            "t.csv:2: bad timestamp '0' (expected a date and time, e.g. 2023-11-16",
            id="seconds-not-a-date",  # numpy read it as the year 0: a replay of centuries
        ),
        pytest.param(
            HEADER + "2023-11-16 00:00:00,1,1\n1700000000,1,1\n",
            "t.csv:3: bad timestamp '1700000000'",
            id="epoch-not-a-date",
        ),
        pytest.param(
            '{"requests": "' + "x" * 200_000 + '"}\n',
            "t.csv:1: not a CSV trace: field larger than field limit",
            id="json-by-mistake",  # a traceback from csv
        ),
        pytest.param(
            HEADER + "2023-11-16 00:00:00,-4,1\n",
            "t.csv:2: ContextTokens -4 is negative",
            id="negative-prompt",
        ),
        pytest.param(
            HEADER + "2023-11-16 00:00:00,99999999999999,5\n",
            "t.csv:2: ContextTokens 99999999999999 is over 10,000,000 tokens",
            id="prompt-over-any-context",
        ),
        pytest.param(
            HEADER + "2023-11-16 00:00:00,4,1.5\n",
            "t.csv:2: GeneratedTokens '1.5' is not an integer",
            id="fractional-output",
        ),
        pytest.param(
            HEADER + "2023-11-16 00:00:00,4,\n",
            "t.csv:2: GeneratedTokens '' is not an integer",
            id="blank-output",
        ),
    ],
)
def test_bad_input_names_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert message in str(err.value)


def test_a_byte_order_mark_is_not_part_of_the_header(tmp_path: Path) -> None:
    """Excel's CSV export starts with one: 'missing column(s) timestamp'."""
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (HEADER + "2023-11-16 00:00:00,7,5\n").encode())
    assert load_trace(path).prompt_tokens.tolist() == [7]


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nope\.csv"):
        load_trace(tmp_path / "nope.csv")


def test_blank_lines_are_skipped_and_line_numbers_stay_true(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + "2023-11-16 00:00:00,1,1\n\n2023-11-16 00:00:01,x,1\n")
    with pytest.raises(TraceError, match=r"t\.csv:4: ContextTokens 'x'"):
        load_trace(path)


def test_scale_superimposes_jittered_copies(tmp_path: Path) -> None:
    rows = "".join(f"2023-11-16 00:{m:02d}:00,{m + 1},{m + 2}\n" for m in range(10))
    path = write(tmp_path, HEADER + rows, name="base.csv")
    base = load_trace(path)
    scaled = load_trace(path, scale=3, seed=7)
    assert scaled.name == "base-x3"
    assert len(scaled) == 3 * len(base)
    assert sorted(scaled.prompt_tokens.tolist()) == sorted(base.prompt_tokens.tolist() * 3)
    assert np.all(np.diff(scaled.arrival_seconds) >= 0)
    # Each copy stays within the jitter of the original arrival: bursts keep their timing.
    offsets = scaled.arrival_seconds - 60.0 * (scaled.prompt_tokens - 1)
    assert offsets.min() == 0.0 and offsets.max() < 2.0
    same = load_trace(path, scale=3, seed=7)
    other = load_trace(path, scale=3, seed=8)
    assert np.array_equal(same.arrival_seconds, scaled.arrival_seconds)
    assert not np.array_equal(other.arrival_seconds, scaled.arrival_seconds)


def test_scale_below_one_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + "2023-11-16 00:00:00,1,1\n")
    with pytest.raises(ValueError, match="scale"):
        load_trace(path, scale=0)


def test_trace_from_arrays_sorts_and_starts_at_zero() -> None:
    trace = trace_from_arrays([5.0, 3.0], [10, 20], [1, 2], name="x")
    assert trace.arrival_seconds.tolist() == [0.0, 2.0]
    assert trace.prompt_tokens.tolist() == [20, 10]
    with pytest.raises(ValueError, match=">= 0"):
        trace_from_arrays([0.0], [-1], [1])


def test_real_conv_trace_loads() -> None:
    path = TRACES / "azure-llm-2023-conv.csv"
    if not path.exists():
        pytest.skip("shared traces not present")
    trace = load_trace(path)
    assert len(trace) == 19_366
    assert 3000 < trace.duration_seconds < 3600


_CELL = st.text("0123456789-:. T,Z+eE", max_size=12) | st.text(max_size=6)
_ROWS = st.lists(st.lists(_CELL, min_size=1, max_size=4).map(",".join), max_size=5)
_HEADERS = st.sampled_from(
    ["TIMESTAMP,ContextTokens,GeneratedTokens", "timestamp,generatedtokens,contexttokens", ""]
)


@given(_HEADERS, _ROWS)
def test_any_csv_is_a_trace_or_one_trace_error(header: str, rows: list[str]) -> None:
    """A user's trace file, whatever it holds: a trace, or TraceError naming the file."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.csv"
        path.write_text("\n".join([header, *rows]))
        try:
            trace = load_trace(path)
        except TraceError as err:
            assert "t.csv" in str(err)
            return
    assert len(trace.arrival_seconds) == len(trace.prompt_tokens) == len(trace.output_tokens)
