"""What one container gets for the device IDs the kubelet allocated to it.

The container runtime (nvidia-container-toolkit or a CDI-aware runtime) reads exactly these
env vars, mounts, annotations and CDI names, so they follow NVIDIA's plugin
(`internal/plugin/server.go`, v0.17-v0.20) to the letter:

- `envvar`: `NVIDIA_VISIBLE_DEVICES=<ids>`; `volume-mounts`: the env var names
  `/var/run/nvidia-container-devices` and `/dev/null` is mounted at `<that dir>/<id>` per device;
  `cdi-annotations`: `<prefix>nvidia-device-plugin_<response id>` = comma list of
  `k8s.device-plugin.nvidia.com/gpu=<id>`; `cdi-cri`: the same names in `cdi_devices`.
  With only CDI strategies there is no NVIDIA_VISIBLE_DEVICES.
- IDs are UUIDs, or indexes (`i`, `i:j` for MIG) under deviceIDStrategy=index, in the kubelet's
  request order; replica suffixes are stripped and duplicates dropped first (NVIDIA's
  `server_test`: `[foo, bar, foo]` gives `foo,bar`).
- Bad requests get v0.20's texts: `invalid allocation request for "<resource>": invalid
  request: unknown device: <id>` naming the first unknown ID only (the kubelet may send
  thousands, and the text travels in gRPC metadata), checked before `maximum request size
  for shared resources is 1; found <n>`.
- GDS/MOFED/GDRCopy: `NVIDIA_GDS`/`NVIDIA_MOFED`/`NVIDIA_GDRCOPY=enabled` whenever enabled,
  whatever the strategies; with a CDI strategy also `k8s.device-plugin.nvidia.com/{gds,mofed,
  gdrcopy}=all`, but only for those whose spec exists (`AllocateOptions.cdi_gated`), as NVIDIA
  names only the specs it generated.
- MPS: `CUDA_MPS_PIPE_DIRECTORY=/mps/<resource>/pipe`, mounted from `<mps root>/<resource>/pipe`,
  and `/dev/shm` from `<mps root>/shm`.
- IMEX channels (those configured and present, `AllocateOptions.imex_channels`):
  `NVIDIA_IMEX_CHANNELS=<ids>` with envvar, `/dev/null` mounted at `<that dir>/imex/<id>` with
  volume-mounts, `k8s.device-plugin.nvidia.com/imex-channel=<id>` CDI devices with a CDI
  strategy, and `/dev/nvidia-caps-imex-channels/channel<id>` device specs under passDeviceSpecs.
- Device specs: the control devices, then per physical device `/dev/nvidia<minor>` and, for a
  MIG device, the `/dev/nvidia-caps/nvidia-cap<minor>` nodes of its GPU and compute instance.

Ours, not NVIDIA's:
- the response id is derived from the device list (NVIDIA uses a random UUID), so the same
  request always gets the same answer (STYLE §5);
- under deviceIDStrategy=index the indexes keep the request order too (NVIDIA's follow Go map
  iteration);
- under MPS the container also gets `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` and
  `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`, the per-client forms of the defaults NVIDIA's MPS daemon
  sets (`100/replicas`, `<total MiB/replicas>M`), so the limits hold even when the daemon's
  defaults were not applied. Ordinals in the memory limit are CUDA's inside the container, i.e.
  positions in the visible list;
- the control devices NVIDIA passes only when they exist on the host come from
  `AllocateOptions.control_devices`, and the IMEX channels from `imex_channels`: checking the
  filesystem is the adapters' job. A MIG device whose capability minors the host did not list
  gets its parent's node only.

Pure: no I/O. Bad requests raise `AllocationError`; nothing else can fail here.
"""

import hashlib
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from gpufleet.core.device_ids import is_replica
from gpufleet.plugin.core.model import AdvertisedDevice

VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
VOLUME_MOUNTS_ROOT = "/var/run/nvidia-container-devices"
VOLUME_MOUNTS_HOST_PATH = "/dev/null"
CDI_VENDOR = "k8s.device-plugin.nvidia.com"
CDI_ANNOTATION_PLUGIN = "nvidia-device-plugin"
DEFAULT_CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
CONTROL_DEVICES = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
)
MPS_CONTAINER_ROOT = "/mps"
IMEX_CHANNELS_ENV = "NVIDIA_IMEX_CHANNELS"
IMEX_CHANNELS_DIR = "/dev/nvidia-caps-imex-channels"
MIG_CAPS_DIR = "/dev/nvidia-caps"
SHARED_REQUEST_TOO_LARGE = "maximum request size for shared resources is 1"
# An unknown ID is quoted up to this length: gRPC refuses status details over its metadata
# limit (8 KiB by default), and a kubelet-supplied ID is not ours to trust.
_MAX_QUOTED_ID = 256


