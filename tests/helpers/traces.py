"""A small synthetic request trace in the Azure LLM format, for the replay and its benches."""

from pathlib import Path

import numpy as np


def write_trace(path: Path, *, minutes: int = 6, seed: int = 1) -> Path:
    """An Azure-format CSV: ~1 request/s, then ~30/s in minute 2 (one replica is not enough)."""
    rng = np.random.default_rng(seed)
    rate = np.ones(minutes * 60)
    rate[120:180] = 30.0
    arrivals = np.sort(np.concatenate([s + rng.random(rng.poisson(r)) for s, r in enumerate(rate)]))
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for t in arrivals:
        minute, second = divmod(float(t), 60)
        lines.append(
            f"2023-11-16 18:{int(minute):02d}:{second:010.7f},"
            f"{rng.integers(200, 2000)},{rng.integers(10, 200)}"
        )
    path.write_text("\n".join(lines) + "\n")
    return path
