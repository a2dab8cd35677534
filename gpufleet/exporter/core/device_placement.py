"""A device-plugin ID, parsed and placed on this node's entities.

Pure: no I/O. Device plugins name what they allocate in several forms (NVIDIA's UUIDs with
a `::n` sharing replica, the old driver's MIG form, GKE's `nvidiaN/giK/vgpuM`); `attribution`
places each ID a pod holds through `locate`, and never guesses: an ID that parses to no
entity on the node holds nothing.
"""

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from gpufleet.core.device_ids import split_replica
from gpufleet.exporter.core.samples import Entity

# Resource names the NVIDIA device plugin advertises. `.shared` is its time-slicing/MPS
# rename (renameByDefault); dcgm-exporter drops it unless listed (its #151), we keep it.
GPU_RESOURCE_NAMES = frozenset({"nvidia.com/gpu", "nvidia.com/gpu.shared"})
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

# GKE's device plugin: nvidiaN (whole GPU), nvidiaN/giK (MIG), optional /vgpuM (sharing).
# Indexes of at most 9 digits: int() of thousands raised, for the whole node's collection.
_GKE_ID = re.compile(r"nvidia([0-9]{1,9})(?:/gi([0-9]{1,9}))?(?:/vgpu([0-9]{1,9}))?")
_UUID_ID = re.compile(r"(GPU|MIG)-[0-9a-fA-F][0-9a-fA-F-]*")
_OLD_MIG_ID = re.compile(r"MIG-(GPU-[0-9a-fA-F][0-9a-fA-F-]*)/([0-9]{1,9})/([0-9]{1,9})")

Key = tuple[int, int | None]  # Entity.key


class DeviceId(NamedTuple):
    """A device-plugin ID, parsed: what it points at and which sharing replica it is.

    Exactly one of `gpu_uuid`, `gpu_index` or `mig_uuid` is set; `gi_id` narrows a GPU to
    one of its MIG instances.
    """

    gpu_uuid: str | None = None  # "GPU-<uuid>"
    gpu_index: int | None = None  # GKE's nvidiaN
    mig_uuid: str | None = None  # "MIG-<uuid>"
    gi_id: int | None = None
    replica: int | None = None  # time-slicing/MPS replica: "::n" or GKE "/vgpuM"


def keeps_resource(name: str, extra_names: Collection[str] = ()) -> bool:
    """Whether devices of resource `name` are GPUs this exporter attributes."""
    return name in GPU_RESOURCE_NAMES or name.startswith(MIG_RESOURCE_PREFIX) or name in extra_names


def parse_device_id(raw: str) -> DeviceId | None:
    """Parse every device-ID form a GPU device plugin advertises; None if unrecognised.

    `GPU-<uuid>`, `MIG-<uuid>` (either with a `::n` replica suffix), the old driver's
    `MIG-GPU-<uuid>/<gi>/<ci>`, and GKE's `nvidiaN`, `nvidiaN/giK[/vgpuM]`, `nvidiaN/vgpuM`.
    """
    parts = split_replica(raw)
    if parts is None:
        return None
    base, replica = parts
    if match := _OLD_MIG_ID.fullmatch(base):
        return DeviceId(gpu_uuid=match[1], gi_id=int(match[2]), replica=replica)
    if match := _UUID_ID.fullmatch(base):
        if match[1] == "MIG":
            return DeviceId(mig_uuid=base, replica=replica)
        return DeviceId(gpu_uuid=base, replica=replica)
    if replica is None and (match := _GKE_ID.fullmatch(base)):
        gi, vgpu = match[2], match[3]
        return DeviceId(
            gpu_index=int(match[1]),
            gi_id=None if gi is None else int(gi),
            replica=None if vgpu is None else int(vgpu),
        )
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Topology:
    """Where this node's entities are, by the identifiers device plugins use."""

    gpu_by_uuid: Mapping[str, int]
    key_by_mig_uuid: Mapping[str, Key]
    # gpu index -> its whole-GPU entity (when reported) and all its MIG instances
    keys_by_gpu: Mapping[int, tuple[Key, ...]]


def node_topology(entities: Iterable[Entity]) -> Topology:
    """Index the node's entities once per rebuild, so each ID is placed in O(1)."""
    gpu_by_uuid: dict[str, int] = {}
    key_by_mig_uuid: dict[str, Key] = {}
    keys_by_gpu: dict[int, list[Key]] = {}
    for entity in entities:
        gpu_by_uuid[entity.uuid] = entity.gpu
        keys_by_gpu.setdefault(entity.gpu, []).append(entity.key)
        if entity.mig is not None:
            key_by_mig_uuid[entity.mig.uuid] = entity.key
    return Topology(
        gpu_by_uuid=gpu_by_uuid,
        key_by_mig_uuid=key_by_mig_uuid,
        keys_by_gpu={gpu: tuple(keys) for gpu, keys in keys_by_gpu.items()},
    )


def locate(device: DeviceId, topology: Topology) -> tuple[Key, ...]:
    """The entity keys a parsed ID holds on this node; empty when it matches none.

    A MIG ID holds its instance. A whole-GPU ID holds the GPU's entity and, on a
    MIG-enabled GPU, every MIG instance too: the pod owns the whole card (MIG strategy
    `none`), so every slice's series carry its labels. GKE's N is taken as the NVML index,
    as dcgm-exporter does.
    """
    if device.mig_uuid is not None:
        key = topology.key_by_mig_uuid.get(device.mig_uuid)
        return () if key is None else (key,)
    gpu = device.gpu_index
    if device.gpu_uuid is not None:
        gpu = topology.gpu_by_uuid.get(device.gpu_uuid)
    keys = topology.keys_by_gpu.get(gpu, ()) if gpu is not None else ()
    if device.gi_id is None:
        return keys
    return ((gpu, device.gi_id),) if (gpu, device.gi_id) in keys else ()
