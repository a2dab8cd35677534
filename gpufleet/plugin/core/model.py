"""What the plugin knows about the node and what it advertises: plain, immutable data.

Discovery (the NVML adapter) produces `NodeGpus`; `devices.py` turns it and the config
into `AdvertisedDevice`s per resource; allocation, preferred allocation and health all
work on these records. Pure: no I/O.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Health(StrEnum):
    """v1beta1 `Device.health` values."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"


@dataclass(frozen=True, slots=True, kw_only=True)
class MigAttributes:
    """NVML's `nvmlDeviceGetAttributes` of a MIG device: what GFD labels it with."""

    memory_mb: int  # NVML's memorySizeMB (MiB in fact)
    multiprocessors: int
    gi_slices: int
    ci_slices: int
    copy_engines: int
    decoders: int
    encoders: int
    jpegs: int
    ofas: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MigInfo:
    """One MIG device (GPU instance + its compute instance) on a MIG-enabled GPU."""

    uuid: str  # "MIG-<uuid>"
    profile: str  # NVIDIA's profile name, e.g. "1g.10gb" (suffixes like "+me" kept)
    gi_id: int
    ci_id: int
    index: int  # MIG device index on the parent (NVIDIA's "i:j" index uses it)
    memory_mib: int
    # Minors of /dev/nvidia-caps/nvidia-cap<minor> granting access to its GPU instance and
    # compute instance, in that order; () when the host does not say (no mig-minors file).
    cap_minors: tuple[int, ...] = ()
    attributes: MigAttributes | None = None  # None: NVML did not answer


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuInfo:
    """One physical GPU as discovered."""

    index: int  # NVML index
    uuid: str  # "GPU-<uuid>"
    minor: int  # /dev/nvidia<minor>
    name: str  # product name, e.g. "NVIDIA H100 80GB HBM3"
    memory_mib: int
    numa_node: int | None  # None: unknown / no NUMA affinity
    mig_enabled: bool
    migs: tuple[MigInfo, ...] = ()
    compute_capability: tuple[int, int] = (0, 0)
    mig_capable: bool = False  # NVML reports a MIG mode (GFD's nvidia.com/mig.capable)
    pci_bus_id: str = ""  # NVML's, e.g. "00000000:18:00.0"; "" when unknown


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeGpus:
    """Discovery result. `links[(i, j)]` (i < j, NVML indexes) scores how well two GPUs
    talk: higher is better (e.g. NVLink count * 10, else by PCIe distance: same switch 3,
    same host bridge 2, same NUMA node 1, across sockets 0). Missing pairs score 0."""

    gpus: tuple[GpuInfo, ...]
    driver_version: str = ""
    cuda_driver_version: int = 0
    links: Mapping[tuple[int, int], int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class AdvertisedDevice:
    """One device ID a resource advertises to the kubelet."""

    id: str  # the v1beta1 Device.ID: "GPU-..", "MIG-..", or "<id>::<replica>"
    resource: str  # e.g. "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared"
    gpu: GpuInfo  # the physical GPU (the parent, for a MIG device)
    mig: MigInfo | None = None
    replica: int | None = None  # time-slicing / MPS replica number

    @property
    def base_id(self) -> str:
        """The ID without the replica suffix: the GPU or MIG UUID."""
        return self.mig.uuid if self.mig else self.gpu.uuid

    @property
    def numa_node(self) -> int | None:
        return self.gpu.numa_node
