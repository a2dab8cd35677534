"""Which device IDs each resource advertises: MIG strategies and time-slicing/MPS replicas.

NVIDIA's k8s-device-plugin decides this in `internal/rm/device_map.go`; configs written for it
must advertise the same resource names and IDs here, because pods request those names and the
exporter joins on those IDs. The rules, all NVIDIA's:

- MIG `none`: every GPU is `nvidia.com/gpu`, MIG-enabled ones included.
- MIG `single`: MIG devices become `nvidia.com/gpu`. A node mixing MIG-enabled and MIG-disabled
  GPUs, or with more than one MIG profile, is an error. A node with no MIG-enabled GPU
  advertises its GPUs as under `none` (NVIDIA's builder finds no MIG devices and keeps the GPUs).
- MIG `mixed`: `nvidia.com/mig-<profile>` per profile, `+` replaced by `.`; other GPUs stay
  `nvidia.com/gpu`.
- A MIG-enabled GPU without MIG devices is an error under `single`; under `mixed` it is
  advertised as nothing and the other GPUs are served, with a warning (`mig_warnings`) for
  the daemon to log, as NVIDIA's `assertAllMigDevicesAreValid` does.
- Under `mixed` a MIG device whose compute instance is smaller than its GPU instance
  (`1c.2g.20gb`) is an error: NVIDIA has no resource pattern for those; `single`'s pattern
  (`*`) takes them.
- Sharing: each device of a shared resource is advertised `replicas` times as `<id>::<n>`;
  `renameByDefault` moves them to `<name>.shared`. MPS cannot share MIG devices.

Pure: no I/O. Errors raise `AdvertiseError` at startup; it must never guess a layout.
"""

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.core.device_ids import replica_id
from gpufleet.plugin.core.config import (
    MAX_RESOURCE_NAME_LENGTH,
    RESOURCE_PREFIX,
    SHARED_SUFFIX,
    SharingKind,
)
from gpufleet.plugin.core.model import AdvertisedDevice, GpuInfo, MigInfo, NodeGpus

GPU_RESOURCE = f"{RESOURCE_PREFIX}/gpu"
# MPS clients per GPU the MPS server accepts (reference §3): 48 from compute capability 7.5.
_MPS_MAX_CLIENTS = 48
_MPS_MAX_CLIENTS_BEFORE_7_5 = 16
# The name part of a resource must be a DNS subdomain, as the kubelet checks at registration.
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# nvidia-smi names a compute instance smaller than its GPU instance "<c>c.<g>g.<mem>gb".
_PARTIAL_COMPUTE_PROFILE = re.compile(r"^\d+c\.")


class MigStrategy(StrEnum):
    NONE = "none"
    SINGLE = "single"
    MIXED = "mixed"


@dataclass(frozen=True, slots=True, kw_only=True)
class SharingOptions:
    """`sharing.timeSlicing` or `sharing.mps` as NVIDIA applies it.

    `replicas` maps the unshared resource name (`nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`) to
    its replica count. NVIDIA parses but disables the per-resource `rename` and `devices`
    selectors, so every device of a listed resource is shared.
    """

    kind: SharingKind
    replicas: Mapping[str, int] = field(default_factory=dict)
    rename_by_default: bool = False

    def advertised_name(self, resource: str) -> str:
        """The name a shared resource is advertised under."""
        return resource + SHARED_SUFFIX if self.rename_by_default else resource


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceOptions:
    """What `advertise` needs from the plugin config."""

    mig_strategy: MigStrategy = MigStrategy.NONE
    sharing: SharingOptions | None = None


class AdvertiseError(ValueError):
    """The node's GPUs cannot be advertised under the configured strategy (a startup error)."""


def device_order(device: AdvertisedDevice) -> tuple[int, int, int]:
    """Stable sort key: GPU index, then MIG index, then replica number."""
    mig_index = device.mig.index if device.mig else -1
    replica = device.replica if device.replica is not None else -1
    return (device.gpu.index, mig_index, replica)


