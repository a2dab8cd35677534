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
    reconcile_seconds: float = 0.0
    leader: bool = False
