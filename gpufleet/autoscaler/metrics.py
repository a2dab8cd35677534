"""The autoscaler's own metrics, `gpufleet_autoscaler_*`, from the controller's `Stats`
and the metrics port's `ServerStats`."""

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpufleet.autoscaler.controller import Stats
from gpufleet.autoscaler.prom.client import PromErrorKind
from gpufleet.core.server_stats import ServerStats
from gpufleet.http.metrics import http_families
from gpufleet.kube.errors import KubeErrorKind

P = "gpufleet_autoscaler_"
# Every kind the controller counts, served as 0 until it happens: an alert on
# `increase(errors_total[...])` sees nothing from a series that appears only with its first
# error (the Prometheus client libraries' advice for known label values).
# `policy`, `workload` and `tick`: an exception nothing expected (a bug, or cluster data
# nothing checked) in a workload's decision, in one of its steps, or in a whole tick.
ERROR_KINDS = (
    tuple(f"kube_{k}" for k in KubeErrorKind)
    + tuple(f"prometheus_{k}" for k in PromErrorKind)
    + ("policy", "workload", "tick")
)


class SelfMetrics:
    """A prometheus_client collector; reads `Stats` at scrape time (the loop writes it)
    and, when given, the counters of the server that serves it."""

    def __init__(self, stats: Callable[[], Stats], *, server: ServerStats | None = None) -> None:
        self._stats = stats
        self._server = server

    def collect(self) -> Iterator[Metric]:
        s = self._stats()
        # Per-workload series from the replica that writes only: a standby decides too (to
        # take over warm), and its copies drew every workload twice on the dashboards,
        # doubled the decision rates and paged each workload alert once per replica.
        w = s if s.leader else Stats()
        yield _per_workload("desired_replicas", "Replicas the last decision asked for.", w.desired)
        yield _per_workload("current_replicas", "Replicas starting or ready.", w.current)
        yield _per_workload("ready_replicas", "Replicas Ready and serving.", w.ready)
        yield _per_workload(
            "max_replicas",
            "The workload's maxReplicas (alerts: pinned at the ceiling).",
            w.max_replicas,
        )
        yield _per_workload(
            "placeholder_replicas",
            "Placeholder pods kept for the node headroom the policy asked for.",
            w.placeholders,
        )
        yield _per_workload(
            "capacity_buffer_replicas",
            "CapacityBuffer chunks kept for the node headroom the policy asked for.",
            w.buffers,
        )
        yield _per_workload(
            "missing_metrics",
            "1 while the workload is held because its signals are missing.",
            {name: int(held) for name, held in w.missing_metrics.items()},
        )
        decisions = CounterMetricFamily(
            f"{P}decisions", "Policy decisions by reason.", labels=["workload", "reason"]
        )
        for (name, reason), value in sorted(w.decisions.items()):
            decisions.add_metric([name, reason], value)
        yield decisions
        errors = CounterMetricFamily(f"{P}errors", "Errors by kind.", labels=["kind"])
        for kind, value in sorted((dict.fromkeys(ERROR_KINDS, 0) | s.errors).items()):
            errors.add_metric([kind], value)
        yield errors
        yield CounterMetricFamily(f"{P}ticks", "Control loop passes.", value=s.ticks)
        yield CounterMetricFamily(
            f"{P}queries",
            "Prometheus range queries sent (its clock's reading is not one).",
            value=s.queries,
        )
        yield CounterMetricFamily(
            f"{P}query_seconds", "Time spent in Prometheus queries.", value=s.query_seconds
        )
        yield CounterMetricFamily(
            f"{P}late_queries",
            "Prometheus queries still answering when a tick stopped waiting; their answers "
            "joined a later tick.",
            value=s.late_queries,
        )
        yield CounterMetricFamily(
            f"{P}backfill_queries",
            "Prometheus queries for times a workload lacked: one that joined a query others "
            "send, or came back from ticks it sat out. Counted in queries too.",
            value=s.backfill_queries,
        )
        yield CounterMetricFamily(
            f"{P}busy_steps",
            "Workload steps (their API writes) still running when a tick stopped waiting; "
            "the workload sat out later ticks until they ended.",
            value=s.busy_steps,
        )
        yield CounterMetricFamily(
            f"{P}reconcile_seconds", "Time spent in control loop passes.", value=s.reconcile_seconds
        )
        yield GaugeMetricFamily(
            f"{P}clock_lead_seconds",
            "How far this machine's clock leads Prometheus' (negative: trails), taken off it: "
            "the loop runs on Prometheus' time. 0 within a second.",
            value=s.clock_lead_seconds,
        )
        yield GaugeMetricFamily(f"{P}leader", "1 while this replica writes.", value=int(s.leader))
        if self._server is not None:
            yield from http_families(P, self._server)


def _per_workload(name: str, help_text: str, values: Mapping[str, int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(f"{P}{name}", help_text, labels=["workload"])
    for workload, value in sorted(values.items()):
        family.add_metric([workload], value)
    return family
