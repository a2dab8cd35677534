"""What GPUs and MIG devices a node has, as both daemons discover them from NVML.

One discovery for the exporter and the plugin: each GPU's handle, UUID and name, and its
MIG devices with NVIDIA's profile names (`1g.10gb`, `3g.40gb+me`). Each daemon reads what
only it needs on top (the exporter its labels and GPM support, the plugin memory, NUMA and
topology) and keeps its own view of the result.

NVML's GPU-instance profile table is the only right source of profile names; names
derived from memory sizes are wrong on some boards (dcgm-exporter #544). Partial results:
one MIG device that fails is handed back as a failure, its siblings kept; a lost GPU
raises. It never logs and never counts: the caller decides how loud a failure is. Calls
NVML only through the injected `lib`.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pynvml

from gpufleet.nvml.values import text

# Optional facts: NVML may not know them on some boards or drivers.
ABSENT = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound)


@dataclass(frozen=True, slots=True, kw_only=True)
class NvmlGpu:
    """One physical GPU: what identifies it and the handle to read it by."""

    index: int  # NVML index
    handle: Any
    uuid: str  # "GPU-<uuid>"
    name: str  # product name, e.g. "NVIDIA H100 80GB HBM3"


@dataclass(frozen=True, slots=True, kw_only=True)
class NvmlMig:
    """One MIG device (a GPU instance and its compute instance) of a MIG-enabled GPU."""

    index: int  # MIG device index on the parent (NVIDIA's "i:j" index uses it)
    handle: Any
    uuid: str  # "MIG-<uuid>"
    profile: str  # NVIDIA's profile name; "" when NVML names none
    gi_id: int  # GPU instance id: dcgm's GPU_I_ID label
    ci_id: int
    # Position of its GPU-instance profile in NVML's profile table (None when NVML names
    # none): DCGM numbers a GPU's instances profile by profile in this order.
    profile_rank: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class MigFailure:
    """A MIG device index whose reads failed: left out, its siblings and GPU kept."""

    index: int
    error: Exception


def gpu_device(lib: Any, index: int) -> NvmlGpu:
    """GPU `index`'s handle, UUID and name. Raises NVMLError when it cannot be identified."""
    handle = lib.nvmlDeviceGetHandleByIndex(index)
    return NvmlGpu(
        index=index,
        handle=handle,
        uuid=text(lib.nvmlDeviceGetUUID(handle)),
        name=text(lib.nvmlDeviceGetName(handle)),
    )


def mig_capable(lib: Any, handle: Any) -> bool:
    """Whether the GPU supports MIG: NVML reports a MIG mode for it (GFD's test)."""
    try:
        lib.nvmlDeviceGetMigMode(handle)
    except ABSENT:
        return False
    return True


def mig_enabled(lib: Any, handle: Any) -> bool:
    """Whether MIG is on; False on a GPU that is not MIG-capable."""
    try:
        return lib.nvmlDeviceGetMigMode(handle)[0] == pynvml.NVML_DEVICE_MIG_ENABLE
    except ABSENT:
        return False


def mig_devices(lib: Any, gpu: NvmlGpu) -> tuple[tuple[NvmlMig, ...], tuple[MigFailure, ...]]:
    """The MIG devices of a MIG-enabled `gpu`, by index, and the indexes that failed.

    An empty index is skipped; a device whose reads fail is a `MigFailure`. Raises
    NVMLError_GpuIsLost: a lost GPU has no devices to report.
    """
    profiles = profile_names(lib, gpu.handle)
    found: list[NvmlMig] = []
    failed: list[MigFailure] = []
    for index in range(lib.nvmlDeviceGetMaxMigDeviceCount(gpu.handle)):
        try:
            mig = _mig_device(lib, gpu.handle, index, profiles)
        except pynvml.NVMLError_GpuIsLost:
            raise
        except Exception as err:  # this slice only; its siblings and GPU stay
            failed.append(MigFailure(index=index, error=err))
            continue
        if mig is not None:
            found.append(mig)
    return tuple(found), tuple(failed)


def _mig_device(lib: Any, handle: Any, index: int, profiles: Mapping[int, str]) -> NvmlMig | None:
    """MIG device `index` of the GPU `handle`; None when the slot is empty."""
    try:
        mig_handle = lib.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
    except pynvml.NVMLError_NotFound:
        return None
    gi_id = lib.nvmlDeviceGetGpuInstanceId(mig_handle)
    pid = profile_id(lib, handle, gi_id)
    profile = profiles.get(pid) or mig_profile_name(text(lib.nvmlDeviceGetName(mig_handle)))
    # GetGpuInstanceById "requires privileged user" (nvml.h): without it the profile's
    # name, unique in the table, ranks it, so DCGM's instance ids come out the same
    names = list(profiles.values())
    rank = list(profiles).index(pid) if pid in profiles else None
    if rank is None and profile in names:
        rank = names.index(profile)
    return NvmlMig(
        index=index,
        handle=mig_handle,
        uuid=text(lib.nvmlDeviceGetUUID(mig_handle)),
        profile=profile or "",
        gi_id=gi_id,
        ci_id=lib.nvmlDeviceGetComputeInstanceId(mig_handle),
        profile_rank=rank,
    )


def mig_profile_name(nvml_name: str) -> str | None:
    """Profile name from NVML's GPU-instance profile name ("MIG 1g.10gb" -> "1g.10gb") or from
    a MIG device name ("NVIDIA H100 80GB HBM3 MIG 1g.10gb" -> "1g.10gb"); None if neither.

    The name NVML gives is the only source: deriving it from memory size is what made
    dcgm-exporter report "1g.11gb" for an H100 NVL "1g.12gb" (dcgm-exporter #544).
    """
    head, sep, tail = nvml_name.strip().rpartition("MIG ")
    if not sep or (head and not head.endswith(" ")):
        return None
    profile = tail.strip()
    return profile if profile and " " not in profile else None


def profile_names(lib: Any, handle: Any) -> dict[int, str]:
    """GPU-instance profile id -> NVIDIA's profile name, from NVML's profile table, in
    the table's order."""
    names = {}
    for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = lib.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
        except pynvml.NVMLError:
            continue  # profile not available on this GPU
        name = mig_profile_name(text(info.name))
        if name:
            names[info.id] = name
    return names


def profile_id(lib: Any, handle: Any, gi_id: int) -> int | None:
    try:
        instance = lib.nvmlDeviceGetGpuInstanceById(handle, gi_id)
        return lib.nvmlGpuInstanceGetInfo(instance).profileId
    except pynvml.NVMLError:
        return None  # fall back to the MIG device's name
