"""The simulator's Markdown report, asserted as exact text on small fixed results."""

import dataclasses

import numpy as np
import pytest

from gpufleet.autoscaler.core.factory import Tuning
from gpufleet.autoscaler.core.workload import WorkloadConfig
from gpufleet.autoscaler.replay.core import report
from gpufleet.autoscaler.replay.core.model import ClusterModel, ReplayConfig
from gpufleet.autoscaler.replay.core.result import OracleBound, RunResult, Timeline

EMPTY = np.zeros(0)
TIMELINE = Timeline(
    t=EMPTY, arrival_rate=EMPTY, desired=EMPTY, ready=EMPTY, replicas=EMPTY, nodes=EMPTY,
    queue_depth=EMPTY,
)  # fmt: skip


def result(policy: str, attainment: float, node_gpu_hours: float, *, knob: str = "") -> RunResult:
    return RunResult(
        policy=policy,
        trace="conv",
        requests=19366,
        slo_ttft_seconds=2.0,
        slo_attainment=attainment,
        feasible_requests=19000,
        feasible_attainment=min(1.0, attainment + 0.005),
        ttft_p50_seconds=0.4123,
        ttft_p99_seconds=12.5,
        e2e_p50_seconds=3.0,
        e2e_p99_seconds=45.678,
        replica_gpu_hours=node_gpu_hours / 2,
        node_gpu_hours=node_gpu_hours,
        scale_events=7,
        node_events=3,
        ttft_seconds=EMPTY,
        e2e_seconds=EMPTY,
        timeline=TIMELINE,
        decisions=(),
        knob=knob,
    )


BOUND = OracleBound(
    replica_gpu_hours=8.5, node_gpu_hours=16.0, judged_attainment=0.99126, target_attainment=0.99
)
RUN = [
    result("hpa", 0.91234, 30.0),
    result("gpufleet", 0.995, 22.0),
    dataclasses.replace(result("oracle", 1.0, 20.0), oracle=BOUND),
]

FEASIBLE_NOTE = """
feasible: attainment over the 19,000 of 19,366 requests whose prompt one idle replica can \
prefill within the 2 s SLO.
"""

TABLE = f"""\
| policy | SLO attainment | feasible | TTFT p50 / p99 (s) | e2e p50 / p99 (s) \
| replica GPU-h | billed node GPU-h | x oracle (billed) | scale events | node events |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|
| hpa | 91.23% | 91.73% | 0.41 / 12.50 | 3.00 / 45.68 | 15.00 | 30.00 | 1.50x | 7 | 3 |
| gpufleet | 99.50% | 100.00% | 0.41 / 12.50 | 3.00 / 45.68 | 11.00 | 22.00 | 1.10x | 7 | 3 |
| oracle | 100.00% | 100.00% | 0.41 / 12.50 | 3.00 / 45.68 | 10.00 | 20.00 | 1.00x | 7 | 3 |
{FEASIBLE_NOTE}
x oracle divides by the oracle's replay: the cheapest clairvoyant schedule found that \
meets the SLO for 99.00% of the requests it is judged on (after the warm-up, prompts that \
fit the SLO); it met 99.13% of them. The lower bound it was built from (necessary \
conditions only, before repairs): 8.50 replica GPU-h, 16.00 billed node GPU-h.
"""


def test_report_is_exact_text():
    text = report.markdown_report(
        RUN,
        parameters=[("a", "1"), ("b.c", "2.5")],
        command="gpufleet simulate --trace conv.csv",
        images={"conv": [("latency CDFs", "conv-latency.png")]},
    )
    assert text == (
        "# gpufleet simulate\n"
        "\n"
        "## conv (19,366 requests)\n"
        "\n"
        f"{TABLE}"
        "\n"
        "![latency CDFs](conv-latency.png)\n"
        "\n"
        "## Parameters\n"
        "\n"
        "| parameter | value |\n"
        "|---|---|\n"
        "| a | 1 |\n"
        "| b.c | 2.5 |\n"
        "\n"
        "## Reproduce\n"
        "\n"
        "```sh\n"
        "gpufleet simulate --trace conv.csv\n"
        "```\n"
    )


def test_without_an_oracle_the_ratio_is_not_available():
    table = report.results_table(RUN[:1])
    assert table.endswith(
        "| hpa | 91.23% | 91.73% | 0.41 / 12.50 | 3.00 / 45.68 | 15.00 | 30.00 | n/a | 7 | 3 |\n"
        + FEASIBLE_NOTE
    )


def test_an_oracle_that_missed_its_target_makes_every_ratio_not_meaningful():
    missed = dataclasses.replace(BOUND, judged_attainment=0.88)
    runs = [*RUN[:2], dataclasses.replace(RUN[2], oracle=missed)]
    table = report.results_table(runs)
    assert "| 30.00 | not meaningful | 7 | 3 |" in table
    assert "x |" not in table  # no ratio printed anywhere
    assert (
        "it met 88.00% of them. That is short of its 99.00% target (its repairs ran out), so "
        "the oracle is no yardstick here and x oracle is not meaningful." in table
    )
    assert "| 96.50% | 15.00 | not meaningful |  |" in report.sweep_table(
        [*SWEEP[:-1], dataclasses.replace(SWEEP[-1], oracle=missed)]
    )
    assert not report.oracle_valid(runs) and report.oracle_valid(RUN)


