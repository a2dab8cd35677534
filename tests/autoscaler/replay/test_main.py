"""`gpufleet simulate` end to end on a small synthetic trace: table, report, plots, errors."""

import dataclasses
from pathlib import Path

import pytest
from helpers.traces import write_trace

from gpufleet.autoscaler.core import factory as policies
from gpufleet.autoscaler.replay import main as sim_main
from gpufleet.autoscaler.replay.core.result import RunResult
from gpufleet.cli import main

HEADER = "| policy | SLO attainment | feasible | TTFT p50 / p99 (s) |"


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_trace(tmp_path_factory.mktemp("trace") / "burst.csv")


@pytest.fixture(scope="module")
def report_dir(trace: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One full run with --report, shared by the report tests (the slow part)."""
    out = tmp_path_factory.mktemp("report")
    assert main(["simulate", "--trace", str(trace), "--report", str(out), "--no-progress"]) == 0
    return out


def test_report_has_every_policy_with_the_oracle_as_reference(report_dir: Path):
    text = (report_dir / "report.md").read_text()
    assert text.startswith("# gpufleet simulate\n\n## burst (")
    assert HEADER in text
    for policy in ("hpa", "keda", "gpufleet"):
        assert f"\n| {policy} | " in text
    assert "| 1.00x |" in text.split("\n| oracle | ", 1)[1].splitlines()[0]
    assert "## Parameters" in text
    assert "\n```sh\ngpufleet simulate --trace " in text


def test_report_plots_are_pngs_linked_from_the_report(report_dir: Path):
    pytest.importorskip("matplotlib")
    text = (report_dir / "report.md").read_text()
    for name in ("burst-capacity.png", "burst-latency.png"):
        assert (report_dir / name).read_bytes().startswith(b"\x89PNG")
        assert f"]({name})" in text


def test_without_matplotlib_the_markdown_is_written_with_a_hint(
    trace, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(sim_main.plots, "matplotlib_figure", lambda: None)
    argv = ["simulate", "--trace", str(trace), "--policy", "oracle", "--report", str(tmp_path)]
    assert main(argv) == 0
    assert "pip install 'gpufleet[report]'" in capsys.readouterr().err
    assert "| oracle |" in (tmp_path / "report.md").read_text()
    assert not list(tmp_path.glob("*.png"))


def test_without_report_the_table_goes_to_stdout(trace, capsys):
    assert main(["simulate", "--trace", str(trace), "--policy", "hpa,oracle"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("## burst (")
    assert HEADER in out and "\n| hpa | " in out and "\n| oracle | " in out
    # Not a terminal: no bar, but one final line per run.
    assert err.count("\n") == 2 and err.startswith("burst hpa: ") and "\r" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "gpufleet simulate: error: flag --trace or --workload is required"),
        (["--workload", "flash:hieght=3"], "invalid flag --workload: workload 'flash:hieght=3'"),
        (["--trace", "{trace}", "--policy", "vpa"], "invalid flag --policy: unknown"),
        (["--trace", "{trace}", "--scale", "0"], "invalid flag --scale"),
        (["--trace", "{trace}", "--bogus"], "unrecognized arguments: --bogus"),
        (["--trace", "{dir}/missing.csv"], "invalid flag --trace: {dir}/missing.csv: cannot read"),
        (["--trace", "{bad}"], "invalid flag --trace: {bad}:3: ContextTokens 'many' is not"),
        (
            ["--trace", "{trace}", "--max-num-batched-tokens", "64"],
            "invalid flag --max-num-batched-tokens: must exceed --batch-slots (64) with chunked",
        ),
        (
            [
                "--trace",
                "{trace}",
                "--gpufleet-headroom",
                "1",
                "--gpufleet-target-attainment",
                "0.999",
            ],
            "invalid flag --gpufleet-target-attainment: sets the headroom itself",
        ),
        (
            ["--trace", "{trace}", "--gpufleet-target-attainment", "1"],
            "invalid flag --gpufleet-target-attainment",
        ),
        (["--trace", "{trace}", "--seed", "-1"], "invalid flag --seed"),  # numpy's traceback
        (["--trace", "{trace}", "--slo-ttft-seconds", "1e12"], "at most 86400 s (a day)"),
        (["--trace", "{trace}", "--report", "/proc"], "invalid flag --report: cannot write in"),
    ],
    ids=[
        "no trace",
        "bad workload",
        "unknown policy",
        "bad scale",
        "unknown flag",
        "missing file",
        "bad line",
        "token budget within the batch",
        "two gpufleet knobs",
        "target attainment of one",
        "negative seed",
        "SLO of 30,000 years",
        "report where no file can be made",  # found after every run, as a traceback
    ],
)
def test_bad_input_exits_2_naming_the_flag_or_line(argv, message, trace, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.9799600,10,5\n"
        "2023-11-16 18:17:04.0000000,many,5\n"
    )
    fill = {"trace": trace, "dir": tmp_path, "bad": bad}
    assert exit_code(["simulate", *(a.format(**fill) for a in argv)]) == 2
    assert message.format(**fill) in capsys.readouterr().err


def test_generated_workloads_replay_beside_traces_seeded_and_scaled(trace, capsys):
    """--workload (repeatable, its commas kept) runs next to --trace; --seed and --scale
    apply to it as to a CSV."""
    argv = [
        "simulate",
        "--trace",
        str(trace),
        "--workload",
        "quiet:duration=600,busy=60,idle=240",
        "--workload=flash:duration=600,height=4",
        "--policy",
        "hpa",
        "--seed",
        "7",
        "--scale",
        "2",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    headings = [line.split(" (")[0] for line in out.splitlines() if line.startswith("## ")]
    assert headings == [
        "## burst-x2",
        "## quiet-duration-600-busy-60-idle-240-s7-x2",
        "## flash-duration-600-height-4-s7-x2",
    ]
    assert main(argv) == 0
    assert capsys.readouterr().out == out  # byte for byte


def exit_code(argv: list[str]) -> int:
    """main's return value, or the code of the SystemExit argparse raises."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def test_a_run_that_never_ends_exits_1_with_one_line_naming_it(trace, monkeypatch, capsys):
    """No flag makes a run unservable, so the plan's cluster is given no nodes: the real
    engine gives up a simulated day after the trace (none of its 2093 requests served),
    and the error names the run."""
    plan = sim_main.sweep.plan

    def nodeless(*args, **kwargs):
        return [
            dataclasses.replace(
                spec,
                config=dataclasses.replace(
                    spec.config,
                    initial_replicas=0,
                    cluster=dataclasses.replace(spec.config.cluster, max_nodes=0),
                ),
            )
            for spec in plan(*args, **kwargs)
        ]

    monkeypatch.setattr(sim_main.sweep, "plan", nodeless)
    assert main(["simulate", "--trace", str(trace), "--policy", "hpa", "--no-progress"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "gpufleet simulate: error: burst hpa: policy hpa: 2093 requests still unserved "
        "86400 s after the trace ended"
    ]


def test_progress_bar_draws_in_place_then_prints_a_summary():
    import io

    stream = io.StringIO()
    clock = iter([100.0, 103.25])
    bar = sim_main.ProgressBar("t hpa", stream=stream, live=True, clock=lambda: next(clock))
    for fraction in (0.0, 0.004, 0.5, 1.0):
        bar(fraction)
    bar.done(_result())
    text = stream.getvalue()
    assert text.count("\r") == 4  # 0%, 50%, 100%; 0.4% redraws nothing; then the summary
    assert f"\rt hpa [{'#' * 15}{'.' * 15}]  50%" in text
    assert text.endswith("t hpa: 99.50% within 2 s SLO, 3.25 billed GPU-h (3.2 s)\n")


def _result() -> RunResult:
    from dataclasses import fields

    values = {f.name: 0 for f in fields(RunResult)}
    values.update(slo_attainment=0.995, node_gpu_hours=3.25, slo_ttft_seconds=2.0, knob="")
    return RunResult(**values)


def test_sweep_runs_in_processes_and_keeps_the_planned_order(trace, capsys):
    assert (
        main(["simulate", "--trace", str(trace), "--policy", "keda", "--sweep", "--jobs", "2"]) == 0
    )
    out, err = capsys.readouterr()
    knobs = [line.split(" | ")[1] for line in out.splitlines() if line.startswith("| keda |")]
    assert knobs == [f"queue_target={v:g}" for v in policies.knob("keda").sweep]
    assert err.count("\n") == len(knobs) and f"[{len(knobs)}/{len(knobs)}]" in err


def test_a_sweep_report_has_the_fronts_the_dominance_lines_and_the_pareto_plot(trace, tmp_path):
    pytest.importorskip("matplotlib")
    argv = ["simulate", "--trace", str(trace), "--sweep", "--policy", "hpa,gpufleet,oracle"]
    assert main([*argv, "--jobs", "2", "--report", str(tmp_path), "--no-progress"]) == 0
    text = (tmp_path / "report.md").read_text()
    assert text.startswith("# gpufleet simulate --sweep\n\n## burst (")
    assert "- gpufleet's front dominates hpa's: " in text
    assert "The lower bound it was built from" in text
    assert (tmp_path / "burst-pareto.png").read_bytes().startswith(b"\x89PNG")
    assert "](burst-pareto.png)" in text
