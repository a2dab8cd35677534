"""Request traces as the replay reads them: three aligned arrays in arrival order.

A trace is the arrival second, prompt tokens and output tokens of each request, the clock
starting at the first request. Pure: `replay.trace_file` reads CSVs into it.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Copies of a scaled trace are shifted by up to this much so they do not arrive in lockstep
# while each copy keeps the original burst structure (bursts last far longer than 2 s).
SCALE_JITTER_SECONDS = 2.0


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


def scale_trace(trace: Trace, *, scale: int, seed: int = 0) -> Trace:
    """Superimpose `scale` jittered copies of `trace` (see `replay.trace_file.load_trace`).

    The result keeps the trace's name.
    """
    rng = np.random.default_rng(seed)
    n = len(trace)
    jitter = rng.uniform(0.0, SCALE_JITTER_SECONDS, size=(scale - 1) * n)
    arrivals = np.concatenate(
        [trace.arrival_seconds, np.tile(trace.arrival_seconds, scale - 1) + jitter]
    )
    prompts = np.tile(trace.prompt_tokens, scale)
    outputs = np.tile(trace.output_tokens, scale)
    return trace_from_arrays(arrivals, prompts, outputs, name=trace.name)
