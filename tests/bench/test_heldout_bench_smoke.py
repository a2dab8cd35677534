"""Smoke test of the held-out benchmark: a tiny family runs through the tune-then-judge
protocol and the report names the knob each policy was given. Nothing is timed."""

import json
from pathlib import Path

from helpers.bench import run_bench

from bench.heldout_bench import HELDOUT_SEEDS, TUNING_SEEDS, choose_knob


def test_the_tuning_and_heldout_seeds_never_overlap() -> None:
    assert not set(TUNING_SEEDS) & set(HELDOUT_SEEDS)


def test_the_knob_is_the_cheapest_reaching_the_target_else_the_best() -> None:
    tuned = {"a=1": (0.995, 10.0), "a=2": (0.999, 12.0), "a=3": (0.98, 5.0)}
    assert choose_knob(tuned, 0.99) == "a=1"
    assert choose_knob(tuned, 0.9999) == "a=2"


def test_bench_reports_each_policy_with_its_tuned_knob(tmp_path: Path) -> None:
    out = tmp_path / "heldout.json"
    run = run_bench(
        "heldout_bench",
        *("--families", "quiet", "--scales", "1", "--duration", "300", "--jobs", "1"),
        *("--json", str(out)),
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    assert "### quiet at --scale 1" in run.stdout
    (result,) = json.loads(out.read_text())
    assert [row["policy"] for row in result["rows"]] == ["hpa", "keda", "gpufleet"]
    assert all("=" in row["chosen"] for row in result["rows"])
    assert all(0.0 <= row["heldout_feasible"] <= 1.0 for row in result["rows"])
    assert "| held-out: feasible attainment |" in run.stdout
    assert set(result["dominates"]) == {"hpa", "keda"}