def mig_resource(profile: str) -> str:
    """NVIDIA's mixed-strategy resource for a MIG profile: `1g.10gb+me` -> `mig-1g.10gb.me`."""
    return f"{RESOURCE_PREFIX}/mig-{profile.replace('+', '.')}"


def advertise(node: NodeGpus, options: ResourceOptions) -> dict[str, tuple[AdvertisedDevice, ...]]:
    """Resource name -> its devices, names sorted, devices in `device_order`.

    Raises AdvertiseError naming the offending GPU, profile or resource; the caller exits
    non-zero, as NVIDIA's plugin does.
    """
    plain = _unshared(node, options.mig_strategy)
    shared = _share(plain, options.sharing) if options.sharing else plain
    for name in shared:
        _check_resource_name(name)
    return {name: tuple(sorted(shared[name], key=device_order)) for name in sorted(shared)}


def health_groups(devices: Iterable[AdvertisedDevice]) -> dict[str, tuple[str, ...]]:
    """Physical GPU UUID -> every advertised ID on it (replicas, MIG devices, their replicas).

    A failing GPU takes all of these down together; NVIDIA marks only one of them (#1929).
    """
    by_gpu: dict[str, list[AdvertisedDevice]] = {}
    for device in devices:
        by_gpu.setdefault(device.gpu.uuid, []).append(device)
    return {
        uuid: tuple(d.id for d in sorted(group, key=device_order))
        for uuid, group in sorted(by_gpu.items(), key=lambda item: item[1][0].gpu.index)
    }


def _unshared(node: NodeGpus, strategy: MigStrategy) -> dict[str, list[AdvertisedDevice]]:
    if strategy == MigStrategy.NONE:
        return _group(_whole(gpu, GPU_RESOURCE) for gpu in node.gpus)
    _check_mig_configured(node.gpus, strategy)
    whole = [gpu for gpu in node.gpus if not gpu.mig_enabled]
    migs = [(gpu, mig) for gpu in node.gpus if gpu.mig_enabled for mig in gpu.migs]
    if strategy == MigStrategy.SINGLE:
        _check_single(whole, migs)
        return _group(
            [_whole(gpu, GPU_RESOURCE) for gpu in whole]
            + [_slice(gpu, mig, GPU_RESOURCE) for gpu, mig in migs]
        )
    return _group(
        [_whole(gpu, GPU_RESOURCE) for gpu in whole]
        + [_slice(gpu, mig, mig_resource(mig.profile)) for gpu, mig in migs]
    )


def mig_warnings(node: NodeGpus, options: ResourceOptions) -> tuple[str, ...]:
    """What `advertise` leaves out without failing: under `mixed`, each MIG-enabled GPU
    with no MIG devices (NVIDIA's warning text, naming the GPU's UUID too)."""
    if options.mig_strategy != MigStrategy.MIXED:
        return ()
    return tuple(
        f"device {gpu.index} ({gpu.uuid}) has no MIG devices configured: it is not advertised"
        for gpu in node.gpus
        if gpu.mig_enabled and not gpu.migs
    )


def _check_mig_configured(gpus: Iterable[GpuInfo], strategy: MigStrategy) -> None:
    single = strategy == MigStrategy.SINGLE
    for gpu in gpus:
        # `single` needs every MIG-enabled GPU configured; `mixed` skips it (mig_warnings).
        if gpu.mig_enabled and not gpu.migs and single:
            raise AdvertiseError(
                "invalid MIG configuration: at least one device with migEnabled=true was not "
                f"configured correctly: device {gpu.index} ({gpu.uuid}) has no MIG devices "
                "configured"
            )
        for mig in gpu.migs if gpu.mig_enabled else ():
            if not single and _PARTIAL_COMPUTE_PROFILE.match(mig.profile):
                raise AdvertiseError(
                    f"MIG profile {mig.profile!r} on GPU {gpu.index} does not match any resource "
                    "patterns: only MIG devices whose compute instance spans the whole GPU "
                    "instance can be advertised"
                )


