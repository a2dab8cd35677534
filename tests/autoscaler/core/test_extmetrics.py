"""Metric values in Kubernetes' formats, and which workloads a selector picks: pure."""

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity

from gpufleet.autoscaler.core import extmetrics as em
from gpufleet.autoscaler.core.hpa.calc import FLAG_TOLERANCES, value_replicas
from gpufleet.autoscaler.core.observation import PodTelemetry
from gpufleet.core.selectors import parse_selector


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (0.0004, "0"),
        (1.5, "1500m"),
        (12, "12"),
        (1500, "1500"),
        (2000, "2k"),
        (0.25, "250m"),
        (-1.5, "-1500m"),
        (3e6, "3M"),
        (1e18, "1E"),
    ],
)
def test_quantities_are_canonical_decimal_si_at_milli_precision(value: float, text: str) -> None:
    assert em.format_quantity(value) == text


@given(st.floats(min_value=-1e12, max_value=1e12, allow_nan=False))
def test_the_official_client_reads_back_every_quantity(value: float) -> None:
    parsed = parse_quantity(em.format_quantity(value))
    assert parsed == Decimal(round(value * 1000)) / 1000


def test_times_and_windows() -> None:
    assert em.rfc3339(1_767_225_600.9) == "2026-01-01T00:00:00Z"
    assert [em.window_seconds(w) for w in ("30s", "2m", "500ms", "1h")] == [30, 120, 1, 3600]


def workload(name: str, **labels: str) -> em.WorkloadMetrics:
    return em.workload_metrics(
        namespace="llm",
        name=name,
        target=labels.get("target", name),
        model=labels.get("model", ""),
        signals={"queue_depth": (10.0, 4.0)},
        pods=None,
        desired=None,
        current=1,
        ready=1,
        now=11.0,
        fresh_after=0.0,
    )


def test_a_selector_picks_workloads_by_their_labels_and_a_missing_signal_has_no_item() -> None:
    snap = em.MetricsSnapshot([workload("a", model="llama"), workload("b"), workload("c")])
    picked = snap.select("llm", "gpufleet_queue_depth", parse_selector("autoscaler in (a,b)"))
    assert [labels["autoscaler"] for labels, _ in picked] == ["a", "b"]
    assert snap.select("llm", "gpufleet_queue_depth", parse_selector("model=llama"))[0][1] == (
        em.Sample(10.0, 4.0)
    )
    # no decision yet, no telemetry: those metrics are absent, never 0
    assert snap.select("llm", "gpufleet_desired_replicas", ()) == []
    assert snap.select("llm", "gpufleet_gpu_utilization", ()) == []
    assert snap.select("other", "gpufleet_queue_depth", ()) == []


def test_an_hpas_value_target_of_one_lands_on_the_desired_count() -> None:
    """The ratio was desired / current, rounded to the milli: 2/3 read 0.667, and the HPA,
    which proposes ceil(ratio x its Ready pods), asked for 3 (612 of 1,938 such moves landed
    one above); and with replicas still starting it proposed half the scale-up."""
    for ready in (*range(1, 65), 500, 999):
        for current in (ready, ready + 3):  # every pod Ready, or three still starting
            for desired in range(0, 129):
                ratio = em.desired_ratio(desired, current=current, ready=ready)
                hpa = value_replicas(
                    current_replicas=current, ready_pods=ready, total=ratio, target=1.0
                )
                if not FLAG_TOLERANCES.within(hpa.ratio):
                    assert hpa.replicas == desired, (ready, current, desired, ratio)
    # at 0 replicas the HPA proposes ceil(ratio): the count; none Ready: 1 holds
    assert em.desired_ratio(2, current=0, ready=0) == 2.0
    assert em.desired_ratio(6, current=4, ready=0) == 1.0


def test_the_feed_tells_subscribers_until_they_leave() -> None:
    feed, calls = em.SnapshotFeed(), []
    leave = feed.subscribe(lambda: calls.append(feed.latest))
    snap = em.MetricsSnapshot([workload("a")])
    feed.publish(snap)
    leave()
    feed.publish(em.MetricsSnapshot())
    assert calls == [snap] and feed.latest.get("llm", "a") is None


def test_a_sample_taken_before_fresh_after_is_no_sample() -> None:
    """Served as current, a signal frozen by a Prometheus outage or a pod's vanished series
    kept an HPA and KEDA scaling on it for the history's half hour: none of the HPA's hold
    or KEDA's fallback, which a missing item brings."""
    telemetry = (80.0, (PodTelemetry(pod="p0", gpu_util_percent=50.0),))
    served = em.workload_metrics(
        namespace="llm",
        name="chat",
        target="vllm",
        model="",
        signals={"queue_depth": (79.0, 4.0), "arrival_rate": (81.0, 2.0)},
        pods=telemetry,
        desired=3,
        current=1,
        ready=1,
        now=100.0,
        fresh_after=80.0,
    )
    assert set(served.values) == {
        "gpufleet_arrival_rate",  # 81: fresh
        "gpufleet_gpu_utilization",  # 80: fresh, just
        "gpufleet_desired_replicas",  # the decision, held as decided
        "gpufleet_desired_ratio",
    }