@pytest.mark.parametrize(
    ("gpu_hours", "oracle", "valid", "cell"),
    [
        (13.87, 10.43, True, "1.33x"),
        (13.87, 10.43, False, "not meaningful"),
        (13.87, None, True, "n/a"),
        (13.87, 0.0, True, "n/a"),
    ],
    ids=["ratio", "oracle-missed-its-target", "no-oracle", "oracle-billed-nothing"],
)
def test_x_oracle_cell(gpu_hours, oracle, valid, cell):
    # Issue 17: the held-out bench prints its x oracle cells with this same rule.
    assert report.x_oracle(gpu_hours, oracle, valid=valid) == cell


@pytest.mark.parametrize(
    ("gpu_hours", "oracle", "valid", "ratio"),
    [(13.87, 10.43, True, 13.87 / 10.43), (13.87, 10.43, False, None), (5.0, 0.0, True, None)],
    ids=["valid", "oracle-missed-its-target", "oracle-billed-nothing"],
)
def test_oracle_ratio_is_none_where_the_oracle_is_no_yardstick(gpu_hours, oracle, valid, ratio):
    assert report.oracle_ratio(gpu_hours, oracle, valid=valid) == ratio


def test_tables_group_runs_by_trace_in_order():
    other = [dataclasses.replace(r, trace="code", requests=8819) for r in RUN[:1]]
    text = report.tables([*RUN[:1], *other, RUN[2]])
    assert text.startswith("## conv (19,366 requests)\n\n| policy |")
    assert "\n## code (8,819 requests)\n\n| policy |" in text
    assert text.count("| oracle |") == 1


SWEEP = [
    result("hpa", 0.90, 10.0, knob="target_util=80"),
    result("hpa", 0.97, 14.0, knob="target_util=60"),
    result("hpa", 0.96, 15.0, knob="target_util=50"),
    result("gpufleet", 0.99, 12.0, knob="headroom=0.2"),
    result("gpufleet", 0.995, 15.0, knob="headroom=0.5"),
    result("keda", 0.999, 30.0, knob="queue_target=2"),
    result("oracle", 1.0, 10.0),
]


def test_sweep_table_and_dominance_are_exact_text():
    assert report.sweep_table(SWEEP) == (
        "| policy | knob | SLO attainment | feasible | billed node GPU-h | x oracle (billed) "
        "| on front |\n"
        "|---|---|---:|---:|---:|---:|---|\n"
        "| hpa | target_util=80 | 90.00% | 90.50% | 10.00 | 1.00x | yes |\n"
        "| hpa | target_util=60 | 97.00% | 97.50% | 14.00 | 1.40x | yes |\n"
        "| hpa | target_util=50 | 96.00% | 96.50% | 15.00 | 1.50x |  |\n"
        "| gpufleet | headroom=0.2 | 99.00% | 99.50% | 12.00 | 1.20x | yes |\n"
        "| gpufleet | headroom=0.5 | 99.50% | 100.00% | 15.00 | 1.50x | yes |\n"
        "| keda | queue_target=2 | 99.90% | 100.00% | 30.00 | 3.00x | yes |\n"
        "| oracle | - | 100.00% | 100.00% | 10.00 | 1.00x | yes |\n" + FEASIBLE_NOTE
    )
    assert report.dominance(SWEEP) == (
        "- gpufleet's front dominates hpa's: no; not matched: "
        "target_util=80 (90.00%, 10.00 GPU-h)\n"
        "- gpufleet's front dominates keda's: no; not matched: "
        "queue_target=2 (99.90%, 30.00 GPU-h)\n" + DOMINANCE_RULE
    )


def test_dominance_yes_when_every_baseline_point_is_matched():
    runs = [SWEEP[1], SWEEP[3], SWEEP[4]]
    assert report.dominance(runs) == "- gpufleet's front dominates hpa's: yes\n" + DOMINANCE_RULE


DOMINANCE_RULE = (
    "\n(A front dominates another when every point of the other is matched or beaten on both "
    "attainment and billed GPU-h: an equal point counts as matched.)\n"
)


def test_parameters_list_the_config_fields():
    rows = dict(
        report.parameters(
            workload=WorkloadConfig(name="w", min_replicas=2, slo_ttft_seconds=3.0),
            config=ReplayConfig(cluster=ClusterModel(gpus_per_node=4)),
            tuning=Tuning(),
            scale=3,
            seed=7,
        )
    )
    assert rows["trace copies (--scale)"] == "3"
    assert rows["seed (--seed)"] == "7"
    assert rows["slo_ttft_seconds"] == "3.0"
    assert rows["min_replicas"] == "2"
    assert rows["cluster.gpus_per_node"] == "4"
    assert rows["service.batch_slots"] == "64"
    assert rows["pipeline.scrape_interval_seconds"] == "5.0"
    assert rows["tuning.hpa_target_util"] == "70.0"
    assert "tuning.gpufleet_headroom" not in rows


def test_parameters_name_the_replicas_a_warm_start_chose_per_trace():
    rows = dict(
        report.parameters(
            workload=WorkloadConfig(name="w"),
            config=ReplayConfig(),
            tuning=Tuning(),
            scale=1,
            warm_start={"conv": 1, "code": 3},
        )
    )
    assert rows["initial_replicas"] == (
        "conv 1, code 3 (--warm-start: what each trace's first minutes need)"
    )
