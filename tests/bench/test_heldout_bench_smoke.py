"""Smoke test of the held-out benchmark: a tiny family runs through the tune-then-judge
protocol and the report names the knob each policy was given. Nothing is timed."""

import json
from pathlib import Path

import pytest
from helpers.bench import run_bench

from bench.heldout_bench import (
    HELDOUT_SEEDS,
    TUNING_SEEDS,
    SeedRuns,
    choose_knob,
    compare,
    markdown,
    settings_over_bound,
    unmatched,
)
from gpufleet.autoscaler.replay.core.sweep import Point


def test_the_tuning_and_heldout_seeds_never_overlap() -> None:
    assert not set(TUNING_SEEDS) & set(HELDOUT_SEEDS)


def test_the_knob_is_the_cheapest_reaching_the_target_else_the_best() -> None:
    tuned = {"a=1": (0.995, 10.0), "a=2": (0.999, 12.0), "a=3": (0.98, 5.0)}
    assert choose_knob(tuned, 0.99) == "a=1"
    assert choose_knob(tuned, 0.9999) == "a=2"


def test_the_report_lists_where_a_higher_target_costs_less_and_attains_less() -> None:
    def row(policy: str, points: list | None = None) -> dict:
        front = [[0.9, 10.0, f"{policy}=1"]]
        row = {"policy": policy, "chosen": f"{policy}=1", "tuning": (0.9, 10.0)}
        row |= {"heldout": (0.9, 10.0), "heldout_feasible": 0.9, "front": front}
        row |= {"seconds_per_policy_hour": (1.0, 1.0)}
        return row | ({"points": points} if points is not None else {})

    points = [
        ["target_attainment=0.99", 0.9457, 75.31],
        ["target_attainment=0.993", 0.9309, 59.09],
        ["target_attainment=0.9965", 0.9510, 79.11],
    ]
    oracle = {"heldout": (0.9, 5.0), "valid": False, "judged": [0.9], "heldout_feasible": 0.9}
    oracle |= {"seconds_per_policy_hour": (1.0, 1.0)}
    result = {"family": "mix", "scale": 10, "oracle": oracle}
    rows = [row("hpa"), row("keda")]
    text = markdown([result | {"rows": [*rows, row("gpufleet", points)]}])
    assert "- x10: 0.993 93.09% / 59.09 (below it: 94.57% / 75.31)\n" in text
    # With the seed runs, the gap to the best lower target, seed by seed.
    seeds = {
        "target_attainment=0.99": [[0.95, 76.0], [0.9414, 74.62]],
        "target_attainment=0.993": [[0.93, 60.0], [0.9318, 58.18]],
        "target_attainment=0.9965": [[0.95, 80.0], [0.952, 78.22]],
    }
    gpufleet = row("gpufleet", points) | {"seeds": seeds}
    text = markdown([result | {"rows": [*rows, gpufleet]}])
    assert (
        "- x10: 0.993 93.09% / 59.09 (below it: 94.57% / 75.31; against 0.99 seed by seed: "
        "-1.48 points, standard error 0.52)\n"
    ) in text
    # A --json from before the inversions were recorded reports none of them.
    assert "knob inversions" not in markdown([result | {"rows": [*rows, row("gpufleet")]}])


def test_baseline_settings_over_the_cost_bound_are_listed_and_counted() -> None:
    # On quiet (predictable, the oracle valid, 1.0 GPU-h) hpa=1 costs 2.0: over the bound.
    # hpa=2 costs 1.1, within it. On flash-short (not judged) hpa=1's point is not matched.
    def cell(family: str, hpa: list, ours: list) -> dict:
        def row(policy: str, front: list, seeds: dict) -> dict:
            return {"policy": policy, "front": front, "seeds": seeds}

        seeds = {p[2]: [[p[0], p[1]], [p[0], p[1]]] for p in hpa}
        rows = [row("hpa", hpa, seeds), row("keda", [], {}), row("gpufleet", ours, {})]
        oracle = {"heldout": (0.99, 1.0), "valid": True}
        return {"family": family, "scale": 10, "rows": rows, "oracle": oracle}

    quiet = cell("quiet", [[0.999, 2.0, "hpa=1"], [0.99, 1.1, "hpa=2"]], [[0.999, 1.0, "g"]])
    flash = cell("flash-short", [[0.9, 5.0, "hpa=1"], [0.5, 1.0, "hpa=2"]], [[0.5, 1.0, "g"]])
    text = settings_over_bound([quiet, flash])
    assert "- hpa: x10 hpa=1 (quiet 2.00x). Points not matched: 1; of them, " in text
    assert (
        "settings over the bound at their scale: 1.\n- keda: none. Points not matched: 0;" in text
    )


