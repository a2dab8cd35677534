"""Joining one query's answer to every workload: sums by timestamp, quantiles of summed buckets,
and the summed buckets themselves."""

import math
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers.tools import require

from gpufleet.autoscaler.core.gather import (
    RangeSeries,
    histogram_quantile,
    pod_values,
    workload_buckets,
    workload_quantiles,
    workload_sums,
)

INF = math.inf


def s(ns: str, pod: str, samples, **labels) -> RangeSeries:
    return RangeSeries(labels={"namespace": ns, "pod": pod, **labels}, samples=tuple(samples))


def test_sums_add_each_workloads_pods_and_ignore_the_rest() -> None:
    owners = {("a", "p1"): "chat", ("a", "p2"): "chat", ("b", "p1"): "code"}
    answer = [
        s("a", "p1", [(10.0, 1.0), (15.0, 2.0)]),
        s("a", "p2", [(15.0, 3.0), (20.0, 4.0)]),
        s("b", "p1", [(10.0, 7.0)]),
        s("a", "other", [(10.0, 100.0)]),
    ]
    assert workload_sums(answer, owners) == {
        "chat": [(10.0, 1.0), (15.0, 5.0), (20.0, 4.0)],
        "code": [(10.0, 7.0)],
    }


def test_a_sum_past_the_largest_float_is_no_sample() -> None:
    """Two pods at 1e308 summed to inf, and the HPA's arithmetic on it raised."""
    owners = {("a", "p1"): "chat", ("a", "p2"): "chat"}
    answer = [s("a", "p1", [(10.0, 1e308), (15.0, 1.0)]), s("a", "p2", [(10.0, 1e308)])]
    assert workload_sums(answer, owners) == {"chat": [(15.0, 1.0)]}
    buckets = [s("a", p, [(10.0, 1e308)], le=le) for p in ("p1", "p2") for le in ("1", "+Inf")]
    assert workload_buckets(buckets, owners) == {"chat": []}


def test_a_pod_series_left_without_samples_is_no_time() -> None:
    """The parser drops NaN samples: a pod whose only sample was NaN left a series with
    none, and taking its newest time stopped the autoscaler (every workload)."""
    owners = {("a", "p1"): "chat", ("a", "p2"): "chat"}
    answer = [s("a", "p1", []), s("a", "p2", [(10.0, 80.0)])]
    assert pod_values(answer, owners) == {"chat": {10.0: {"p2": 80.0}}}
    assert pod_values([s("a", "p1", [])], owners) == {}


QUANTILE_ROWS = [
    pytest.param(0.5, [(1.0, 2.0), (2.0, 4.0), (INF, 4.0)], 1.0, id="bucket-edge"),
    pytest.param(0.9, [(1.0, 2.0), (2.0, 4.0), (INF, 4.0)], 1.8, id="interpolated"),
    pytest.param(0.25, [(0.5, 4.0), (INF, 4.0)], 0.125, id="first-bucket-from-zero"),
    pytest.param(0.99, [(1.0, 1.0), (INF, 10.0)], 1.0, id="in-inf-bucket-is-last-bound"),
    pytest.param(0.5, [(1.0, 0.0), (INF, 0.0)], None, id="no-observations"),
    pytest.param(0.5, [(1.0, 3.0)], None, id="no-inf-bucket"),
    # Pods with other bucket layouts summed by bound are not cumulative: PromQL raises a
    # count below one at a lower bound to it (`ensureMonotonic`), the total too.
    pytest.param(0.5, [(0.1, 10.0), (INF, 5.0)], 0.05, id="not-cumulative-total"),
    pytest.param(0.5, [(1.0, 2.0), (2.0, 1.0), (4.0, 6.0), (INF, 6.0)], 2.5, id="not-cumulative"),
]


@pytest.mark.parametrize(("q", "buckets", "want"), QUANTILE_ROWS)
def test_histogram_quantile(q: float, buckets, want: float | None) -> None:
    got = histogram_quantile(q, buckets)
    assert got == pytest.approx(want) if want is not None else got is None


@pytest.mark.prometheus
def test_the_rows_are_what_prometheus_computes(tmp_path: Path) -> None:
    """Every row with a value, evaluated by the real PromQL engine (promtool test rules)."""
    require("promtool")
    series, exprs = [], []
    for i, row in enumerate(QUANTILE_ROWS):
        q, buckets, want = row.values
        if want is None:
            continue
        for le, count in buckets:
            bound = "+Inf" if math.isinf(le) else f"{le:g}"
            series.append({"series": f'h{i}_bucket{{le="{bound}"}}', "values": f"{count:g}"})
        exprs.append(
            {
                "expr": f"histogram_quantile({q}, h{i}_bucket)",
                "eval_time": "0m",
                "exp_samples": [{"value": want}],
            }
        )
    (tmp_path / "rules.yml").write_text("groups: []\n")
    test = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": exprs}],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    run = subprocess.run(
        ["promtool", "test", "rules", "test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_quantiles_add_the_pods_buckets_before_the_quantile() -> None:
    """Two pods' p90s cannot be combined; their buckets can."""
    owners = {("a", "p1"): "chat", ("a", "p2"): "chat"}
    answer = [
        s("a", "p1", [(10.0, 2.0)], le="1"),
        s("a", "p1", [(10.0, 2.0)], le="+Inf"),
        s("a", "p2", [(10.0, 0.0)], le="1"),
        s("a", "p2", [(10.0, 2.0)], le="+Inf"),
        s("a", "p2", [(10.0, 1.0)], le="nonsense"),
    ]
    ((t, p50),) = workload_quantiles(answer, owners, 0.5)["chat"]
    assert (t, p50) == (10.0, 1.0)


def test_quantiles_already_taken_per_pod_give_the_slowest_pods() -> None:
    """An override may return each pod's p90: the largest bounds the workload's p90 from
    above; a workload whose pods report buckets still gets its quantile from them."""
    owners = {("a", "p1"): "chat", ("a", "p2"): "chat", ("a", "p3"): "code"}
    answer = [
        s("a", "p1", [(10.0, 0.4), (15.0, 2.0)]),
        s("a", "p2", [(10.0, 1.5), (15.0, 0.5)]),
        s("a", "p3", [(10.0, 2.0)], le="1"),
        s("a", "p3", [(10.0, 2.0)], le="+Inf"),
        s("a", "p3", [(10.0, 9.0)]),  # beside buckets: not a quantile of this workload
        s("b", "p9", [(10.0, 9.0)]),  # no workload's pod
    ]
    assert workload_quantiles(answer, owners, 0.9) == {
        "chat": [(10.0, 1.5), (15.0, 2.0)],
        "code": [(10.0, 0.9)],
    }


def test_a_histogram_signal_keeps_the_pods_summed_buckets_by_bound() -> None:
    owners = {("a", "p1"): "chat", ("a", "p2"): "chat"}
    answer = [
        s("a", "p1", [(10.0, 2.0), (15.0, 1.0)], le="+Inf"),
        s("a", "p1", [(10.0, 1.0), (15.0, 1.0)], le="1000.0"),
        s("a", "p2", [(10.0, 3.0)], le="+Inf"),
        s("a", "p2", [(10.0, 0.0)], le="1000.0"),
        s("a", "p2", [(10.0, 5.0)], le="nonsense"),
        s("b", "p3", [(10.0, 7.0)], le="+Inf"),  # no workload's pod
    ]
    assert workload_buckets(answer, owners) == {
        "chat": [(10.0, ((1000.0, 1.0), (math.inf, 5.0))), (15.0, ((1000.0, 1.0), (math.inf, 1.0)))]
    }
