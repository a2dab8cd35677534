"""Smoke test of the simulator benchmark: a tiny trace runs through and the report comes out.

Measured, not asserted: no time is checked, only that every policy's row and the JSON are
written.
"""

import itertools
import json
from pathlib import Path

import pytest
from helpers.bench import run_bench
from helpers.tools import require
from helpers.traces import write_trace


def test_bench_prints_a_row_per_policy(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "tiny.csv", minutes=3)
    results = tmp_path / "bench.json"
    run = run_bench(
        "autoscaler_bench", "--trace", str(trace), *("--repeat", "1", "--json", str(results))
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("# gpufleet simulator benchmark\n")
    for policy in ("hpa", "keda", "gpufleet", "oracle"):
        assert f"\n| {policy} | " in run.stdout
    timings = json.loads(results.read_text())["timings"]
    assert [t["policy"] for t in timings] == ["hpa", "keda", "gpufleet", "oracle"]


def test_reaction_bench_prints_a_row_per_policy(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "tiny.csv", minutes=3)
    run = run_bench("reaction_bench", "--trace", str(trace))
    assert run.returncode == 0, run.stderr
    for policy in ("hpa", "keda", "gpufleet"):
        assert f"| tiny | {policy} | " in run.stdout


def test_sim_minutes_prints_a_row_per_minute_with_overrides(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "tiny.csv", minutes=3)
    run = run_bench(
        "sim_minutes",
        *("--trace", str(trace)),
        *("--set", "forecast.peak_quantile=0.5", "--set", "placeholders=false"),
    )
    assert run.returncode == 0, run.stderr
    first = run.stdout.splitlines()[0]
    assert first.startswith("tiny gpufleet forecast.peak_quantile=0.5 placeholders=False: ")
    assert "| 0 | " in run.stdout and "| 2 | " in run.stdout


@pytest.mark.parametrize(
    ("key", "error"),
    [
        pytest.param("nope=1", "GpufleetSettings has no field 'nope'", id="top-level"),
        pytest.param("forecast.nope=1", "forecast has no field 'nope'", id="nested"),
        pytest.param("headroom", "expected KEY=VALUE", id="no-value"),
    ],
)
def test_sim_minutes_names_a_bad_setting(tmp_path: Path, key: str, error: str) -> None:
    trace = write_trace(tmp_path / "tiny.csv", minutes=1)
    run = run_bench("sim_minutes", "--trace", str(trace), "--set", key, timeout=60)
    assert run.returncode == 2
    assert error in run.stderr


def test_sim_minutes_runs_a_workload_family_at_a_knob_setting() -> None:
    run = run_bench(
        "sim_minutes",
        *("--workload", "longctx:duration=120", "--seed", "0", "--scale", "2"),
        *("--policy", "hpa", "--knob", "70"),
    )
    assert run.returncode == 0, run.stderr
    first = run.stdout.splitlines()[0]
    assert first.startswith("longctx-duration-120-s0-x2 hpa target_util=70: ")
    assert "| missed | feasible missed |" in run.stdout
    assert "| 0 | " in run.stdout and "| 1 | " in run.stdout


def test_sim_minutes_lists_the_decisions_of_a_span() -> None:
    args = ("--workload", "longctx:duration=300", "--seed", "0", "--scale", "2")
    changes = run_bench("sim_minutes", *args, "--decisions", ":60")
    assert changes.returncode == 0, changes.stderr
    table = changes.stdout.split("| t (s) | desired | reason | message |\n|---:|---:|---|---|\n")
    assert len(table) == 2, changes.stdout
    rows = [line.split(" | ") for line in table[1].splitlines()]
    assert rows and all(float(r[0].lstrip("| ")) <= 60 for r in rows)
    assert all("; bound by " in r[3] for r in rows)  # the message names what bound it
    desired = [int(r[1]) for r in rows]
    assert all(a != b for a, b in itertools.pairwise(desired))  # changes only
    every = run_bench("sim_minutes", *args, "--decisions", ":60", "--every-tick")
    assert every.returncode == 0, every.stderr
    assert every.stdout.count("\n| ") > changes.stdout.count("\n| ")  # the holds too


@pytest.mark.parametrize(
    ("args", "error"),
    [
        pytest.param(("--workload", "nope"), "--workload: workload 'nope'", id="workload"),
        pytest.param(
            ("--workload", "longctx", "--decisions", "60"),
            "--decisions: expected FROM:TO in seconds, got '60'",
            id="decisions",
        ),
        pytest.param(
            ("--workload", "longctx", "--decisions", "60:10"),
            "--decisions: '60:10' ends before it starts",
            id="decisions-backwards",
        ),
        pytest.param(
            ("--workload", "longctx", "--knob", "2"),
            "--knob: target attainment must be in [0.5, 0.99999]",
            id="knob",
        ),
        pytest.param(
            ("--workload", "longctx", "--policy", "oracle", "--knob", "1"),
            "--knob: the oracle has no knob",
            id="oracle-knob",
        ),
        pytest.param(("--trace", "/nonexistent.csv"), "--trace: /nonexistent.csv", id="trace"),
    ],
)
def test_sim_minutes_names_a_bad_flag_in_one_line(args: tuple[str, ...], error: str) -> None:
    run = run_bench("sim_minutes", *args, timeout=60)
    assert run.returncode == 2
    assert error in run.stderr
    assert "Traceback" not in run.stderr


def test_controller_bench_prints_a_row_per_workload_count(tmp_path: Path) -> None:
    results = tmp_path / "controller.json"
    run = run_bench(
        "controller_bench",
        *("--workloads", "1,3", "--ticks", "1", "--scrape-seconds", "1"),
        *("--json", str(results)),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "| 1 | " in run.stdout and "| 3 | " in run.stdout
    rows = json.loads(results.read_text())
    # the queries per tick do not grow with the workloads
    assert rows[0]["queries_per_tick"] == rows[1]["queries_per_tick"]
    listing = run_bench(
        "controller_bench",
        *("--workloads", "1", "--ticks", "1", "--scrape-seconds", "1"),
        *("--lists", "--other-pods", "3"),
    )
    assert listing.returncode == 0, listing.stderr[-3000:]
    assert "the cluster read from lists at every tick, 3 pods of other teams" in listing.stdout


def test_gather_bench_prints_what_a_join_costs_against_a_steady_tick() -> None:
    run = run_bench("gather_bench", "--workloads", "3", "--ticks", "2", "--latency-ms", "1")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "| steady | " in run.stdout
    # the joiner holds its whole history within a few ticks, not 30 minutes of them
    joined = next(line for line in run.stdout.splitlines() if "one joins" in line)
    assert int(joined.split("the ")[1].split(" ticks")[0]) < 10


@pytest.mark.prometheus
def test_live_reaction_bench_prints_a_row_per_burst(tmp_path: Path) -> None:
    require("prometheus")
    run = run_bench(
        "live_reaction_bench",
        "--bursts",
        "1",
        "--calm-seconds",
        "8",
        "--window-seconds",
        "20",
        tmpdir=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "| 1 | " in run.stdout and "HPA on the queue" in run.stdout
    assert list(tmp_path.iterdir()) == []  # its scratch (targets, Prometheus' TSDB) is gone


@pytest.mark.prometheus
def test_extmetrics_bench_prints_both_servers_with_the_same_values(tmp_path: Path) -> None:
    require("prometheus")
    results = tmp_path / "extmetrics.json"
    # One size: each starts a world of its own (API server, Prometheus, the daemon, both
    # baselines) down the same path, so a second size adds time, not a case.
    run = run_bench(
        "extmetrics_bench", "--workloads", "3", "--requests", "20", "--json", str(results)
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "| 3 | 20 | " in run.stdout
    rows = json.loads(results.read_text())
    # both answered every request, with the same value
    assert [r["mismatched_values"] for r in rows] == [0]


@pytest.mark.prometheus
def test_zero_bench_prints_a_row_per_method(tmp_path: Path) -> None:
    require("prometheus")
    run = run_bench(
        "zero_bench",
        "--rounds=1",
        "--methods=gpufleet,keda-push",
        "--scrape-seconds=1",
        # the lab's node, cold start and idle node seconds, shortened: each step is still
        # taken and seen, sooner
        "--node-provision-seconds=2",
        "--cold-start-seconds=1",
        "--node-idle-seconds=1",
        "--calm-seconds=3",
        "--window-seconds=60",
        tmpdir=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []  # its scratch (targets, Prometheus' TSDB) is gone
    assert "| gpufleet | " in run.stdout and "| keda-push | " in run.stdout
    assert "none" not in run.stdout  # every step of both was seen
