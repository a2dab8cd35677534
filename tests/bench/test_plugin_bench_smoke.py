"""Smoke test of the device plugin benchmark: a tiny run completes and prints its report.

Benchmarks are measured, not asserted: no latency is checked here, only that every phase
(Allocate, preferred allocation, health propagation, re-registration) runs end to end
against the real plugin and fake kubelet, with the RPC client in a child process or in
the benchmark's own, and that the report and JSON come out.
"""

import json
from pathlib import Path

import pytest
from helpers.bench import run_bench

HEADINGS = (
    "# gpufleet device plugin benchmark",
    "## Latency",
    "## Targets (issue 3, section 4)",
)
ROWS = (
    "| Allocate, 1 whole GPU |",
    "| Allocate, bare gRPC server (floor), 1 whole GPU |",
    "| GetPreferredAllocation, 8 whole GPUs",
    "| GetPreferredAllocation, 8 x 7 MIG slices",
    "| XID to kubelet Unhealthy, whole GPU |",
    "| re-registration, 2 resources: nvidia.com/gpu |",
)


@pytest.mark.parametrize("client", ["process", "in-process"])
def test_quick_run_prints_report(tmp_path: Path, client: str) -> None:
    results = tmp_path / "results.json"
    run = run_bench(
        "plugin_bench",
        *("--quick", "--client", client),
        *("--allocate-calls", "60", "--preferred-calls", "60", "--restarts", "2"),
        *("--json", str(results)),
        timeout=90,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for text in (*HEADINGS, *ROWS):
        assert text in run.stdout
    rows = json.loads(results.read_text())["results"]
    judged = [r for r in rows if r["target"] is not None]
    assert len(judged) == run.stdout.count("| PASS |") + run.stdout.count("| FAIL |")
    (allocate,) = [r for r in rows if r["name"] == "Allocate, 1 whole GPU"]
    assert allocate["floor_ms"] > 0  # the bare gRPC server was timed beside it
    # The CPU split is known only with the client in its own process.
    assert (allocate["client_cpu_us"] is not None) == (client == "process")
