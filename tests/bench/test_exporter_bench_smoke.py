"""Smoke test of the exporter benchmark: a tiny run completes and prints its report.

Benchmarks are measured, not asserted: no timing or resource numbers are checked here,
only that the benchmark runs end to end (every exporter, all phases) and says what it found.
"""

import json
from pathlib import Path

import pytest
from helpers.bench import run_bench

HEADINGS = (
    "# gpufleet exporter benchmark",
    "## Output",
    "## Scrape latency, CPU and memory",
    "## gpufleet collection",
    "## Targets (issue 2, section 6)",
    "## Memory (MiB, after the last phase)",
    "## Targets (issue 15, section 4)",
)


def test_quick_run_prints_report(tmp_path: Path) -> None:
    """Every exporter through every phase, nvitop-exporter in its own environment on the
    simulator (issue 15) included: one run, as the peer's phase repeats the others'."""
    setup = run_bench("peer_env", timeout=600)  # what the benchmark does first; pip needs PyPI
    if setup.returncode:
        pytest.skip(setup.stderr.strip()[-500:])
    results = tmp_path / "results.json"
    run = run_bench(
        "exporter_bench",
        *("--quick", "--scrapes", "50", "--baseline-scrapes", "3", "--peer-scrapes", "2"),
        *("--concurrency", "1,8", "--json", str(results)),
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for heading in HEADINGS:
        assert heading in run.stdout
    assert "Output check: OK" in run.stdout
    assert "## NVML functions nvitop-exporter called that the simulator lacks" in run.stdout
    data = json.loads(results.read_text())
    names = [r["name"] for r in data["runs"]]
    assert names == ["gpufleet", "gpufleet without -k", "baseline", "nvitop-exporter"]
    assert data["peer_calls"]["missing"] == {}  # the simulator answers all it calls


def test_without_the_peer_no_environment_is_made(tmp_path: Path) -> None:
    """--no-peer runs ours and the baseline only, without pip (where PyPI is closed): the
    whole report all the same."""
    results = tmp_path / "results.json"
    run = run_bench(
        "exporter_bench",
        *("--quick", "--scrapes", "5", "--baseline-scrapes", "1", "--concurrency", "1"),
        *("--idle-seconds", "1", "--no-peer", "--json", str(results)),
        timeout=90,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for heading in HEADINGS:
        assert heading in run.stdout
    assert "Output check: OK" in run.stdout
    assert "nvitop-exporter" not in run.stdout
    names = [r["name"] for r in json.loads(results.read_text())["runs"]]
    assert names == ["gpufleet", "gpufleet without -k", "baseline"]
