"""The autoscaler's self-metrics, rendered from the controller's Stats."""

from prometheus_client import CollectorRegistry, generate_latest

from gpufleet.autoscaler.controller import Stats
from gpufleet.autoscaler.metrics import SelfMetrics


def test_per_workload_gauges_give_the_alert_rules_what_they_need() -> None:
    stats = Stats(
        desired={"ml/chat": 8},
        current={"ml/chat": 8},
        ready={"ml/chat": 6},
        max_replicas={"ml/chat": 8},
        missing_metrics={"ml/chat": True},
        leader=True,
    )
    registry = CollectorRegistry()
    registry.register(SelfMetrics(lambda: stats))
    text = generate_latest(registry).decode()
    for line in (
        'gpufleet_autoscaler_desired_replicas{workload="ml/chat"} 8.0',
        'gpufleet_autoscaler_current_replicas{workload="ml/chat"} 8.0',
        'gpufleet_autoscaler_ready_replicas{workload="ml/chat"} 6.0',
        'gpufleet_autoscaler_max_replicas{workload="ml/chat"} 8.0',
        'gpufleet_autoscaler_missing_metrics{workload="ml/chat"} 1.0',
    ):
        assert line in text.splitlines(), line


def test_every_error_kind_is_served_as_zero_before_its_first_error() -> None:
    # An alert on increase(gpufleet_autoscaler_errors_total[...]) needs the series before
    # the first error, or that error's increase is lost.
    stats = Stats()
    stats.errors["kube_conflict"] += 2
    registry = CollectorRegistry()
    registry.register(SelfMetrics(lambda: stats))
    lines = [
        line
        for line in generate_latest(registry).decode().splitlines()
        if line.startswith("gpufleet_autoscaler_errors_total{")
    ]
    assert lines == [
        'gpufleet_autoscaler_errors_total{kind="kube_conflict"} 2.0',
        'gpufleet_autoscaler_errors_total{kind="kube_forbidden"} 0.0',
        'gpufleet_autoscaler_errors_total{kind="kube_invalid"} 0.0',
        'gpufleet_autoscaler_errors_total{kind="kube_not_found"} 0.0',
        'gpufleet_autoscaler_errors_total{kind="kube_unavailable"} 0.0',
        'gpufleet_autoscaler_errors_total{kind="policy"} 0.0',
        'gpufleet_autoscaler_errors_total{kind="prometheus_bad_query"} 0.0',
        'gpufleet_autoscaler_errors_total{kind="prometheus_bad_response"} 0.0',
        'gpufleet_autoscaler_errors_total{kind="prometheus_timeout"} 0.0',
        'gpufleet_autoscaler_errors_total{kind="prometheus_unavailable"} 0.0',
        'gpufleet_autoscaler_errors_total{kind="tick"} 0.0',
        'gpufleet_autoscaler_errors_total{kind="workload"} 0.0',
    ]


def test_a_standby_serves_no_per_workload_series() -> None:
    """The chart runs two replicas; the standby's copies of every workload's series doubled
    the dashboards' lines and decision rates and paged each workload alert twice."""
    stats = Stats(desired={"ml/chat": 8}, missing_metrics={"ml/chat": True}, leader=False)
    stats.decisions[("ml/chat", "ScaleUp")] += 3
    stats.ticks = 5
    registry = CollectorRegistry()
    registry.register(SelfMetrics(lambda: stats))
    lines = generate_latest(registry).decode().splitlines()
    assert not [line for line in lines if 'workload="' in line]
    assert "gpufleet_autoscaler_leader 0.0" in lines
    assert "gpufleet_autoscaler_ticks_total 5.0" in lines  # its own health, still served


def test_backfill_queries_are_served_beside_all_queries() -> None:
    registry = CollectorRegistry()
    registry.register(SelfMetrics(lambda: Stats(queries=12, backfill_queries=3)))
    lines = generate_latest(registry).decode().splitlines()
    assert "gpufleet_autoscaler_backfill_queries_total 3.0" in lines
    assert "gpufleet_autoscaler_queries_total 12.0" in lines


def test_the_clock_lead_is_served() -> None:
    registry = CollectorRegistry()
    registry.register(SelfMetrics(lambda: Stats(clock_lead_seconds=-60.5)))
    lines = generate_latest(registry).decode().splitlines()
    assert "gpufleet_autoscaler_clock_lead_seconds -60.5" in lines
