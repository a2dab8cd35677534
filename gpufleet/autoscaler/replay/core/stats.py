"""Turning a finished run's raw samples into a `RunResult`: percentiles, hours, timeline.

Pure. Percentiles are numpy's default (linear interpolation). GPU-hours arrive as
GPU-seconds from the cluster model.
"""

import numpy as np

from gpufleet.autoscaler.core.workload import WorkloadConfig
from gpufleet.autoscaler.replay.core.result import DecisionRecord, RunResult, Timeline
from gpufleet.autoscaler.replay.core.trace import Trace


class TimelineBuilder:
    """Collects (t, desired, ready, replicas, nodes, queue_depth) points in time order."""

    def __init__(self) -> None:
        self.points: list[tuple[float, int, int, int, int, int]] = []

    def sample(self, point: tuple[float, int, int, int, int, int]) -> None:
        if self.points and self.points[-1][0] >= point[0]:
            self.points[-1] = point  # same instant: keep the later state
        else:
            self.points.append(point)

    def build(self, arrival_seconds: np.ndarray, step_seconds: float) -> Timeline:
        """The timeline; arrival_rate at t is the arrivals in [t, t + step) per second."""
        cols = np.array(self.points, dtype=np.float64).reshape(-1, 6)
        t = cols[:, 0]
        edges = np.append(t, t[-1] + step_seconds) if len(t) else np.array([0.0])
        counts = np.histogram(arrival_seconds, bins=edges)[0] if len(t) else np.array([])
        widths = np.diff(edges)
        rate = np.divide(counts, widths, out=np.zeros(len(t)), where=widths > 0)
        as_int = {i: cols[:, i].astype(np.int64) for i in range(1, 6)}
        return Timeline(
            t=t,
            arrival_rate=rate,
            desired=as_int[1],
            ready=as_int[2],
            replicas=as_int[3],
            nodes=as_int[4],
            queue_depth=as_int[5],
        )


def feasible(
    prompt_tokens: np.ndarray, *, prefill_tokens_per_second: float, slo_seconds: float
) -> np.ndarray:
    """Per request: can one replica, idle, prefill its prompt within the SLO? A request that
    cannot misses under any schedule, so attainment is also reported over those that can."""
    return prompt_tokens / prefill_tokens_per_second <= slo_seconds


def build_result(
    *,
    policy: str,
    trace: Trace,
    workload: WorkloadConfig,
    prefill_tokens_per_second: float,
    ttft: np.ndarray,
    e2e: np.ndarray,
    replica_gpu_seconds: float,
    node_gpu_seconds: float,
    scale_events: int,
    node_events: int,
    timeline: Timeline,
    decisions: tuple[DecisionRecord, ...],
) -> RunResult:
    """Summarise one run; `ttft` and `e2e` are per request in trace order, all finite."""
    slo = workload.slo_ttft_seconds
    within = ttft <= slo
    can = feasible(
        trace.prompt_tokens, prefill_tokens_per_second=prefill_tokens_per_second, slo_seconds=slo
    )
    return RunResult(
        policy=policy,
        trace=trace.name,
        requests=len(ttft),
        slo_ttft_seconds=slo,
        slo_attainment=float(np.mean(within)),
        feasible_requests=int(can.sum()),
        feasible_attainment=float(np.mean(within[can])) if can.any() else 1.0,
        ttft_p50_seconds=float(np.percentile(ttft, 50)),
        ttft_p99_seconds=float(np.percentile(ttft, 99)),
        e2e_p50_seconds=float(np.percentile(e2e, 50)),
        e2e_p99_seconds=float(np.percentile(e2e, 99)),
        replica_gpu_hours=replica_gpu_seconds / 3600.0,
        node_gpu_hours=node_gpu_seconds / 3600.0,
        scale_events=scale_events,
        node_events=node_events,
        ttft_seconds=ttft,
        e2e_seconds=e2e,
        timeline=timeline,
        decisions=decisions,
    )
