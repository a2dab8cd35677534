"""The signals the controller gathers, as metrics other autoscalers read: pure.

Both the `external.metrics.k8s.io/v1beta1` server (for an HPA) and the KEDA external
scaler answer from a `MetricsSnapshot` the controller publishes after each tick: the
newest cached sample of each workload's signals and its latest decision. No PromQL per
request. A metric is named `gpufleet_<signal>`; each item carries the GPUAutoscaler's
name, its target and model as labels, which is what a `labelSelector` picks from.

A signal with no sample (a failed query, no series yet) has no item: an HPA then
reports the metric as failed and holds, and KEDA counts a scaler error, as with any
metrics source that has nothing to say. It is never turned into 0.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpufleet.autoscaler.core.observation import PodTelemetry
from gpufleet.core.selectors import Requirement

GROUP = "external.metrics.k8s.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"

# Signal -> metric: what the controller gathers per workload, then the policy's answer.
SIGNAL_METRICS = {
    "queue_depth": "gpufleet_queue_depth",  # requests waiting: the pods' and a gateway's
    "arrival_rate": "gpufleet_arrival_rate",  # requests/s
    "ttft_p90_seconds": "gpufleet_ttft_p90_seconds",
    "in_flight": "gpufleet_in_flight",
}
GPU_UTILIZATION = "gpufleet_gpu_utilization"  # mean DCGM_FI_DEV_GPU_UTIL of its pods, percent
DESIRED_REPLICAS = "gpufleet_desired_replicas"  # AverageValue target 1: the HPA follows it
DESIRED_RATIO = "gpufleet_desired_ratio"  # desired / ready pods; a Value target of 1
METRICS = (*SIGNAL_METRICS.values(), GPU_UTILIZATION, DESIRED_REPLICAS, DESIRED_RATIO)
# Metrics measured over a rate window; the others are instantaneous (no `window`).
WINDOWED = frozenset(("gpufleet_arrival_rate", "gpufleet_ttft_p90_seconds"))


@dataclass(frozen=True, slots=True)
class Sample:
    time: float  # seconds since the epoch the value was measured (or decided)
    value: float


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadMetrics:
    """One GPUAutoscaler's metrics at the end of a tick."""

    namespace: str
    name: str
    labels: Mapping[str, str]
    values: Mapping[str, Sample]  # metric name -> newest sample; absent when missing
    replicas: int = 0  # the target's replicas, starting or ready


def workload_metrics(
    *,
    namespace: str,
    name: str,
    target: str,
    model: str,
    signals: Mapping[str, tuple[float, float]],
    pods: tuple[float, tuple[PodTelemetry, ...]] | None,
    desired: int | None,
    current: int,
    ready: int,
    now: float,
    fresh_after: float,
) -> WorkloadMetrics:
    """`signals`: signal -> (time, value) of its newest sample; `pods`: the newest telemetry
    and its time; `desired`: the count the controller wants (None before a decision);
    `current`: the replicas the target asks for (its Scale's spec.replicas, the count an
    HPA's and KEDA's zero tests read); `ready`: its Ready pods as an HPA counts them
    (`replicas.hpa_ready`). A sample taken before `fresh_after` is no sample: served as
    current, a Prometheus outage or a pod's vanished series read as a frozen value for
    the history's half hour, where the HPA should hold and KEDA apply its fallback."""
    values = {
        metric: Sample(*signals[signal])
        for signal, metric in SIGNAL_METRICS.items()
        if signal in signals and signals[signal][0] >= fresh_after
    }
    if pods is not None and pods[0] >= fresh_after:
        utils = [p.gpu_util_percent for p in pods[1] if p.gpu_util_percent is not None]
        if utils:
            values[GPU_UTILIZATION] = Sample(pods[0], sum(utils) / len(utils))
    if desired is not None:
        values[DESIRED_REPLICAS] = Sample(now, float(desired))
        values[DESIRED_RATIO] = Sample(now, desired_ratio(desired, current=current, ready=ready))
    labels = {"autoscaler": name, "target": target}
    if model:
        labels["model"] = model
    return WorkloadMetrics(
        namespace=namespace, name=name, labels=labels, values=values, replicas=current
    )


def desired_ratio(desired: int, *, current: int, ready: int) -> float:
    """The ratio from which an HPA's `Value` target of 1 lands on `desired`. The HPA proposes
    ceil(ratio x its Ready pods), in floats, the ratio read at milli precision (`hpa.calc.
    value_replicas`): so the largest milli below desired / ready (rounded to nearest, 2/3
    read 0.667 and 3 x 0.667 asked for 3; and 25 x 0.28 is 7.000000000000001 in floats).
    Exact for up to 999 Ready pods. With none Ready the HPA would propose 0 from any ratio:
    1 holds (inside its tolerance). At 0 replicas it proposes ceil(ratio): the count
    itself. Within its tolerance (10% either side of 1) the HPA keeps its count."""
    if current == 0:
        return float(desired)
    if ready == 0:
        return 1.0
    return max(0, desired * 1000 - 1) // ready / 1000


