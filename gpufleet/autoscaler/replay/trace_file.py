"""Reading request traces: the Azure LLM inference CSV format into a `core.trace.Trace`.

The only module of the replay that reads files. Bad input raises `TraceError` naming the
file and line; nothing is skipped silently, because a silently shortened trace would
flatter every policy alike and hide it.
"""

import csv
from pathlib import Path

import numpy as np

from gpufleet.autoscaler.replay.core.trace import (
    Trace,
    scale_trace,
    trace_from_arrays,
)

_COLUMNS = ("timestamp", "contexttokens", "generatedtokens")
# "2023-11-16 18:17:03.9799600" has 7 fractional digits; numpy parses at most 6 (us).
_TIMESTAMP_CHARS = 26
# Longer than any model's context window (10M tokens at most today): a count above it is a
# typo, and replaying it would size the simulator's arrays by it.
MAX_TOKENS = 10_000_000


class TraceError(ValueError):
    """A trace file that cannot be used; the message names the file and line."""


def load_trace(path: str | Path, *, scale: int = 1, seed: int = 0) -> Trace:
    """Read an Azure-format CSV (TIMESTAMP,ContextTokens,GeneratedTokens) into a `Trace`.

    Columns are found by header name (case-insensitive, any order, extra columns ignored).
    Unsorted timestamps are sorted stably. `scale=K` superimposes K copies to model a fleet
    K times the sampled one: copy 0 is the trace itself, each other copy shifts every request
    by its own uniform jitter in [0, SCALE_JITTER_SECONDS) drawn from `seed` (see
    `core.trace.scale_trace`), so the copies do not arrive in lockstep while bursts keep
    their shape and timing. The name is the file stem, with `-x{K}` appended when scaled.

    Raises TraceError naming the file and line for: an empty file, a missing column, a bad
    timestamp, a token count that is negative, over MAX_TOKENS or not an integer.
    """
    if scale < 1:
        raise ValueError(f"scale must be >= 1, got {scale}")
    path = Path(path)
    stamps, prompts, outputs = _read_rows(path)
    seconds = _parse_timestamps(path, stamps)
    name = path.stem if scale == 1 else f"{path.stem}-x{scale}"
    base = trace_from_arrays(seconds, prompts, outputs, name=name)
    return scale_trace(base, scale=scale, seed=seed) if scale > 1 else base


def _read_rows(path: Path) -> tuple["_Stamps", np.ndarray, np.ndarray]:
    try:  # utf-8-sig: a byte-order mark (Excel's CSV export) is not part of the header
        with path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            try:
                rows = list(reader)
            except csv.Error as e:  # a field over csv's limit: not a trace (a JSON file?)
                raise TraceError(f"{path}:{reader.line_num}: not a CSV trace: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(f"{path}: cannot read: {e}") from e
    if not rows or not any(c.strip() for c in rows[0]):
        raise TraceError(f"{path}:1: empty file, expected header {','.join(_COLUMNS)}")
    header = [c.strip().lower() for c in rows[0]]
    missing = [c for c in _COLUMNS if c not in header]
    if missing:
        raise TraceError(f"{path}:1: missing column(s) {', '.join(missing)} in header {rows[0]}")
    cols = [header.index(c) for c in _COLUMNS]
    width = max(cols) + 1
    body = [(n, r) for n, r in enumerate(rows[1:], start=2) if r and any(c.strip() for c in r)]
    if not body:
        raise TraceError(f"{path}:2: no requests after the header")
    stamps: list[str] = []
    prompts = np.empty(len(body), dtype=np.int64)
    outputs = np.empty(len(body), dtype=np.int64)
    for i, (line, row) in enumerate(body):
        if len(row) < width:
            raise TraceError(f"{path}:{line}: expected {width} columns, got {len(row)}")
        stamps.append(row[cols[0]].strip())
        prompts[i] = _tokens(path, line, row[cols[1]], "ContextTokens")
        outputs[i] = _tokens(path, line, row[cols[2]], "GeneratedTokens")
    lines = [line for line, _ in body]
    return _Stamps(stamps, lines), prompts, outputs


class _Stamps(list):
    """Timestamp strings that remember their file line numbers, for error messages."""

    def __init__(self, stamps: list[str], lines: list[int]) -> None:
        super().__init__(stamps)
        self.lines = lines


def _tokens(path: Path, line: int, text: str, column: str) -> int:
    text = text.strip()
    try:
        value = int(text)
    except ValueError:
        raise TraceError(f"{path}:{line}: {column} {text!r} is not an integer") from None
    if value < 0:
        raise TraceError(f"{path}:{line}: {column} {value} is negative")
    if value > MAX_TOKENS:
        raise TraceError(f"{path}:{line}: {column} {value} is over {MAX_TOKENS:,} tokens")
    return value


def _parse_timestamps(path: Path, stamps: "_Stamps") -> np.ndarray:
    """Seconds since the first row's timestamp; the fast path parses all rows at once.
    Each must be a date and time: numpy reads a bare number as a year, so seconds (0, 1,
    2) or an epoch (1700000000) became centuries, and a replay that never ended."""
    try:
        dated = all(_dated(s) for s in stamps)
        parsed = np.array([s[:_TIMESTAMP_CHARS] for s in stamps], dtype="datetime64[us]")
    except ValueError:
        parsed = None
    if parsed is None or not dated or np.isnat(parsed).any():
        # Slow path only to find the first bad row for the message.
        for line, s in zip(stamps.lines, stamps, strict=True):
            try:
                bad = not _dated(s) or np.isnat(np.datetime64(s[:_TIMESTAMP_CHARS], "us"))
            except ValueError:
                bad = True
            if bad:
                raise TraceError(
                    f"{path}:{line}: bad timestamp {s!r} (expected a date and time, e.g. "
                    f"2023-11-16 18:17:03.97)"
                )
    micros = (parsed - parsed.min()).astype(np.int64)
    return micros.astype(np.float64) / 1e6


def _dated(stamp: str) -> bool:
    """Whether `stamp` starts with a year and a dash (YYYY-), as a date does."""
    return stamp[4:5] == "-"