def _check_single(whole: list[GpuInfo], migs: list[tuple[GpuInfo, MigInfo]]) -> None:
    if whole and migs:
        raise AdvertiseError(
            "mig-strategy=single: all devices on the node must be configured with the same "
            f"migEnabled value; MIG disabled on GPU {', '.join(str(g.index) for g in whole)}"
        )
    profiles = sorted({mig.profile for _, mig in migs})
    if len(profiles) > 1:
        raise AdvertiseError(
            "mig-strategy=single: invalid MIG configuration: more than one MIG device type "
            f"present on node ({', '.join(profiles)}); use mig-strategy=mixed"
        )


def _share(
    plain: dict[str, list[AdvertisedDevice]], sharing: SharingOptions
) -> dict[str, list[AdvertisedDevice]]:
    result = {name: devs for name, devs in plain.items() if name not in sharing.replicas}
    for name, replicas in sharing.replicas.items():
        devices = plain.get(name)
        if not devices:  # NVIDIA skips shared resources the node does not have
            continue
        _check_replicas(name, replicas, devices, sharing.kind)
        shared_name = sharing.advertised_name(name)
        result.setdefault(shared_name, []).extend(
            AdvertisedDevice(
                id=replica_id(d.base_id, n), resource=shared_name, gpu=d.gpu, mig=d.mig, replica=n
            )
            for d in devices
            for n in range(replicas)
        )
    return result


def _check_replicas(
    name: str, replicas: int, devices: list[AdvertisedDevice], kind: SharingKind
) -> None:
    if replicas < 1:
        raise AdvertiseError(f"sharing.{kind}.resources[{name}].replicas: must be >= 1")
    if kind != SharingKind.MPS:
        return
    if any(d.mig for d in devices):
        raise AdvertiseError(f"{name}: sharing using MPS is not supported for MIG devices")
    for d in devices:
        # (0, 0) means discovery could not read it; the MPS daemon will be the judge then.
        if d.gpu.compute_capability == (0, 0):
            continue
        limit = (
            _MPS_MAX_CLIENTS if d.gpu.compute_capability >= (7, 5) else _MPS_MAX_CLIENTS_BEFORE_7_5
        )
        if replicas > limit:
            raise AdvertiseError(
                f"sharing.mps.resources[{name}].replicas: {replicas} exceeds the {limit} MPS "
                f"clients GPU {d.gpu.index} (compute capability "
                f"{d.gpu.compute_capability[0]}.{d.gpu.compute_capability[1]}) supports"
            )


def _check_resource_name(name: str) -> None:
    if len(name) > MAX_RESOURCE_NAME_LENGTH:
        raise AdvertiseError(
            f"fully-qualified resource name must be {MAX_RESOURCE_NAME_LENGTH} characters "
            f"or less: {name}"
        )
    prefix, _, short = name.partition("/")
    if prefix != RESOURCE_PREFIX or not _DNS_SUBDOMAIN.match(short):
        raise AdvertiseError(f"incorrect format for resource name {name!r}")


def _whole(gpu: GpuInfo, resource: str) -> AdvertisedDevice:
    return AdvertisedDevice(id=gpu.uuid, resource=resource, gpu=gpu)


def _slice(gpu: GpuInfo, mig: MigInfo, resource: str) -> AdvertisedDevice:
    return AdvertisedDevice(id=mig.uuid, resource=resource, gpu=gpu, mig=mig)


def _group(devices: Iterable[AdvertisedDevice]) -> dict[str, list[AdvertisedDevice]]:
    grouped: dict[str, list[AdvertisedDevice]] = {}
    for device in devices:
        grouped.setdefault(device.resource, []).append(device)
    return grouped