def test_bench_reports_each_policy_with_its_tuned_knob(tmp_path: Path) -> None:
    out = tmp_path / "heldout.json"
    run = run_bench(
        "heldout_bench",
        *("--families", "quiet", "--scales", "1", "--duration", "300", "--jobs", "1"),
        *("--json", str(out), "--heldout-seeds", "1000,1002"),
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    assert "### quiet (`quiet:busy=600,idle=1200`)" in run.stdout
    (result,) = json.loads(out.read_text())
    assert [row["policy"] for row in result["rows"]] == ["hpa", "keda", "gpufleet"]
    assert all("=" in row["chosen"] for row in result["rows"])
    assert all(0.0 <= row["heldout_feasible"] <= 1.0 for row in result["rows"])
    assert all(row["front"] for row in result["rows"])
    assert "| sim CPU s per policy-hour (mean / max) |" in run.stdout
    assert "- x1: vs hpa: " in run.stdout and "; vs keda: " in run.stdout
    # Issue 17 section 4: the oracle's held-out replays, each row's x oracle, gpufleet at
    # its default target, and the verdict over them.
    oracle = result["oracle"]
    assert len(oracle["judged"]) == 2 and isinstance(oracle["valid"], bool)
    (ours,) = (row for row in result["rows"] if row["policy"] == "gpufleet")
    assert ours["default"]["knob"] == "target_attainment=0.99"
    assert 0.0 <= ours["default"]["heldout_feasible_after_lead_time"] <= 1.0
    assert "| held-out: x oracle (billed) |" in run.stdout
    # Each knob value on each held-out seed (those given), for the seeds' spread at a
    # missed point.
    assert "; held-out seeds 1000, 1002; " in run.stdout
    assert result["seeds"] == [1000, 1002]
    assert all(len(runs) == 2 for runs in ours["seeds"].values())
    assert set(ours["seeds"]) == {label for label, _, _ in ours["points"]}
    assert "### Baseline points not matched, held out (issue 17, section 4)" in run.stdout
    assert "| quiet | 1 | " in run.stdout
    # Issue 17 section 3: every knob value, in knob order, for the knob's inversions.
    knobs = [float(label.split("=")[1]) for label, _, _ in ours["points"]]
    assert knobs == sorted(knobs) and len(knobs) > len(ours["front"]) - 1
    assert "gpufleet's knob inversions, held out" in run.stdout
    assert "| 1 | gpufleet (default) | target_attainment=0.99 | " in run.stdout
    assert "| 1 | oracle | - (judged: " in run.stdout
    assert "### Cost at the SLO (issue 17, section 4)" in run.stdout
    assert "### Baseline settings over the cost bound (issue 17, section 4)" in run.stdout
    assert "| quiet | 1 | yes | " in run.stdout and "- quiet: yes, " in run.stdout
    # The shards of a grid print as one report again.
    merged = run_bench("heldout_bench", "--merge", str(out), str(out), timeout=60)
    assert merged.returncode == 0, merged.stderr
    assert merged.stdout.count("### quiet") == 1 and merged.stdout.count("- x1: vs hpa") == 2
    assert merged.stdout.count("| quiet | 1 | yes | ") == 2
    # A policy's rows run again, the rest kept: on unchanged code, the same rows (the engine
    # is deterministic) but for the CPU column.
    again = tmp_path / "again.json"
    rerun = run_bench(
        "heldout_bench", "--rerun", "gpufleet", str(out), "--jobs", "1", "--json", str(again)
    )
    assert rerun.returncode == 0, rerun.stderr
    assert "### quiet (`quiet:busy=600,idle=1200`)" in rerun.stdout
    (redone,) = json.loads(again.read_text())
    assert result["duration"] == 300 and redone["duration"] == 300
    assert result["service"]["routing"] == redone["service"]["routing"] == "least-in-flight"
    for before, after in zip(result["rows"], redone["rows"], strict=True):
        assert before.pop("seconds_per_policy_hour") and after.pop("seconds_per_policy_hour")
        assert before == after
    assert redone["oracle"] == result["oracle"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--heldout-seeds", "1000,1"), "--heldout-seeds 1000,1: 1 is a tuning seed"),
        (("--heldout-seeds", "10x"), "--heldout-seeds 10x: not a comma-separated list of"),
        (("--scales", "1,four"), "--scales 1,four: not a comma-separated list of integers"),
        (("--heldout-seeds", ","), "--heldout-seeds: empty"),
    ],
    ids=["a tuning seed", "not a number", "a scale not a number", "empty"],
)
def test_a_bad_seed_or_scale_is_one_line(args: tuple[str, ...], says: str) -> None:
    run = run_bench("heldout_bench", "--families", "quiet", *args, timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert says in run.stderr.splitlines()[-1]


def test_rerun_names_a_policy_the_grid_does_not_run(tmp_path: Path) -> None:
    run = run_bench("heldout_bench", "--rerun", "oracle", str(tmp_path / "x.json"), timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.splitlines()[-1].endswith(
        "--rerun oracle: not a policy of the grid (hpa, keda, gpufleet)"
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "Expecting property name"),
        ('{"family": "quiet"}', "not the --json of python3 -m bench.heldout_bench"),
        ('[{"family": "nope", "scale": 1, "rows": []}]', "not the --json of"),
        (
            '[{"family": "quiet", "scale": 1, "rows": [{"policy": "hpa"}, {"policy": "keda"}, '
            '{"policy": "gpufleet"}]}]',
            "not the --json of",
        ),
    ],
    ids=["not json", "not a list", "unknown family", "before the oracle ran"],
)
def test_merge_names_a_bad_file(tmp_path: Path, text: str, says: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    run = run_bench("heldout_bench", "--merge", str(bad), timeout=60)
    assert run.returncode == 2
    assert f"--merge {bad}: " in run.stderr and says in run.stderr
    assert "Traceback" not in run.stderr


# (ours, theirs, sentence): the front comparison's words, from the fronts alone.
P = Point
COMPARE = [
    pytest.param(
        [P(0.9, 4, "h=0"), P(0.99, 12, "h=1")],
        [P(0.9, 10, "t=50"), P(0.99, 20, "t=20")],
        "vs hpa: dominates, strictly cheaper at 2 of its 2 points that hpa reaches, "
        "by up to 8.00 GPU-h (40%) at 99.00% (h=1)",
        id="dominates-and-cheaper",
    ),
    pytest.param(
        [P(0.9, 4, "h=0")],
        [P(0.8, 2, "t=90"), P(0.999, 4.5, "t=20")],
        "vs hpa: does not dominate, not cheaper than hpa at equal attainment; "
        "not matched: 80.00% / 2.00 (t=90; ours none as cheap, +2.00 GPU-h at its attainment), "
        "99.90% / 4.50 (t=20; ours -9.90 points at its cost, none as high)",
        id="interpolated-cost-below-ours",
    ),
    pytest.param(
        [P(0.99, 5.001, "h=0")],
        [P(0.99, 5.003, "t=20")],
        "vs hpa: dominates, not cheaper than hpa at equal attainment",
        id="float-noise-is-not-a-saving",
    ),
    pytest.param(
        [P(0.995, 1.340001, "h=0")],
        [P(0.9866, 1.34, "t=90")],
        "vs hpa: does not dominate, hpa reaches none of its attainments; not matched: "
        "98.66% / 1.34 (t=90; ours none as cheap, +0.00 GPU-h at its attainment)",
        id="missed-by-float-noise-says-so",
    ),
    pytest.param(
        [P(0.9999, 4, "h=0")],
        [P(0.99, 5, "t=20")],
        "vs hpa: dominates, hpa reaches none of its attainments",
        id="out-of-reach",
    ),
]


@pytest.mark.parametrize(("ours", "theirs", "sentence"), COMPARE)
def test_compare(ours, theirs, sentence) -> None:
    assert compare(ours, theirs, "hpa") == sentence


def test_a_missed_point_says_on_which_seeds_the_nearest_points_match_it() -> None:
    ours = [P(0.95, 8, "g=1"), P(0.97, 11, "g=2")]
    theirs = [P(0.96, 9, "t=70")]
    # Missed on the mean; on seed 1000 the point at its cost matches it, on 1001 neither.
    runs = SeedRuns(
        seeds=[1000, 1001],
        ours={"g=1": [[0.965, 8.0], [0.935, 8.0]], "g=2": [[0.975, 10.0], [0.965, 12.0]]},
        theirs={"t=70": [[0.96, 9.0], [0.96, 9.0]]},
    )
    assert compare(ours, theirs, "hpa", runs) == (
        "vs hpa: does not dominate, strictly cheaper at 1 of its 1 points that hpa reaches, "
        "by up to 1.00 GPU-h (11%) at 95.00% (g=1); not matched: 96.00% / 9.00 (t=70; "
        "ours -1.00 points at its cost, +2.00 GPU-h at its attainment; seed by seed, "
        "matched on 1000)"
    )


def test_the_tally_counts_missed_points_and_those_a_seed_matches() -> None:
    def row(policy: str, front: list, seeds: dict | None) -> dict:
        return {"policy": policy, "front": front} | ({"seeds": seeds} if seeds else {})

    ours = row("gpufleet", [[0.95, 8, "g=1"]], {"g=1": [[0.96, 8.0], [0.94, 8.0]]})
    hpa = row("hpa", [[0.955, 8, "t=70"], [0.99, 20, "t=20"]], None)
    keda = row("keda", [[0.5, 9, "q=1"]], None)
    hpa_seeds = {"t=70": [[0.955, 8.0], [0.955, 8.0]], "t=20": [[0.99, 20.0], [0.99, 20.0]]}
    cell = {"family": "mix", "scale": 10, "rows": [hpa, keda, ours]}
    seeded = cell | {
        "scale": 4,
        "seeds": [1000, 1001],
        "rows": [hpa | {"seeds": hpa_seeds}, keda | {"seeds": {"q=1": [[0.5, 9.0]] * 2}}, ours],
    }
    text = unmatched([seeded, cell])
    assert "| mix | 4 | 2 | 1 | 0 | 0 |" in text
    # A --json from before the seeds were recorded: the count alone.
    assert "| mix | 10 | 2 | - | 0 | - |" in text
    assert "| all | | **4** | **1** | **0** | **0** |" in text
