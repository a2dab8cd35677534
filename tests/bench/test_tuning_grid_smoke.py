"""Smoke test of the tuning-seed grid: a tiny family's sweep, written and compared. Nothing
is timed."""

import json
from pathlib import Path

import pytest
from helpers.bench import run_bench

from bench.tuning_grid import choose, compare, inversions, unmatched


def test_a_tiny_grid_is_written_and_compares_unchanged_with_itself(tmp_path: Path) -> None:
    out = tmp_path / "grid.json"
    run = run_bench(
        "tuning_grid",
        *("--policy", "hpa", "--families", "quiet", "--scales", "1", "--duration", "300"),
        *("--jobs", "1", "--json", str(out)),
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    rows = json.loads(out.read_text())
    assert {(f, s) for f, s, *_ in rows} == {("quiet", 1)} and len(rows) == 8  # HPA's sweep
    for *_, attainment, gpu_hours, runs in rows:  # each tuning seed's run, and their means
        assert len(runs) == 2
        assert attainment == pytest.approx(sum(a for a, _ in runs) / 2)
        assert gpu_hours == pytest.approx(sum(g for _, g in runs) / 2)
    same = run_bench("tuning_grid", "--compare", str(out), str(out), timeout=60)
    assert same.returncode == 0, same.stderr
    assert same.stdout.endswith("8 unchanged, 0 better, 0 worse, 0 traded\n")


def test_compare_sorts_each_moved_point_into_better_worse_or_traded() -> None:
    before = {
        ("mix", 10, 0.9): (0.79, 57.35),
        ("mix", 10, 0.99): (0.83, 63.0),
        ("flash-long", 10, 0.99): (0.66, 20.9),
        ("quiet", 1, 0.5): (1.0, 1.34),
    }
    after = {
        ("mix", 10, 0.9): (0.76, 52.34),
        ("mix", 10, 0.99): (0.82, 64.0),
        ("flash-long", 10, 0.99): (0.67, 17.0),
        ("quiet", 1, 0.5): (1.0, 1.34),
    }
    table = compare(before, after)
    assert "| flash-long | 10 | 0.99 | 66.00% / 20.90 | 67.00% / 17.00 |" in table
    assert table.endswith("1 unchanged, 1 better, 1 worse, 1 traded\n")


def test_an_inversion_is_a_higher_target_that_costs_less_and_attains_less() -> None:
    grid = {
        ("mix", 10, 0.99): (0.9457, 75.31),
        ("mix", 10, 0.993): (0.9309, 59.09),  # inverted: -16 GPU-h, -1.5 points
        ("mix", 10, 0.995): (0.9577, 73.90),  # cheaper by 1.9%: noise, not an inversion
        ("mix", 10, 0.997): (0.9531, 84.89),  # less attainment, but it costs more
        ("quiet", 1, 0.5): (1.0, 1.34),
        ("quiet", 1, 0.99): (1.0, 1.00),  # cheaper, attains as much: not one
    }
    table = inversions(grid)
    assert "| mix | 10 | 0.993 | 93.09% / 59.09 | 94.57% / 75.31 | - |" in table
    assert table.count("| mix |") == 1 and "| quiet |" not in table
    assert table.endswith("knob inversions: 1\n")
    runs = {  # seed by seed: the inversion shows on seed 0 only
        ("mix", 10, 0.99): ((0.9400, 75.0), (0.9514, 75.62)),
        ("mix", 10, 0.993): ((0.9104, 58.0), (0.9514, 60.18)),
    }
    assert "| 94.57% / 75.31 | -2.96, +0.00 |" in inversions(grid, runs)


def test_inversions_read_each_seed_from_the_json_and_older_files_without_it(
    tmp_path: Path,
) -> None:
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    new.write_text(
        json.dumps(
            [
                ["mix", 10, 0.99, 0.9457, 75.31, [[0.94, 75.0], [0.9514, 75.62]]],
                ["mix", 10, 0.993, 0.9309, 59.09, [[0.9104, 58.0], [0.9514, 60.18]]],
            ]
        )
    )
    old.write_text(json.dumps([["mix", 10, 0.993, 0.9309, 59.09]]))
    seeds = run_bench("tuning_grid", "--inversions", str(new), timeout=60)
    assert seeds.returncode == 0, seeds.stderr
    assert "| 0.993 | 93.09% / 59.09 | 94.57% / 75.31 | -2.96, +0.00 |" in seeds.stdout
    # The older file's 0.993 wins its key and brings no runs: nothing seed by seed for it.
    spliced = run_bench("tuning_grid", "--inversions", f"{new},{old}", timeout=60)
    assert "| 0.993 | 93.09% / 59.09 | 94.57% / 75.31 | - |" in spliced.stdout, spliced.stderr


def test_a_bad_compare_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": 1}')
    run = run_bench("tuning_grid", "--compare", str(bad), str(bad), timeout=60)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert len(run.stderr.splitlines()) == 1
    assert run.stderr.startswith(f"--compare {bad}: not a --json of bench.tuning_grid (")


def test_knob_values_outside_the_sweep_run_instead_of_it(tmp_path: Path) -> None:
    out = tmp_path / "grid.json"
    run = run_bench(
        "tuning_grid",
        *("--policy", "hpa", "--families", "quiet", "--scales", "1", "--duration", "300"),
        *("--knobs", "55,65", "--routing", "least-tokens", "--jobs", "1", "--json", str(out)),
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert [(f, s, k) for f, s, k, *_ in json.loads(out.read_text())] == [
        ("quiet", 1, 55.0),
        ("quiet", 1, 65.0),
    ]


def test_a_bad_knob_list_is_one_line(tmp_path: Path) -> None:
    run = run_bench("tuning_grid", "--knobs", "0.7,x", "--json", str(tmp_path / "g.json"))
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.splitlines()[-1].endswith("--knobs: not a comma list of numbers: '0.7,x'")


def test_an_unknown_routing_is_one_line(tmp_path: Path) -> None:
    run = run_bench("tuning_grid", "--routing", "random", "--json", str(tmp_path / "g.json"))
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "--routing: invalid choice: 'random'" in run.stderr.splitlines()[-1]


def test_unmatched_lists_the_baseline_points_no_point_of_ours_matches() -> None:
    ours = {
        ("mix", 10, 0.99): (0.94, 75.0),
        ("mix", 10, 0.995): (0.93, 60.0),
        ("quiet", 1, 0.99): (0.9998, 1.34),
    }
    hpa = {
        ("mix", 10, 80.0): (0.94, 68.7),  # ours needs more GPU-h for it: unmatched
        ("mix", 10, 90.0): (0.92, 60.0),  # 0.995 matches it on both axes
        ("quiet", 1, 90.0): (0.9995, 1.34),
        ("onoff", 4, 80.0): (0.99, 7.0),  # a cell ours did not run is not judged
    }
    assert unmatched(ours, hpa) == (
        "- mix x10: 80: 94.00% / 68.70\n\nunmatched baseline points: 1, in 2 family-scale cells\n"
    )


def _sweep_extra_hpa(tmp_path: Path) -> tuple[Path, ...]:
    """Three --json grids of one cell: our sweep, an extra knob value, and HPA's."""
    grids = {
        "sweep.json": [["mix", 10, 0.99, 0.94, 75.0]],  # leaves HPA 80 unmatched
        "extra.json": [["mix", 10, 0.9975, 0.95, 68.0]],  # matches it
        "hpa.json": [["mix", 10, 80.0, 0.94, 68.7]],
    }
    for name, rows in grids.items():
        (tmp_path / name).write_text(json.dumps(rows))
    return tuple(tmp_path / name for name in grids)


def test_unmatched_reads_several_grids_as_one(tmp_path: Path) -> None:
    sweep, extra, hpa = _sweep_extra_hpa(tmp_path)
    alone = run_bench("tuning_grid", "--unmatched", str(sweep), str(hpa), timeout=60)
    both = run_bench("tuning_grid", "--unmatched", f"{sweep},{extra}", str(hpa), timeout=60)
    assert alone.stdout.endswith("unmatched baseline points: 1, in 1 family-scale cells\n"), (
        alone.stderr
    )
    assert both.stdout == "\nunmatched baseline points: 0, in 1 family-scale cells\n", both.stderr


def test_a_bad_unmatched_file_is_one_line(tmp_path: Path) -> None:
    good, missing = tmp_path / "g.json", tmp_path / "missing.json"
    good.write_text("[]")
    run = run_bench("tuning_grid", "--unmatched", f"{good},{missing}", str(good), timeout=60)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.startswith(f"--unmatched {missing}: not a --json of bench.tuning_grid (")
    assert len(run.stderr.splitlines()) == 1


def test_choose_judges_each_candidate_alone_then_greedily() -> None:
    ours = {("mix", 10, 0.99): (0.94, 75.0), ("quiet", 1, 0.99): (0.9998, 1.34)}
    candidates = {
        ("mix", 10, 0.995): (0.925, 59.0),  # matches HPA 90
        ("mix", 10, 0.996): (0.93, 70.0),  # matches nothing more
        ("mix", 10, 0.9975): (0.95, 68.0),  # matches HPA 80
    }
    hpa = {
        ("mix", 10, 80.0): (0.94, 68.7),
        ("mix", 10, 90.0): (0.92, 60.0),
        ("quiet", 1, 90.0): (0.9995, 1.34),  # ours matches it already
    }
    assert choose(ours, candidates, hpa) == (
        "| added value | unmatched baseline points | newly matched |\n"
        "|---|---:|---|\n"
        "| 0.995 | 1 | mix x10 90 |\n"
        "| 0.996 | 2 | none |\n"
        "| 0.9975 | 1 | mix x10 80 |\n"
        "\nunmatched baseline points: 2 without them; chosen greedily: 0.995, 0.9975 "
        "(0 unmatched)\n"
    )


def test_choose_reads_its_three_grids_from_files(tmp_path: Path) -> None:
    ours, extra, hpa = _sweep_extra_hpa(tmp_path)
    run = run_bench("tuning_grid", "--choose", str(ours), str(extra), str(hpa), timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.endswith("chosen greedily: 0.9975 (0 unmatched)\n")
    bad = run_bench("tuning_grid", "--choose", str(ours), str(tmp_path / "no.json"), str(hpa))
    assert bad.returncode == 1 and len(bad.stderr.splitlines()) == 1
    assert bad.stderr.startswith(f"--choose {tmp_path / 'no.json'}: not a --json")


def test_a_setting_is_set_on_top_of_what_the_knob_maps_to(tmp_path: Path) -> None:
    args = ("--families", "quiet", "--scales", "1", "--duration", "300", "--knobs", "0.99")
    grids = {}
    for name, changes in {"as-mapped": (), "reserve": ("--set", "reserve_ratio=100")}.items():
        out = tmp_path / f"{name}.json"
        run = run_bench("tuning_grid", *args, *changes, "--jobs", "1", "--json", str(out))
        assert run.returncode == 0, run.stderr
        ((family, scale, knob, _, gpu_hours, _),) = json.loads(out.read_text())
        assert (family, scale, knob) == ("quiet", 1, 0.99)
        grids[name] = gpu_hours
    # 0.99 stands no reserve; a reserve of 100x the base rate is paid for.
    assert grids["reserve"] > grids["as-mapped"]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        pytest.param(("--set", "nope=1"), "--set nope: GpufleetSettings has no field 'nope'"),
        pytest.param(
            ("--set", "feedback.nope=1"), "--set feedback.nope: feedback has no field 'nope'"
        ),
        pytest.param(("--set", "headroom"), "--set: expected KEY=VALUE, got 'headroom'"),
        pytest.param(("--set", "headroom=abc"), "--set headroom: expected a number, got 'abc'"),
        pytest.param(("--set", "headroom=nan"), "--set headroom: expected a number, got 'nan'"),
        pytest.param(("--set", "fill_nodes=1"), "--set fill_nodes: expected true or false, got 1"),
        pytest.param(
            ("--set", "forecast.forget_after_blocks=2.5"),
            "--set forecast.forget_after_blocks: expected an integer, got 2.5",
        ),
        pytest.param(
            ("--policy", "hpa", "--set", "headroom=1"), "--set changes gpufleet's settings only"
        ),
    ],
)
def test_a_bad_setting_is_one_line(tmp_path: Path, args: tuple[str, ...], error: str) -> None:
    run = run_bench("tuning_grid", *args, "--json", str(tmp_path / "g.json"), timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.splitlines()[-1].endswith(error), run.stderr
    assert not (tmp_path / "g.json").exists()
