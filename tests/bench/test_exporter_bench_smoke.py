"""Smoke test of the exporter benchmark: a tiny run completes and prints its report.

Benchmarks are measured, not asserted: no timing or resource numbers are checked here,
only that the benchmark runs end to end (both exporters, all phases) and says what it found.
"""

from pathlib import Path

from helpers.bench import run_bench

HEADINGS = (
    "# gpufleet exporter benchmark",
    "## Output",
    "## Scrape latency, CPU and memory",
    "## gpufleet collection",
    "## Targets (issue 2, section 6)",
)


def test_quick_run_prints_report(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    run = run_bench(
        "exporter_bench",
        *("--quick", "--scrapes", "50", "--baseline-scrapes", "3", "--concurrency", "1,8"),
        *("--json", str(results)),
        timeout=60,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for heading in HEADINGS:
        assert heading in run.stdout
    assert "Output check: OK" in run.stdout
    assert results.stat().st_size > 0