class DeviceListStrategy(StrEnum):
    ENVVAR = "envvar"
    VOLUME_MOUNTS = "volume-mounts"
    CDI_ANNOTATIONS = "cdi-annotations"
    CDI_CRI = "cdi-cri"


class DeviceIdStrategy(StrEnum):
    UUID = "uuid"
    INDEX = "index"


CDI_STRATEGIES = frozenset({DeviceListStrategy.CDI_ANNOTATIONS, DeviceListStrategy.CDI_CRI})
CDI_KIND = f"{CDI_VENDOR}/gpu"  # the kind of the CDI devices Allocate names
CDI_IMEX_KIND = f"{CDI_VENDOR}/imex-channel"


class Mount(NamedTuple):
    container_path: str
    host_path: str
    read_only: bool


class DeviceSpec(NamedTuple):
    container_path: str
    host_path: str
    permissions: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MpsOptions:
    """MPS sharing of the resource being allocated."""

    root: str  # --mps-root on the host, e.g. /run/nvidia/mps
    replicas: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocateOptions:
    """What `allocate` needs from the plugin config, for one advertised resource."""

    resource: str  # the advertised name, e.g. "nvidia.com/gpu.shared"
    device_list_strategies: tuple[DeviceListStrategy, ...] = (DeviceListStrategy.ENVVAR,)
    device_id_strategy: DeviceIdStrategy = DeviceIdStrategy.UUID
    pass_device_specs: bool = False
    dev_root: str = "/"
    control_devices: tuple[str, ...] = CONTROL_DEVICES
    cdi_annotation_prefix: str = DEFAULT_CDI_ANNOTATION_PREFIX
    fail_requests_greater_than_one: bool = False
    mps: MpsOptions | None = None
    gds_enabled: bool = False
    mofed_enabled: bool = False
    gdrcopy_enabled: bool = False
    imex_channels: tuple[str, ...] = ()  # IDs ("0") of the IMEX channels present on the host
    # Which of gds/mofed/gdrcopy (enabled) have a CDI spec `<kind>=all` to name.
    cdi_gated: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerAllocation:
    """One `ContainerAllocateResponse`, as plain data."""

    envs: dict[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    device_specs: tuple[DeviceSpec, ...] = ()
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()


class AllocationError(ValueError):
    """The kubelet asked for something this plugin cannot give; the message is NVIDIA's."""


def allocate(
    request_ids: Sequence[str],
    devices: Mapping[str, AdvertisedDevice],
    options: AllocateOptions,
) -> ContainerAllocation:
    """Build the container's allocation for `request_ids` (advertised IDs of one resource).

    Raises AllocationError for an unknown ID, then for more than one replica when
    failRequestsGreaterThanOne is set, in that order, as NVIDIA v0.20 does.
    """
    invalid = f'invalid allocation request for "{options.resource}": invalid request: '
    unknown = next((i for i in request_ids if i not in devices), None)
    if unknown is not None:
        shown = unknown if len(unknown) <= _MAX_QUOTED_ID else unknown[:_MAX_QUOTED_ID] + "..."
        raise AllocationError(f"{invalid}unknown device: {shown}")
    if (
        options.fail_requests_greater_than_one
        and len(request_ids) > 1
        and any(is_replica(i) for i in request_ids)
    ):
        raise AllocationError(f"{invalid}{SHARED_REQUEST_TOO_LARGE}; found {len(request_ids)}")
    physical = _physical(devices[i] for i in request_ids)
    visible = [visible_id(d, options.device_id_strategy) for d in physical]
    strategies = set(options.device_list_strategies)
    envs: dict[str, str] = {}
    mounts: list[Mount] = []
    annotations: dict[str, str] = {}
    cdi_names = _cdi_names(visible, options) if strategies & CDI_STRATEGIES else []
    if DeviceListStrategy.CDI_ANNOTATIONS in strategies:
        key = f"{options.cdi_annotation_prefix}{CDI_ANNOTATION_PLUGIN}_{_response_id(request_ids)}"
        annotations[key] = ",".join(cdi_names)
    if DeviceListStrategy.ENVVAR in strategies:
        envs[VISIBLE_DEVICES_ENV] = ",".join(visible)
        if options.imex_channels:
            envs[IMEX_CHANNELS_ENV] = ",".join(options.imex_channels)
    if DeviceListStrategy.VOLUME_MOUNTS in strategies:
        # Overrides the envvar list when both are set, as NVIDIA does.
        envs[VISIBLE_DEVICES_ENV] = VOLUME_MOUNTS_ROOT
        mounts += [
            Mount(posixpath.join(VOLUME_MOUNTS_ROOT, i), VOLUME_MOUNTS_HOST_PATH, False)
            for i in visible
        ]
        mounts += [
            Mount(posixpath.join(VOLUME_MOUNTS_ROOT, "imex", c), VOLUME_MOUNTS_HOST_PATH, False)
            for c in options.imex_channels
        ]
    envs.update(_extra_envs(options))
    if options.mps:
        mps_envs, mps_mounts = _mps(physical, options.resource, options.mps)
        envs.update(mps_envs)
        mounts += mps_mounts
    specs = _device_specs(physical, options) if options.pass_device_specs else ()
    return ContainerAllocation(
        envs=envs,
        mounts=tuple(mounts),
        device_specs=specs,
        annotations=annotations,
        cdi_devices=tuple(cdi_names) if DeviceListStrategy.CDI_CRI in strategies else (),
    )


def _physical(devices: Iterable[AdvertisedDevice]) -> list[AdvertisedDevice]:
    """One device per GPU/MIG UUID (replicas collapse), first occurrence first."""
    unique: dict[str, AdvertisedDevice] = {}
    for device in devices:
        unique.setdefault(device.base_id, device)
    return list(unique.values())


def visible_id(device: AdvertisedDevice, strategy: DeviceIdStrategy) -> str:
    """The ID the runtime sees for a physical device: its UUID, or `i` / `i:j` (MIG) under
    deviceIDStrategy=index. Also the device's name in the CDI spec."""
    if strategy == DeviceIdStrategy.UUID:
        return device.base_id
    if device.mig:
        return f"{device.gpu.index}:{device.mig.index}"
    return str(device.gpu.index)


def _cdi_names(visible: list[str], options: AllocateOptions) -> list[str]:
    names = [f"{CDI_KIND}={i}" for i in visible]
    names += [f"{CDI_IMEX_KIND}={c}" for c in options.imex_channels]
    names += [f"{CDI_VENDOR}/{mode}=all" for mode in options.cdi_gated]
    return names


def _response_id(request_ids: Sequence[str]) -> str:
    """A UUID-shaped id from the request, so `nvidia-device-plugin_<id>` stays within CDI's
    63-character annotation name limit and equal requests get equal answers."""
    digest = hashlib.sha256(",".join(sorted(request_ids)).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _extra_envs(options: AllocateOptions) -> dict[str, str]:
    flags = (
        ("NVIDIA_GDS", options.gds_enabled),
        ("NVIDIA_MOFED", options.mofed_enabled),
        ("NVIDIA_GDRCOPY", options.gdrcopy_enabled),
    )
    return {name: "enabled" for name, enabled in flags if enabled}


def _mps(
    physical: list[AdvertisedDevice], resource: str, mps: MpsOptions
) -> tuple[dict[str, str], list[Mount]]:
    pipe_dir = posixpath.join(MPS_CONTAINER_ROOT, resource, "pipe")
    envs = {
        "CUDA_MPS_PIPE_DIRECTORY": pipe_dir,
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(100 // mps.replicas),
    }
    # none for a GPU whose memory NVML did not say (0), as NVIDIA's MPS daemon skips it
    limits = [
        f"{ordinal}={d.gpu.memory_mib // mps.replicas}M"
        for ordinal, d in enumerate(physical)
        if d.gpu.memory_mib
    ]
    if limits:
        envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(limits)
    mounts = [
        Mount(pipe_dir, posixpath.join(mps.root, resource, "pipe"), False),
        Mount("/dev/shm", posixpath.join(mps.root, "shm"), False),
    ]
    return envs, mounts


def device_nodes(device: AdvertisedDevice) -> tuple[str, ...]:
    """The device nodes a container needs for one physical device: `/dev/nvidia<minor>` of
    the GPU (a MIG device's parent), then a MIG device's GPU- and compute-instance
    capability nodes when known."""
    caps = device.mig.cap_minors if device.mig else ()
    return (
        f"/dev/nvidia{device.gpu.minor}",
        *(posixpath.join(MIG_CAPS_DIR, f"nvidia-cap{minor}") for minor in caps),
    )


def imex_channel_node(channel: str) -> str:
    """An IMEX channel's device node, e.g. `/dev/nvidia-caps-imex-channels/channel0`."""
    return posixpath.join(IMEX_CHANNELS_DIR, f"channel{channel}")


def _device_specs(
    physical: list[AdvertisedDevice], options: AllocateOptions
) -> tuple[DeviceSpec, ...]:
    """Control devices first, then `device_nodes` per physical device (each node once), then
    the IMEX channels, all with the host path under the dev root."""
    paths = dict.fromkeys(options.control_devices)
    for device in physical:
        paths.update(dict.fromkeys(device_nodes(device)))
    paths.update(dict.fromkeys(imex_channel_node(c) for c in options.imex_channels))
    return tuple(
        DeviceSpec(p, posixpath.normpath(posixpath.join(options.dev_root, p.lstrip("/"))), "rw")
        for p in paths
    )
