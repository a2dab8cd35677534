"""MIG profile names as NVIDIA spells them (`1g.10gb`, `3g.40gb+me`), from NVML.

Both daemons name MIG devices by profile: the exporter in its labels, the plugin in its
resource names (`nvidia.com/mig-1g.10gb`). NVML's GPU-instance profile table is the only
right source; names derived from memory sizes are wrong on some boards (dcgm-exporter #544).
Calls NVML only through the injected `lib`.
"""

from typing import Any

import pynvml

from gpufleet.nvml.values import text


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
    """GPU-instance profile id -> NVIDIA's profile name, from NVML's profile table."""
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
