"""What one simulated run produces: the table row, the timelines and the latency samples."""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeline:
    """Sampled every `step` seconds of simulated time, aligned arrays."""

    t: np.ndarray  # seconds since the trace start
    arrival_rate: np.ndarray  # requests/s over the step (the demand)
    desired: np.ndarray  # the policy's last desired replicas
    ready: np.ndarray  # replicas serving
    replicas: np.ndarray  # replicas holding a GPU (starting, ready or draining)
    nodes: np.ndarray  # nodes billed (provisioning or up)
    queue_depth: np.ndarray  # requests waiting


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionRecord:
    t: float
    desired: int
    reason: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class OracleBound:
    """What the oracle's row alone carries: the bound it started from, and how its replay
    did on the requests it is judged on (`gpufleet.autoscaler.replay.core.oracle` says why)."""

    replica_gpu_hours: float
    node_gpu_hours: float
    judged_attainment: float  # requests after the warm-up whose prompt fits the SLO
    target_attainment: float  # what the replay was repaired towards

    @property
    def valid(self) -> bool:
        """Whether the replay met its own target: only then is it a yardstick (x oracle)."""
        return self.judged_attainment >= self.target_attainment


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    policy: str
    trace: str
    requests: int
    slo_ttft_seconds: float
    slo_attainment: float  # fraction of requests with TTFT <= SLO
    # Requests whose prompt one replica can prefill within the SLO (`stats.feasible`), and
    # the fraction of those within it: what no schedule can lose to prompt length alone.
    feasible_requests: int
    feasible_attainment: float
    ttft_p50_seconds: float
    ttft_p99_seconds: float
    e2e_p50_seconds: float
    e2e_p99_seconds: float
    replica_gpu_hours: float  # GPUs held by replicas, cold start and draining included
    node_gpu_hours: float  # billed: every node's GPUs from launch to removal
    scale_events: int  # changes of the desired replica count
    node_events: int  # node launches plus removals
    ttft_seconds: np.ndarray  # per request, trace order
    e2e_seconds: np.ndarray  # per request, trace order
    timeline: Timeline
    decisions: tuple[DecisionRecord, ...]
    knob: str = ""  # sweep: which setting was varied and its value, e.g. "target=70"
    oracle: OracleBound | None = None  # the oracle's run only
