"""pynvml's MIG functions for the simulator: modes, MIG device handles, GPU instances.

MIG geometry is fixed by the fleet spec (no create/destroy). Errors follow NVML: a GPU
that cannot do MIG answers NotSupported, an empty MIG slot NotFound, a full-GPU handle
where a MIG handle is required InvalidArgument.
"""

from typing import Any

import pynvml

from gpufleet.lab.nvml.handles import HandleTable
from gpufleet.lab.nvml.machine import Machine, Node, nvml_error
from gpufleet.lab.nvml.models import MigProfile

_MAX_MIG_DEVICES = 7


class MigCalls:
    """MIG queries on GPU and MIG device handles."""

    _m: Machine
    _gpu_instances: HandleTable[Node]
    _gi_handles: dict[tuple[int, int], Any]  # (gpu index, gi id) -> GPU instance handle

    def _mig_capable(self, fn: str, device: Any) -> Node:
        node = self._m.enter(fn, device, mig_ok=False)
        if not node.model.mig_profiles:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return node

    def _mig_device(self, fn: str, device: Any) -> Node:
        node = self._m.enter(fn, device)
        if node.mig is None:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return node

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        node = self._mig_capable("nvmlDeviceGetMigMode", device)
        mode = int(node.gpu.mig_enabled)
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        self._mig_capable("nvmlDeviceGetMaxMigDeviceCount", device)
        return _MAX_MIG_DEVICES

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> Any:
        node = self._mig_capable("nvmlDeviceGetMigDeviceHandleByIndex", device)
        if not 0 <= index < _MAX_MIG_DEVICES:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if index >= len(node.children):
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return node.children[index].handle

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: Any) -> Any:
        node = self._mig_device("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", migDevice)
        return node.parent.handle

    def nvmlDeviceIsMigDeviceHandle(self, device: Any) -> Any:
        node = self._m.enter("nvmlDeviceIsMigDeviceHandle", device)
        return pynvml.c_uint(int(node.mig is not None))  # pynvml returns the c_uint itself

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        return self._mig_device("nvmlDeviceGetGpuInstanceId", device).mig.gi_id

    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        return self._mig_device("nvmlDeviceGetComputeInstanceId", device).mig.ci_id

    def nvmlDeviceGetAttributes(self, device: Any) -> Any:
        node = self._m.enter("nvmlDeviceGetAttributes", device)
        attrs = pynvml.c_nvmlDeviceAttributes()
        profile = node.profile
        if profile is None:
            attrs.multiprocessorCount = node.model.multiprocessors
            attrs.gpuInstanceSliceCount = 7 if node.model.mig_profiles else 0
            attrs.computeInstanceSliceCount = attrs.gpuInstanceSliceCount
            attrs.memorySizeMB = node.model.memory_mib
            attrs.sharedCopyEngineCount, attrs.sharedDecoderCount = 7, 5
            return attrs
        attrs.multiprocessorCount = profile.multiprocessors
        attrs.sharedCopyEngineCount = profile.copy_engines
        attrs.sharedDecoderCount = profile.decoders
        attrs.sharedJpegCount = profile.jpegs
        attrs.sharedOfaCount = profile.ofas
        attrs.gpuInstanceSliceCount = profile.slices
        attrs.computeInstanceSliceCount = profile.slices
        attrs.memorySizeMB = profile.memory_mib
        return attrs

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: Any, profile: int, version: int = 2
    ) -> Any:
        node = self._mig_capable("nvmlDeviceGetGpuInstanceProfileInfo", device)
        if version not in (1, 2):
            raise nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)  # as pynvml does
        if not 0 <= profile < pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        p = next((p for p in node.model.mig_profiles if p.profile == profile), None)
        if p is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if version == 2:
            info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
            info.name = f"MIG {p.name}".encode()
        else:
            info = pynvml.c_nvmlGpuInstanceProfileInfo_t()
        _fill_profile_info(info, p)
        return info

    def nvmlDeviceGetGpuInstanceById(self, device: Any, gpuInstanceId: int) -> Any:
        node = self._mig_capable("nvmlDeviceGetGpuInstanceById", device)
        if not node.gpu.mig_enabled:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_STATE)
        if not self._m.privileged:  # nvml.h: "Requires privileged user"
            raise nvml_error(pynvml.NVML_ERROR_NO_PERMISSION)
        handle = self._gi_handles.get((node.gpu.index, gpuInstanceId))
        if handle is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return handle

    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        child = self._gpu_instances.get(gpuInstance)
        if child is None:
            self._m.enter_system("nvmlGpuInstanceGetInfo")
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._m.enter("nvmlGpuInstanceGetInfo", child.parent.handle)
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.device = child.parent.handle
        info.id = child.mig.gi_id
        info.profileId = child.profile.profile_id
        info.placement.start = child.mig.placement_start
        info.placement.size = child.profile.memory_slices
        return info


def _fill_profile_info(info: Any, p: MigProfile) -> None:
    info.id = p.profile_id
    info.isP2pSupported = 0
    info.sliceCount = p.slices
    info.instanceCount = p.max_count
    info.multiprocessorCount = p.multiprocessors
    info.copyEngineCount = p.copy_engines
    info.decoderCount = p.decoders
    info.encoderCount = 0
    info.jpegCount = p.jpegs
    info.ofaCount = p.ofas
    info.memorySizeMB = p.memory_mib
