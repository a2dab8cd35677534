"""Query answers joined to workloads: one query per signal for every workload at once.

The controller asks Prometheus one `... by (namespace, pod)` query per signal per tick and
joins the answer to workloads here, through the pods each workload's scale selector
selects, so the number of queries grows with the signals, not the workloads. Sums add the
pods' samples at each timestamp; a quantile adds the pods' histogram buckets, then takes
the quantile as PromQL's `histogram_quantile` does; a histogram signal keeps the added
buckets. Pure.
"""

import itertools
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

W = TypeVar("W", bound=Hashable)
PodKey = tuple[str, str]  # (namespace, pod)


@dataclass(frozen=True, slots=True, kw_only=True)
class RangeSeries:
    """One series of a range query: its labels and (unix seconds, value) samples."""

    labels: Mapping[str, str]
    samples: tuple[tuple[float, float], ...]


def _owner(series: RangeSeries, owners: Mapping[PodKey, W]) -> W | None:
    labels = series.labels
    return owners.get((labels.get("namespace", ""), labels.get("pod", "")))


def workload_sums(
    series: Iterable[RangeSeries], owners: Mapping[PodKey, W]
) -> dict[W, list[tuple[float, float]]]:
    """Per workload, the sum over its pods at each timestamp, oldest first. Series of pods no
    workload owns are ignored."""
    sums: dict[W, dict[float, float]] = {}
    for s in series:
        owner = _owner(s, owners)
        if owner is None:
            continue
        acc = sums.setdefault(owner, {})
        for t, v in s.samples:
            acc[t] = acc.get(t, 0.0) + v
    # A sum past the largest float is no sample (the parser dropped non-finite ones).
    return {w: sorted(p for p in acc.items() if math.isfinite(p[1])) for w, acc in sums.items()}


def workload_quantiles(
    series: Iterable[RangeSeries], owners: Mapping[PodKey, W], q: float
) -> dict[W, list[tuple[float, float]]]:
    """Per workload, the q-quantile of its pods' summed `le` buckets at each timestamp.

    Series with no `le` label at all are quantiles already (a spec's override may return
    each pod's): two pods' quantiles cannot be combined, so a workload with no buckets gets
    the largest of its pods' at each timestamp, an upper bound of its own quantile."""
    series = tuple(series)
    out: dict[W, list[tuple[float, float]]] = {}
    for w, samples in workload_buckets(series, owners).items():
        points = []
        for t, buckets in samples:
            value = histogram_quantile(q, buckets)
            if value is not None:
                points.append((t, value))
        out[w] = points
    largest: dict[W, dict[float, float]] = {}
    for s in series:
        owner = _owner(s, owners)
        if owner is None or owner in out or "le" in s.labels:
            continue
        acc = largest.setdefault(owner, {})
        for t, v in s.samples:
            acc[t] = max(acc.get(t, -math.inf), v)
    out.update((w, sorted(acc.items())) for w, acc in largest.items())
    return out


def workload_buckets(
    series: Iterable[RangeSeries], owners: Mapping[PodKey, W]
) -> dict[W, list[tuple[float, tuple[tuple[float, float], ...]]]]:
    """Per workload, its pods' summed `le` buckets at each timestamp, oldest first, each
    sorted by bound. Series without a numeric `le` are ignored."""
    buckets: dict[W, dict[float, dict[float, float]]] = {}
    for s in series:
        owner = _owner(s, owners)
        le = _bound(s.labels.get("le"))
        if owner is None or le is None:
            continue
        by_time = buckets.setdefault(owner, {})
        for t, v in s.samples:
            at = by_time.setdefault(t, {})
            at[le] = at.get(le, 0.0) + v
    return {
        w: [
            (t, tuple(sorted(by_time[t].items())))
            for t in sorted(by_time)
            if all(math.isfinite(count) for count in by_time[t].values())
        ]
        for w, by_time in buckets.items()
    }


def _bound(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)  # "+Inf" parses
    except ValueError:
        return None


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """PromQL's histogram_quantile over cumulative (upper bound, count) buckets sorted by
    bound; None where PromQL gives NaN (no +Inf bucket, no observations). As PromQL's
    `ensureMonotonic`, a count below one at a lower bound is raised to it: pods with other
    bucket layouts (a rolling upgrade across engine versions) summed by bound are not
    cumulative, and the quantile read 38% high on such a mix."""
    if not buckets or not math.isinf(buckets[-1][0]):
        return None
    counts = itertools.accumulate((count for _, count in buckets), max)
    buckets = list(zip((bound for bound, _ in buckets), counts, strict=True))
    total = buckets[-1][1]
    if total <= 0 or not 0 <= q <= 1:
        return None
    rank = q * total
    for i, (upper, count) in enumerate(buckets):
        if count >= rank:
            if math.isinf(upper):
                return buckets[i - 1][0] if i > 0 else None
            lower, below = (buckets[i - 1][0], buckets[i - 1][1]) if i > 0 else (0.0, 0.0)
            if i == 0 and upper <= 0:
                return upper
            in_bucket = count - below
            if in_bucket <= 0:
                return upper
            return lower + (upper - lower) * (rank - below) / in_bucket
    return None


def pod_values(
    series: Iterable[RangeSeries], owners: Mapping[PodKey, W]
) -> dict[W, dict[float, dict[str, float]]]:
    """Per workload, per timestamp, each of its pods' value (per-pod telemetry is kept per
    pod, not summed)."""
    out: dict[W, dict[float, dict[str, float]]] = {}
    for s in series:
        owner = _owner(s, owners)
        if owner is None or not s.samples:  # all its samples NaN: no time to keep
            continue
        pod = s.labels.get("pod", "")
        by_time = out.setdefault(owner, {})
        for t, v in s.samples:
            by_time.setdefault(t, {})[pod] = v
    return out