Matched = list[tuple[Mapping[str, str], Sample]]  # one item per workload: labels, value


class MetricsSnapshot:
    """Every workload's metrics after one tick, indexed by namespace, by name, and by
    label value, so a request with an equality selector looks at its workloads only."""

    __slots__ = ("_by_label", "_by_name", "_by_namespace")

    def __init__(self, workloads: Iterable[WorkloadMetrics] = ()) -> None:
        self._by_namespace: dict[str, list[WorkloadMetrics]] = {}
        self._by_name: dict[tuple[str, str], WorkloadMetrics] = {}
        self._by_label: dict[tuple[str, str, str], list[WorkloadMetrics]] = {}
        for w in workloads:
            self._by_namespace.setdefault(w.namespace, []).append(w)
            self._by_name[(w.namespace, w.name)] = w
            for key, value in w.labels.items():
                self._by_label.setdefault((w.namespace, key, value), []).append(w)

    def get(self, namespace: str, name: str) -> WorkloadMetrics | None:
        return self._by_name.get((namespace, name))

    def select(self, namespace: str, metric: str, selector: tuple[Requirement, ...]) -> Matched:
        """The workloads of `namespace` whose labels match: their labels and `metric`."""
        candidates = self._by_namespace.get(namespace, ())
        for r in selector:
            if r.op == "=" and len(r.values) == 1:
                (value,) = r.values
                candidates = self._by_label.get((namespace, r.key, value), ())
                break
        out = []
        for w in candidates:
            sample = w.values.get(metric)
            if sample is not None and all(r.matches(w.labels) for r in selector):
                out.append((w.labels, sample))
        return out


class SnapshotFeed:
    """The newest snapshot, and who to tell when a new one is published (the KEDA streams).
    The controller publishes; the servers read `latest` and subscribe."""

    def __init__(self) -> None:
        self.latest = MetricsSnapshot()
        self._listeners: set[Callable[[], None]] = set()

    def publish(self, snapshot: MetricsSnapshot) -> None:
        self.latest = snapshot
        for listener in tuple(self._listeners):
            listener()

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener` after each publish; returns the function that unsubscribes."""
        self._listeners.add(listener)
        return lambda: self._listeners.discard(listener)


# --- Kubernetes' formats ---

_SUFFIXES = {-3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}


def format_quantity(value: float) -> str:
    """A `resource.Quantity` string in canonical DecimalSI form at milli precision, as
    custom-metrics-apiserver builds its values (`NewMilliQuantity(v*1000, DecimalSI)`):
    1.5 -> "1500m", 12 -> "12", 2000 -> "2k", 1500 -> "1500"."""
    millis = round(value * 1000)
    if millis == 0:
        return "0"
    exponent = -3
    while millis % 1000 == 0 and exponent < 18:
        millis //= 1000
        exponent += 3
    return f"{millis}{_SUFFIXES[exponent]}"


def window_seconds(rate_window: str) -> int:
    """`--rate-window` ("30s", "2m", "500ms", "1h") in whole seconds, at least 1."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    number = rate_window.rstrip("smh")
    unit = rate_window[len(number) :]
    return max(1, round(int(number) * units[unit]))


def rfc3339(seconds: float) -> str:
    """A `metav1.Time`: RFC 3339 in UTC, whole seconds."""
    return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def value_list(metric: str, matched: Matched, *, window_seconds: int | None) -> dict[str, Any]:
    """The `ExternalMetricValueList` for `metric`: one item per matched workload (the HPA
    sums them). `window_seconds` is the rate window, given to windowed metrics only."""
    items = []
    for labels, sample in matched:
        item: dict[str, Any] = {
            "metricName": metric,
            "metricLabels": dict(labels),
            "timestamp": rfc3339(sample.time),
            "value": format_quantity(sample.value),
        }
        if window_seconds is not None and metric in WINDOWED:
            item["window"] = window_seconds
        items.append(item)
    return {
        "kind": "ExternalMetricValueList",
        "apiVersion": GROUP_VERSION,
        "metadata": {},
        "items": items,
    }


def resource_list() -> dict[str, Any]:
    """Discovery at /apis/external.metrics.k8s.io/v1beta1, as custom-metrics-apiserver lists
    external metrics."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [
            {
                "name": m,
                "singularName": "",
                "namespaced": True,
                "kind": "ExternalMetricValueList",
                "verbs": ["get"],
            }
            for m in METRICS
        ],
    }


def group_list() -> dict[str, Any]:
    """Discovery at /apis: the one group this server serves."""
    version = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [{"name": GROUP, "versions": [version], "preferredVersion": version}],
    }


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A `Status` error body, as every Kubernetes API server answers a failure."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
