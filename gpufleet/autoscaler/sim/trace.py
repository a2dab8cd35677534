"""Request traces: reading the Azure LLM inference CSV format into arrays.

The only module of the simulator that touches files. A trace is three aligned arrays
(arrival second, prompt tokens, output tokens) in arrival order, the clock starting at the
first request. Bad input raises `TraceError` naming the file and line; nothing is skipped
silently, because a silently shortened trace would flatter every policy alike and hide it.
"""

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_COLUMNS = ("timestamp", "contexttokens", "generatedtokens")
# "2023-11-16 18:17:03.9799600" has 7 fractional digits; numpy parses at most 6 (us).
_TIMESTAMP_CHARS = 26
# Copies of a scaled trace are shifted by up to this much so they do not arrive in lockstep
# while each copy keeps the original burst structure (bursts last far longer than 2 s).
SCALE_JITTER_SECONDS = 2.0


class TraceError(ValueError):
    """A trace file that cannot be used; the message names the file and line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Trace:
    """Requests in arrival order; `arrival_seconds` starts at 0.0 and never decreases."""

    name: str
    arrival_seconds: np.ndarray  # float64
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64

    @property
    def duration_seconds(self) -> float:
        """Seconds from the first arrival to the last (0.0 for one or no request)."""
        return float(self.arrival_seconds[-1]) if len(self.arrival_seconds) else 0.0

    def __len__(self) -> int:
        return len(self.arrival_seconds)


def trace_from_arrays(
    arrival_seconds: Sequence[float] | np.ndarray,
    prompt_tokens: Sequence[int] | np.ndarray,
    output_tokens: Sequence[int] | np.ndarray,
    *,
    name: str = "synthetic",
) -> Trace:
    """Build a trace from plain sequences: sorted (stably) and shifted to start at 0.0.

    Raises ValueError on mismatched lengths or negative token counts.
    """
    arrivals = np.asarray(arrival_seconds, dtype=np.float64)
    prompts = np.asarray(prompt_tokens, dtype=np.int64)
    outputs = np.asarray(output_tokens, dtype=np.int64)
    if not (arrivals.shape == prompts.shape == outputs.shape) or arrivals.ndim != 1:
        raise ValueError("arrival_seconds, prompt_tokens and output_tokens must be aligned 1-D")
    if (prompts < 0).any() or (outputs < 0).any():
        raise ValueError("token counts must be >= 0")
    if not np.isfinite(arrivals).all():
        raise ValueError("arrival_seconds must be finite")
    order = np.argsort(arrivals, kind="stable")
    arrivals = arrivals[order]
    if len(arrivals):
        arrivals = arrivals - arrivals[0]
    return Trace(
        name=name,
        arrival_seconds=arrivals,
        prompt_tokens=prompts[order],
        output_tokens=outputs[order],
    )


def load_trace(path: str | Path, *, scale: int = 1, seed: int = 0) -> Trace:
    """Read an Azure-format CSV (TIMESTAMP,ContextTokens,GeneratedTokens) into a `Trace`.

    Columns are found by header name (case-insensitive, any order, extra columns ignored).
    Unsorted timestamps are sorted stably. `scale=K` superimposes K copies to model a fleet
    K times the sampled one: copy 0 is the trace itself, each other copy shifts every request
    by its own uniform jitter in [0, SCALE_JITTER_SECONDS) drawn from `seed`, so the copies do
    not arrive in lockstep while bursts keep their shape and timing. The name is the file
    stem, with `-x{K}` appended when scaled.

    Raises TraceError naming the file and line for: an empty file, a missing column, a bad
    timestamp, a token count that is negative or not an integer.
    """
    if scale < 1:
        raise ValueError(f"scale must be >= 1, got {scale}")
    path = Path(path)
    stamps, prompts, outputs = _read_rows(path)
    seconds = _parse_timestamps(path, stamps)
    name = path.stem if scale == 1 else f"{path.stem}-x{scale}"
    base = trace_from_arrays(seconds, prompts, outputs, name=name)
    return scale_trace(base, scale=scale, seed=seed) if scale > 1 else base


def scale_trace(trace: Trace, *, scale: int, seed: int = 0) -> Trace:
    """Superimpose `scale` jittered copies of `trace` (see `load_trace`); keeps the name."""
    rng = np.random.default_rng(seed)
    n = len(trace)
    jitter = rng.uniform(0.0, SCALE_JITTER_SECONDS, size=(scale - 1) * n)
    arrivals = np.concatenate(
        [trace.arrival_seconds, np.tile(trace.arrival_seconds, scale - 1) + jitter]
    )
    prompts = np.tile(trace.prompt_tokens, scale)
    outputs = np.tile(trace.output_tokens, scale)
    return trace_from_arrays(arrivals, prompts, outputs, name=trace.name)


def _read_rows(path: Path) -> tuple["_Stamps", np.ndarray, np.ndarray]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
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
    return value


def _parse_timestamps(path: Path, stamps: "_Stamps") -> np.ndarray:
    """Seconds since the first row's timestamp; the fast path parses all rows at once."""
    try:
        parsed = np.array([s[:_TIMESTAMP_CHARS] for s in stamps], dtype="datetime64[us]")
    except ValueError:
        parsed = None
    if parsed is None or np.isnat(parsed).any():
        # Slow path only to find the first bad row for the message.
        for line, s in zip(stamps.lines, stamps, strict=True):
            try:
                bad = np.isnat(np.datetime64(s[:_TIMESTAMP_CHARS], "us"))
            except ValueError:
                bad = True
            if bad:
                raise TraceError(f"{path}:{line}: bad timestamp {s!r}")
    micros = (parsed - parsed.min()).astype(np.int64)
    return micros.astype(np.float64) / 1e6
