"""pynvml's per-device functions for the simulator: identity, telemetry, topology, processes.

Return types follow pynvml exactly (str for strings, its ctypes structs, lists where it
returns lists). MIG device handles answer only what NVML answers on them (identity, memory,
processes); whole-GPU telemetry on a MIG handle raises NotSupported, and utilization rates
raise NotSupported on MIG-enabled GPUs too, as on real hardware.
"""

from typing import Any

import pynvml

from gpufleet.lab.nvml import workload
from gpufleet.lab.nvml.machine import Machine, Node, nvml_error

_SAMPLING_PERIOD_US = 167_000
_PROCESS_SAMPLE_US = 500_000  # NVML refreshes per-process utilization at roughly this rate


class DeviceCalls:
    """Identity, telemetry, topology and process queries on device handles."""

    _m: Machine

    # --- enumeration and identity -------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        self._m.enter_system("nvmlDeviceGetCount")
        return len(self._m.nodes)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._m.require_init()  # faults are checked once, with the GPU
        if not 0 <= index < len(self._m.nodes):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._m.enter("nvmlDeviceGetHandleByIndex", self._m.nodes[index].handle).handle

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> Any:
        self._m.require_init()  # faults are checked once, with the GPU
        key = uuid.decode() if isinstance(uuid, bytes) else uuid
        node = self._m.by_uuid.get(key)
        if node is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return self._m.enter("nvmlDeviceGetHandleByUUID", node.handle).handle

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        node = self._m.enter("nvmlDeviceGetUUID", handle)
        return node.mig.uuid if node.mig else node.gpu.uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        node = self._m.enter("nvmlDeviceGetName", handle)
        return f"{node.gpu.name} MIG {node.mig.profile}" if node.mig else node.gpu.name

    def nvmlDeviceGetPciInfo_v3(self, handle: Any) -> Any:
        gpu = self._m.enter("nvmlDeviceGetPciInfo_v3", handle, mig_ok=False).gpu
        info = pynvml.nvmlPciInfo_t()
        info.busIdLegacy = f"{gpu.pci_domain:04X}:{gpu.pci_bus:02X}:00.0".encode()
        info.busId = gpu.pci_bus_id.encode()
        info.domain, info.bus, info.device = gpu.pci_domain, gpu.pci_bus, 0
        model = self._m.nodes[gpu.index].model
        info.pciDeviceId, info.pciSubSystemId = model.pci_device_id, model.pci_subsystem_id
        return info

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        self._m.enter("nvmlDeviceGetPciInfo", handle, mig_ok=False)
        return self.nvmlDeviceGetPciInfo_v3(handle)

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return self._m.enter("nvmlDeviceGetIndex", handle, mig_ok=False).gpu.index

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        return self._m.enter("nvmlDeviceGetMinorNumber", handle, mig_ok=False).gpu.minor

    def nvmlDeviceGetSerial(self, handle: Any) -> str:
        return self._m.enter("nvmlDeviceGetSerial", handle, mig_ok=False).gpu.serial

    def nvmlDeviceGetVbiosVersion(self, handle: Any) -> str:
        return self._m.enter("nvmlDeviceGetVbiosVersion", handle, mig_ok=False).model.vbios

    def nvmlDeviceGetBrand(self, handle: Any) -> int:
        self._m.enter("nvmlDeviceGetBrand", handle, mig_ok=False)
        return pynvml.NVML_BRAND_NVIDIA

    def nvmlDeviceGetInforomImageVersion(self, handle: Any) -> str:
        node = self._m.enter("nvmlDeviceGetInforomImageVersion", handle, mig_ok=False)
        return node.model.inforom_image

    def nvmlDeviceGetInforomVersion(self, handle: Any, infoRomObject: int) -> str:
        node = self._m.enter("nvmlDeviceGetInforomVersion", handle, mig_ok=False)
        version = dict(node.model.inforom_objects).get(infoRomObject)
        if version is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return version

    def nvmlDeviceGetArchitecture(self, device: Any) -> int:
        return self._m.enter("nvmlDeviceGetArchitecture", device).model.arch

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        return self._m.enter("nvmlDeviceGetCudaComputeCapability", handle).model.compute_capability

    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        return self._m.enter("nvmlDeviceGetNumaNodeId", handle, mig_ok=False).gpu.numa_node

    # --- memory, utilization, clocks, power, thermals -----------------------

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        """v1 (`version` falsy) or `nvmlMemory_v2`; on a MIG handle, the instance's memory."""
        node = self._m.enter("nvmlDeviceGetMemoryInfo", handle)
        self._m.require_privilege(node)
        total, reserved, used = self._m.memory_bytes(node)
        if not version:
            mem = pynvml.c_nvmlMemory_t()
            mem.total, mem.used, mem.free = total, reserved + used, total - reserved - used
            return mem
        if version != pynvml.nvmlMemory_v2:
            raise nvml_error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        mem = pynvml.c_nvmlMemory_v2_t()
        mem.version = version
        mem.total, mem.reserved, mem.used = total, reserved, used
        mem.free = total - reserved - used
        return mem

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        node = self._m.enter("nvmlDeviceGetUtilizationRates", handle, mig_ok=False)
        if node.mig_parent:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        util = self._m.load(node).util
        rates = pynvml.c_nvmlUtilization_t()
        rates.gpu, rates.memory = round(100 * util), round(55 * util)
        return rates

    def nvmlDeviceGetEncoderUtilization(self, handle: Any) -> list[int]:
        node = self._m.enter("nvmlDeviceGetEncoderUtilization", handle, mig_ok=False)
        if node.mig_parent:  # nvml.h: "not supported" on MIG-enabled GPUs
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [0, _SAMPLING_PERIOD_US]

    def nvmlDeviceGetDecoderUtilization(self, handle: Any) -> list[int]:
        node = self._m.enter("nvmlDeviceGetDecoderUtilization", handle, mig_ok=False)
        if node.mig_parent:  # nvml.h: "not supported" on MIG-enabled GPUs
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [0, _SAMPLING_PERIOD_US]

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        node = self._m.enter("nvmlDeviceGetClockInfo", handle, mig_ok=False)
        util, model = self._m.load(node).util, node.model
        if type in (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_GRAPHICS):
            return workload.sm_clock_mhz(model, util)
        if type == pynvml.NVML_CLOCK_MEM:
            return workload.mem_clock_mhz(model, util)
        if type == pynvml.NVML_CLOCK_VIDEO:
            return round(model.max_video_clock_mhz * (0.5 + 0.5 * util))
        raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, type: int) -> int:
        model = self._m.enter("nvmlDeviceGetMaxClockInfo", handle, mig_ok=False).model
        clocks = {
            pynvml.NVML_CLOCK_GRAPHICS: model.max_sm_clock_mhz,
            pynvml.NVML_CLOCK_SM: model.max_sm_clock_mhz,
            pynvml.NVML_CLOCK_MEM: model.max_mem_clock_mhz,
            pynvml.NVML_CLOCK_VIDEO: model.max_video_clock_mhz,
        }
        if type not in clocks:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return clocks[type]

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        node = self._m.enter("nvmlDeviceGetTemperature", handle, mig_ok=False)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return workload.temperature_c(node.model, self._m.load(node).util)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        node = self._m.enter("nvmlDeviceGetPowerUsage", handle, mig_ok=False)
        return workload.power_mw(node.model, self._m.load(node).util)

    def nvmlDeviceGetFanSpeed(self, handle: Any) -> int:
        """NotSupported, as nvml.h answers "if the device does not have a fan": every
        simulated model (H100 SXM, A100 SXM, L4) is passively cooled, and nvidia-smi shows
        Fan "N/A" on H100 80GB HBM3 (driver 550.90.07 in wilicc/gpu-burn#114, 550.54.15 on
        8 x H100 SXM in NVIDIA/nccl#1264)."""
        self._m.enter("nvmlDeviceGetFanSpeed", handle, mig_ok=False)
        raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return self._m.enter(
            "nvmlDeviceGetEnforcedPowerLimit", handle, mig_ok=False
        ).model.power_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        node = self._m.enter("nvmlDeviceGetPowerManagementLimit", handle, mig_ok=False)
        return node.model.power_limit_mw

    def nvmlDeviceGetPcieThroughput(self, device: Any, counter: int) -> int:
        """KB/s over NVML's 20 ms window."""
        node = self._m.enter("nvmlDeviceGetPcieThroughput", device, mig_ok=False)
        t = self._m.load(node).t
        if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES:
            return int(node.traits.pcie_tx_bytes_per_s.at(t) / 1000)
        if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES:
            return int(node.traits.pcie_rx_bytes_per_s.at(t) / 1000)
        raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        node = self._m.enter("nvmlDeviceGetCurrentClocksEventReasons", handle, mig_ok=False)
        util = self._m.load(node).util
        if util < 0.01:
            return pynvml.nvmlClocksEventReasonGpuIdle
        if util > 0.9:
            return pynvml.nvmlClocksEventReasonSwPowerCap
        return pynvml.nvmlClocksEventReasonNone

    def nvmlDeviceGetGridLicensableFeatures(self, handle: Any) -> Any:
        """Bare metal: a struct saying vGPU licensing is not supported (no features)."""
        self._m.enter("nvmlDeviceGetGridLicensableFeatures", handle, mig_ok=False)
        features = pynvml.c_nvmlGridLicensableFeatures_v4_t()
        features.isGridLicenseSupported, features.licensableFeaturesCount = 0, 0
        return features

    # --- topology -------------------------------------------------------------

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: Any, device2: Any) -> int:
        a = self._m.enter("nvmlDeviceGetTopologyCommonAncestor", device1, mig_ok=False).gpu
        b = self._m.enter("nvmlDeviceGetTopologyCommonAncestor", device2, mig_ok=False).gpu
        if a.index == b.index:
            return pynvml.NVML_TOPOLOGY_INTERNAL
        if a.index // 2 == b.index // 2:  # pairs of GPUs share a PCIe switch
            return pynvml.NVML_TOPOLOGY_SINGLE
        if a.numa_node == b.numa_node:
            return pynvml.NVML_TOPOLOGY_NODE
        return pynvml.NVML_TOPOLOGY_SYSTEM

    def nvmlDeviceGetP2PStatus(self, device1: Any, device2: Any, p2pIndex: int) -> int:
        a = self._m.enter("nvmlDeviceGetP2PStatus", device1, mig_ok=False)
        b = self._m.enter("nvmlDeviceGetP2PStatus", device2, mig_ok=False)
        if p2pIndex == pynvml.NVML_P2P_CAPS_INDEX_NVLINK:
            # SXM boards: every NVLink GPU reaches every other through the NVSwitches.
            nvlink = a.model.nvlinks and b.model.nvlinks and a is not b
            return pynvml.NVML_P2P_STATUS_OK if nvlink else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
        return pynvml.NVML_P2P_STATUS_OK

    # --- processes --------------------------------------------------------------

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        """pynvml friendly objects; a MIG parent lists every instance's processes."""
        node = self._m.enter("nvmlDeviceGetComputeRunningProcesses", handle)
        self._m.require_privilege(node)
        return [p.info for p in node.procs]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[Any]:
        """Empty: simulated processes are CUDA compute contexts (nvidia-smi type "C"), which
        NVML lists only among compute processes; graphics lists OpenGL/Vulkan contexts."""
        self._m.enter("nvmlDeviceGetGraphicsRunningProcesses", handle)
        return []

    def nvmlDeviceGetProcessUtilization(self, handle: Any, timeStamp: int) -> list[Any]:
        """Latest c_nvmlProcessUtilizationSample_t per process newer than `timeStamp` (µs),
        for the processes that used the SM in that period only (nvml.h: "that had some
        non-zero utilization during the last sample period").

        Raises NVMLError_NotFound when there is none, like NVML, and NotSupported on a
        MIG-enabled GPU and its instances ("On MIG-enabled GPUs, querying process
        utilization is not currently supported").
        """
        node = self._m.enter("nvmlDeviceGetProcessUtilization", handle, mig_ok=False)
        if node.mig_parent:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        e = self._m.now()
        stamp = self._m.wall_us(e) // _PROCESS_SAMPLE_US * _PROCESS_SAMPLE_US
        sample_e = e - (self._m.wall_us(e) - stamp) / 1e6
        samples = []
        if stamp > timeStamp:
            for proc, load in self._process_loads(node, sample_e):
                if proc.started_at > sample_e:
                    continue
                s = pynvml.c_nvmlProcessUtilizationSample_t()
                s.pid, s.timeStamp = proc.pid, stamp
                s.smUtil = self._m.process_sm_percent(proc, load)
                s.memUtil = s.smUtil * 55 // 100
                if s.smUtil:
                    samples.append(s)
        if not samples:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return samples

    def _process_loads(self, node: Node, t: float) -> list[tuple[Any, Any]]:
        if node.mig_parent:
            return [(p, self._m.load_at(c, t)) for c in node.children for p in c.procs]
        load = self._m.load_at(node, t)
        return [(p, load) for p in node.procs]
