"""Smoke test of the simulator benchmark: a tiny trace runs through and the report comes out.

Measured, not asserted: no time is checked, only that every policy's row and the JSON are
written.
"""

import json
import subprocess
import sys
from pathlib import Path

from test_simulate_cli import write_trace

REPO = Path(__file__).resolve().parents[2]


def test_bench_prints_a_row_per_policy(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "tiny.csv", minutes=3)
    results = tmp_path / "bench.json"
    run = subprocess.run(
        [
            *(sys.executable, "-m", "bench.autoscaler_bench", "--trace", str(trace)),
            *("--repeat", "1", "--json", str(results)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("# gpufleet simulator benchmark\n")
    for policy in ("hpa", "keda", "gpufleet", "oracle"):
        assert f"\n| {policy} | " in run.stdout
    timings = json.loads(results.read_text())["timings"]
    assert [t["policy"] for t in timings] == ["hpa", "keda", "gpufleet", "oracle"]


def test_reaction_bench_prints_a_row_per_policy(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "tiny.csv", minutes=3)
    run = subprocess.run(
        [sys.executable, "-m", "bench.reaction_bench", "--trace", str(trace)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    for policy in ("hpa", "keda", "gpufleet"):
        assert f"| tiny | {policy} | " in run.stdout
