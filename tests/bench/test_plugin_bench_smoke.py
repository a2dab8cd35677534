"""Smoke test of the device plugin benchmark: a tiny run completes and prints its report.

Benchmarks are measured, not asserted: no latency is checked here, only that every phase
(Allocate, preferred allocation, health propagation, re-registration) runs end to end
against the real plugin and fake kubelet, and that the report and JSON come out.
"""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEADINGS = (
    "# gpufleet device plugin benchmark",
    "## Latency",
    "## Targets (issue 3, section 4)",
)
ROWS = (
    "| Allocate, 1 whole GPU |",
    "| GetPreferredAllocation, 8 whole GPUs",
    "| GetPreferredAllocation, 8 x 7 MIG slices",
    "| XID to kubelet Unhealthy, whole GPU |",
    "| re-registration, 2 resources: nvidia.com/gpu |",
)


def test_quick_run_prints_report(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    run = subprocess.run(
        [
            *(sys.executable, "-m", "bench.plugin_bench", "--quick"),
            *("--allocate-calls", "60", "--preferred-calls", "60", "--restarts", "2"),
            *("--json", str(results)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for text in (*HEADINGS, *ROWS):
        assert text in run.stdout
    names = [r["name"] for r in json.loads(results.read_text())["results"]]
    assert len(names) == run.stdout.count("| PASS |") + run.stdout.count("| FAIL |")
