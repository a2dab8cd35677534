"""Smoke test of the target-attainment knob benchmark: a tiny flash family through the
tuning sweep, the held-out default and top, and the forgetting ablation. Nothing is timed."""

from helpers.bench import run_bench


def test_bench_sweeps_the_knob_and_holds_out_the_default_and_the_top() -> None:
    run = run_bench(
        "knob_bench",
        *("--families", "flash-short", "--scales", "1", "--duration", "300", "--jobs", "1"),
        *("--top", "0.999", "--forget"),
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    assert "- flash-short x1: 0.5: " in run.stdout and "| 0.99999: " in run.stdout
    assert "| family | scale | target_attainment=0.99 | target_attainment=0.999 |" in run.stdout
    assert "- flash-short x1 target_attainment=0.999: " in run.stdout


def test_an_unknown_family_is_one_line_naming_it() -> None:
    run = run_bench("knob_bench", "--families", "tsunami", timeout=60)
    assert run.returncode == 2
    assert "unknown family 'tsunami'" in run.stderr and "Traceback" not in run.stderr
