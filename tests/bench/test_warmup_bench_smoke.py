"""Smoke test of the warm-up split: a tiny family runs every policy at its tuned knob and the
table splits feasible attainment at the lead time. Nothing is timed."""

from helpers.bench import run_bench


def test_bench_splits_attainment_at_the_lead_time() -> None:
    run = run_bench(
        "warmup_bench",
        *("--families", "quiet", "--scales", "1", "--duration", "300", "--jobs", "1"),
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    assert "| before the lead time | after it |" in run.stdout
    rows = [line for line in run.stdout.splitlines() if line.startswith("| quiet | 1 |")]
    assert [row.split(" | ")[2].split(" ")[0] for row in rows] == ["hpa", "keda", "gpufleet"]
    assert all(row.count("%") == 3 for row in rows)


def test_defaults_skip_tuning_and_name_each_default() -> None:
    run = run_bench(
        "warmup_bench",
        *("--families", "quiet", "--scales", "1", "--duration", "300", "--jobs", "1"),
        "--defaults",
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    for knob in (
        "hpa (target_util=70)",
        "keda (queue_target=10)",
        "gpufleet (target_attainment=0.99)",
    ):
        assert knob in run.stdout


def test_an_unknown_family_is_one_line_naming_it() -> None:
    run = run_bench("warmup_bench", "--families", "nope", timeout=60)
    assert run.returncode != 0
    assert "unknown family 'nope'" in run.stderr and "Traceback" not in run.stderr
