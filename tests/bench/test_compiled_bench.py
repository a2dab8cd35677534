"""bench.compiled_bench's pure parts: the --runs list and the report (the build and the timed
children run in tests/autoscaler/replay/test_compiled.py and by hand)."""

from pathlib import Path

import pytest

from bench.compiled_bench import DEFAULT_RUNS, main, parse_runs, render


def test_runs_parse_with_a_knob_for_every_policy_but_the_oracle() -> None:
    assert parse_runs("mix:10:gpufleet:0.99, longctx:4:oracle,") == [
        ("mix", 10, "gpufleet", 0.99),
        ("longctx", 4, "oracle", None),
    ]
    assert len(parse_runs(DEFAULT_RUNS)) == 24


@pytest.mark.parametrize(
    "text",
    [
        "mix:10",
        "mix:ten:hpa:80",
        "mix:10:hpa",
        "mix:10:oracle:1",
        "mix:10:hpa:80:1",
        "nope:1:hpa:80",
        "mix:10:hpa:85",
    ],
)
def test_a_bad_run_is_one_line_naming_it(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--runs", text])
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert repr(text) in error and "Traceback" not in error


def test_the_report_judges_the_policies_not_the_oracle_and_shows_changed_results() -> None:
    runs = parse_runs("mix:10:hpa:80,mix:10:oracle")
    best = {
        "interpreted": [
            {"cpu": 10.0, "hours": 0.5, "digest": "a"},
            {"cpu": 60.0, "hours": 0.5, "digest": "o"},
        ],
        "compiled": [
            {"cpu": 4.5, "hours": 0.5, "digest": "b"},
            {"cpu": 30.0, "hours": 0.5, "digest": "o"},
        ],
    }
    text = render(runs, best, {}, header={})
    assert "| mix x10 hpa 80 | 20.00 | 9.00 | 0.45 | **no** |" in text
    assert "| mix x10 oracle | 120.00 | 60.00 | 0.50 | yes |" in text
    assert (
        "interpreted: the policies' runs at most 20.00 s per policy-hour (<= 10 s: not met)" in text
    )
    assert "compiled: the policies' runs at most 9.00 s per policy-hour (<= 10 s: met)" in text


def test_a_site_without_the_compiled_engine_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "gpufleet" / "autoscaler" / "replay" / "core").mkdir(parents=True)
    with pytest.raises(SystemExit) as exited:
        main(["--site", str(tmp_path), "--runs", "mix:10:hpa:80"])
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"--site {tmp_path}: no compiled engine there" in error
