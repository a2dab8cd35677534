"""Smoke test of the import-cost report: it runs in both modes and lists gpufleet's modules.

Measured, not asserted: no resource numbers are checked, only that the report is complete
and names what it measured in (RSS, or tracemalloc's traced bytes with `--traced`).
"""

import pytest
from helpers.bench import run_bench


@pytest.mark.parametrize(("args", "unit"), [((), "RSS"), (("--traced",), "traced bytes")])
def test_report_is_complete(args: tuple[str, ...], unit: str) -> None:
    result = run_bench("import_cost", "--min-mib", "0.5", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    report = result.stdout
    assert f"- own costs in {unit}" in report
    for configuration in ("no flags", "-k", "--web-config-file"):
        assert f"## Own cost by owner, daemon as started with {configuration} " in report
    assert "| `gpufleet.exporter.daemon` as started with -k |" in report
    assert report.count("gpufleet's modules:") == 3
