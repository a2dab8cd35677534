"""What the live loop counts for its self-metrics: the controller writes, `metrics` reads."""

from collections import Counter
from dataclasses import dataclass, field


@dataclass(slots=True)
class Stats:
    """What the self-metrics report; the controller writes, the metrics endpoint reads."""

    ticks: int = 0
    decisions: Counter[tuple[str, str]] = field(default_factory=Counter)  # (workload, reason)
    errors: Counter[str] = field(default_factory=Counter)  # kind
    desired: dict[str, int] = field(default_factory=dict)
    current: dict[str, int] = field(default_factory=dict)
    ready: dict[str, int] = field(default_factory=dict)  # serving: Ready and not terminating
    max_replicas: dict[str, int] = field(default_factory=dict)
    placeholders: dict[str, int] = field(default_factory=dict)  # placeholder pods kept
    buffers: dict[str, int] = field(default_factory=dict)  # CapacityBuffer chunks kept
    missing_metrics: dict[str, bool] = field(default_factory=dict)  # held on missing data
    queries: int = 0
    query_seconds: float = 0.0
    late_queries: int = 0  # still asking when a tick stopped waiting (`prom_gather`)
    backfill_queries: int = 0  # for times a workload lacked (`prom_gather`)
    clock_lead_seconds: float = 0.0  # taken off this machine's clock (`prom_clock`)
    busy_steps: int = 0  # workload steps still running when a tick stopped waiting
    reconcile_seconds: float = 0.0
    leader: bool = False

    def forget_all_but(self, names: set[str]) -> None:
        """Drop the series of workloads no longer run (deleted, or their spec now bad): a
        deleted one's missing-metrics or pinned-at-max series kept its alert firing."""
        for per_workload in (
            self.desired,
            self.current,
            self.ready,
            self.max_replicas,
            self.placeholders,
            self.buffers,
            self.missing_metrics,
        ):
            for name in per_workload.keys() - names:
                del per_workload[name]
        for key in [k for k in self.decisions if k[0] not in names]:
            del self.decisions[key]
