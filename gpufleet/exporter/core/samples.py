"""What one collection saw: plain, immutable data handed from the adapters to the pure core.

Values are kept in dcgm-exporter's legacy units (MHz, mJ, %, MiB, MB/s); the 4.9 profile
converts at render time. A field missing from `values` was not available (NotSupported,
blank, lost GPU): it is omitted, never emitted as a sentinel.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.exporter.core.health import Incident


@dataclass(frozen=True, slots=True, kw_only=True)
class MigInstance:
    """One MIG GPU instance (with its single compute instance) on a MIG-enabled GPU."""

    profile: str  # NVIDIA's profile name, e.g. "1g.10gb"
    gi_id: int  # NVML GPU instance id: dcgm's GPU_I_ID label
    ci_id: int
    uuid: str  # "MIG-<uuid>", the device ID the device plugin advertises
    dcgm_id: int  # DCGM's GPU-instance entity id: what `-d i:<range>` names (selection)


@dataclass(frozen=True, slots=True, kw_only=True)
class Entity:
    """A thing metrics describe: a whole GPU, or one MIG instance of it (dcgm's flex mode)."""

    gpu: int  # NVML index of the (parent) GPU: the `gpu` label, and `device="nvidia<gpu>"`
    uuid: str  # parent GPU UUID, "GPU-<uuid>"
    pci_bus_id: str  # "00000000:8D:00.0"
    model_name: str  # nvmlDeviceGetName, e.g. "NVIDIA H100 80GB HBM3"
    mig: MigInstance | None = None

    @property
    def key(self) -> tuple[int, int | None]:
        """Stable identity: (gpu index, GPU instance id or None)."""
        return (self.gpu, self.mig.gi_id if self.mig else None)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessSample:
    """One compute process on an entity, from NVML's per-process APIs."""

    pid: int
    used_memory_bytes: int | None = None  # nvmlDeviceGetComputeRunningProcesses
    sm_util_percent: float | None = None  # nvmlDeviceGetProcessUtilization, latest sample


@dataclass(frozen=True, slots=True, kw_only=True)
class EntitySample:
    """Everything collected for one entity in one collection."""

    entity: Entity
    values: Mapping[str, float]  # legacy DCGM field name -> value in legacy units
    labels: Mapping[str, str] = field(default_factory=dict)  # `label` fields, e.g. serial
    # NVML's compute processes: () when it said there are none, None when it could not tell
    # (per-process calls unsupported, failing or not made), so nobody mistakes "unknown"
    # for "idle".
    processes: tuple[ProcessSample, ...] | None = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class XidState:
    """XID history of one GPU since the exporter started."""

    last: int  # last XID seen: DCGM_FI_DEV_XID_ERRORS
    counts: Mapping[int, int]  # xid -> events seen: gpufleet_xid_errors_total
    # (monotonic seconds, xid) of the latest events, oldest first, at most
    # windows.HISTORY_MAX_ENTRIES: what DCGM_EXP_XID_ERRORS_COUNT counts over its window.
    recent: tuple[tuple[float, int], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSample:
    """One collection of the whole node. Partial by design: a lost GPU is simply absent
    from `entities` and counted in `errors`; everything else is still reported."""

    entities: tuple[EntitySample, ...]
    node_labels: Mapping[str, str] = field(default_factory=dict)  # e.g. DCGM_FI_DRIVER_VERSION
    xid: Mapping[int, XidState] = field(default_factory=dict)  # by gpu index
    errors: Mapping[str, int] = field(default_factory=dict)  # error kind -> count this round
    # Monotonic seconds the collection started: where the DCGM_EXP_* count windows end.
    collected_monotonic: float = 0.0
    # gpu index -> (monotonic seconds, clock event reasons bitmask) of recent collections,
    # oldest first; only when DCGM_EXP_CLOCK_EVENTS_COUNT is selected.
    clock_events: Mapping[int, tuple[tuple[float, int], ...]] = field(default_factory=dict)
    # Per physical GPU, whatever -d selects (as dcgm-exporter's health and P2P collectors),
    # only when DCGM_EXP_GPU_HEALTH_STATUS or DCGM_EXP_P2P_STATUS is selected: every GPU
    # discovered as read this round (a lost one with no values), its health by watch
    # (`health.gpu_health`), and NVLink P2P status to each peer (NVML_P2P_STATUS_*).
    gpus: Mapping[int, EntitySample] = field(default_factory=dict)
    health: Mapping[int, Mapping[str, Incident]] = field(default_factory=dict)
    p2p: Mapping[int, Mapping[int, int]] = field(default_factory=dict)
    # The GPUs -d reports that are lost this round, with no values: their XID series stay
    # (a GPU that fell off the bus raised XID 79, which is what must show).
    lost: tuple[EntitySample, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PodRef:
    """A container that holds (part of) an entity, as the kubelet reports it."""

    namespace: str
    name: str
    container: str
    uid: str | None = None  # from the kubelet checkpoint (else the API); None: not known
    # Pod labels from the API (--kubernetes-enable-pod-labels), sanitised and sorted: served
    # after the CSV's label rows, as dcgm-exporter serves them among its labels.
    labels: tuple[tuple[str, str], ...] = ()
    # More attributes, sorted among pod/namespace/container: dra_* for a DRA claim.
    attributes: tuple[tuple[str, str], ...] = ()


GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
SPLIT_FIELDS = frozenset({GPU_UTIL, FB_USED})
"""Fields NVML can split per process, so each pod sharing an entity can get its own value."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PodShare:
    """One pod's view of an entity.

    `values` holds the pod's own SPLIT_FIELDS when several pods share the entity and NVML
    told each one's part; empty otherwise. `gpu_share` is the part of the physical GPU
    attributed to the pod (its part of the entity times the entity's part of the GPU), on
    the pod's last container only; None where not attributed.
    """

    pod: PodRef
    values: Mapping[str, float] = field(default_factory=dict)
    vgpu: str | None = None  # time-slicing replica index(es), for --kubernetes-virtual-gpus
    gpu_share: float | None = None


# Entity.key -> the pods holding that entity, sorted by (namespace, name, container).
PodView = Mapping[tuple[int, int | None], tuple[PodShare, ...]]
