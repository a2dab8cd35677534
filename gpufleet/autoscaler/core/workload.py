"""A workload's scaling configuration: bounds, SLO, GPU shape and HPA-style behavior.

The behavior types mirror `autoscaling/v2` `HorizontalPodAutoscalerBehavior` field for field,
with the same defaults, so an HPA spec maps onto them one to one and the `hpa` policy can
reproduce the controller exactly.
"""

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple


class RateKind(StrEnum):
    PODS = "Pods"
    PERCENT = "Percent"


class SelectPolicy(StrEnum):
    MAX = "Max"
    MIN = "Min"
    DISABLED = "Disabled"


class RatePolicy(NamedTuple):
    kind: RateKind
    value: int
    period_seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalingRules:
    """`HPAScalingRules`; `tolerance` None means the controller's flag (0.1)."""

    stabilization_window_seconds: float
    policies: tuple[RatePolicy, ...]
    select_policy: SelectPolicy = SelectPolicy.MAX
    tolerance: float | None = None


def default_scale_up() -> ScalingRules:
    """HPA default: no window; the larger of +4 pods or +100% per 15 s."""
    return ScalingRules(
        stabilization_window_seconds=0,
        policies=(RatePolicy(RateKind.PODS, 4, 15), RatePolicy(RateKind.PERCENT, 100, 15)),
    )


def default_scale_down() -> ScalingRules:
    """HPA default: 300 s window; up to -100% per 15 s."""
    return ScalingRules(
        stabilization_window_seconds=300, policies=(RatePolicy(RateKind.PERCENT, 100, 15),)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Behavior:
    scale_up: ScalingRules = field(default_factory=default_scale_up)
    scale_down: ScalingRules = field(default_factory=default_scale_down)


class ShapeKind(StrEnum):
    GPU = "gpu"  # whole GPUs (`nvidia.com/gpu`)
    MIG = "mig"  # one MIG slice (`nvidia.com/mig-<profile>`)
    SHARED = "shared"  # one time-sliced or MPS share of a GPU


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuShape:
    """What one replica occupies."""

    kind: ShapeKind = ShapeKind.GPU
    gpus: int = 1  # whole GPUs per replica (tensor parallelism); kind GPU only
    mig_profile: str = ""  # e.g. "1g.10gb"; kind MIG only
    shares_per_gpu: int = 1  # time-slicing replicas or MPS clients per GPU; kind SHARED only


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadConfig:
    name: str
    min_replicas: int = 1  # 0 allows scale to zero (activation brings it back)
    max_replicas: int = 100
    slo_ttft_seconds: float = 2.0
    shape: GpuShape = field(default_factory=GpuShape)
    behavior: Behavior = field(default_factory=Behavior)
    cold_start_seconds: float = 60.0  # expected replica start: image, weights, warm-up
    node_provision_seconds: float = 180.0  # expected new-node boot, used for lead time
    # GPUs per node of the pool the replicas run on; 0 when unknown. A node bills all its
    # GPUs, so it tells which GPUs are idle on nodes paid for anyway.
    gpus_per_node: int = 0
    # Requests one replica runs at once (vLLM's --max-num-seqs); 0 when unknown. It tells a
    # replica whose batch slots were full from one that only queued for its prefill.
    batch_slots: int = 0
    # The share of requests that must meet the TTFT SLO (`slo.targetAttainment`), the one
    # knob of the gpufleet policy (`knob`); None keeps the policy's own settings, as before.
    target_attainment: float | None = None

    @property
    def node_lead_seconds(self) -> float:
        """How long before capacity on a new node serves: its boot plus a cold start."""
        return self.node_provision_seconds + self.cold_start_seconds

    def clamp(self, replicas: int) -> int:
        return max(self.min_replicas, min(self.max_replicas, replicas))
