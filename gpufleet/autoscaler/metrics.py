"""The autoscaler's own metrics, `gpufleet_autoscaler_*`, from the controller's `Stats`."""

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpufleet.autoscaler.controller import Stats

P = "gpufleet_autoscaler_"


class SelfMetrics:
    """A prometheus_client collector; reads `Stats` at scrape time (the loop writes it)."""

    def __init__(self, stats: Callable[[], Stats]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self._stats()
        desired = GaugeMetricFamily(
            f"{P}desired_replicas", "Replicas the last decision asked for.", labels=["workload"]
        )
        for name, value in sorted(s.desired.items()):
            desired.add_metric([name], value)
        yield desired
        current = GaugeMetricFamily(
            f"{P}current_replicas", "Replicas starting or ready.", labels=["workload"]
        )
        for name, value in sorted(s.current.items()):
            current.add_metric([name], value)
        yield current
        decisions = CounterMetricFamily(
            f"{P}decisions", "Policy decisions by reason.", labels=["workload", "reason"]
        )
        for (name, reason), value in sorted(s.decisions.items()):
            decisions.add_metric([name, reason], value)
        yield decisions
        errors = CounterMetricFamily(f"{P}errors", "Errors by kind.", labels=["kind"])
        for kind, value in sorted(s.errors.items()):
            errors.add_metric([kind], value)
        yield errors
        yield CounterMetricFamily(f"{P}ticks", "Control loop passes.", value=s.ticks)
        yield CounterMetricFamily(f"{P}queries", "Prometheus queries sent.", value=s.queries)
        yield CounterMetricFamily(
            f"{P}query_seconds", "Time spent in Prometheus queries.", value=s.query_seconds
        )
        yield CounterMetricFamily(
            f"{P}reconcile_seconds", "Time spent in control loop passes.", value=s.reconcile_seconds
        )
        yield GaugeMetricFamily(f"{P}leader", "1 while this replica writes.", value=int(s.leader))
