"""Which NVML call serves each catalog field, and the pure conversions to dcgm's legacy units.

The tables here are the field -> NVML mapping the adapter in `reader.py` executes; keeping them
apart keeps both readable. No I/O, no clock, no logging: only pynvml's constants and struct
layouts are used, never its functions (those come through the injected `lib`).
"""

from collections.abc import Callable, Mapping
from typing import Any

import pynvml

from gpufleet.exporter.core.fields import BYTES_PER_MIB

_UINT_MAX = 0xFFFFFFFF
_MEMORY_TEMP_MAX_C = 200.0  # DCGM treats hotter HBM readings as bogus and drops them


# --- pure helpers ---------------------------------------------------------------------------

_VALUE_ATTRS = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


def field_value_number(value_type: int, value: Any) -> float | None:
    """The number in an `nvmlValue_t` union, read by its `valueType`; None for unknown types."""
    attr = _VALUE_ATTRS.get(value_type)
    return None if attr is None else float(getattr(value, attr))


def memory_temp_c(value: float) -> float | None:
    """HBM temperature as DCGM publishes it: readings above 200 C are sensor garbage."""
    return None if value > _MEMORY_TEMP_MAX_C else value


def milli_to_unit(value: float) -> float:
    """mW -> W (NVML reports power and power limits in milliwatts)."""
    return value / 1000.0


def kib_rate_mb_per_s(previous: tuple[float, float], current: tuple[float, float]) -> float | None:
    """MB/s between two (KiB counter, monotonic seconds) readings; None when no rate can be
    told (no time passed, or the counter went backwards: driver reload or wrap)."""
    (previous_kib, previous_s), (current_kib, current_s) = previous, current
    elapsed_s = current_s - previous_s
    if elapsed_s <= 0 or current_kib < previous_kib:
        return None
    return (current_kib - previous_kib) * 1024.0 / 1e6 / elapsed_s


def vgpu_license_status(features: Any) -> float:
    """DCGM_FI_DEV_VGPU_LICENSE_STATUS: 1 when the vGPU feature is licensed, else 0."""
    if not features.isGridLicenseSupported:
        return 0.0
    for i in range(features.licensableFeaturesCount):
        feature = features.gridLicensableFeatures[i]
        if feature.featureCode == pynvml.NVML_GRID_LICENSE_FEATURE_CODE_VGPU:
            return 1.0 if feature.featureState > 0 else 0.0
    return 0.0


_BRANDS = {
    pynvml.NVML_BRAND_UNKNOWN: "Unknown",
    pynvml.NVML_BRAND_QUADRO: "Quadro",
    pynvml.NVML_BRAND_TESLA: "Tesla",
    pynvml.NVML_BRAND_NVS: "NVS",
    pynvml.NVML_BRAND_GRID: "Grid",
    pynvml.NVML_BRAND_GEFORCE: "GeForce",
    pynvml.NVML_BRAND_TITAN: "Titan",
    pynvml.NVML_BRAND_NVIDIA_VAPPS: "NVIDIA Virtual Applications",
    pynvml.NVML_BRAND_NVIDIA_VPC: "NVIDIA Virtual PC",
    pynvml.NVML_BRAND_NVIDIA_VCS: "NVIDIA Virtual Compute Server",
    pynvml.NVML_BRAND_NVIDIA_VWS: "NVIDIA RTX Virtual Workstation",
    pynvml.NVML_BRAND_NVIDIA_CLOUD_GAMING: "NVIDIA Cloud Gaming",
    pynvml.NVML_BRAND_QUADRO_RTX: "Quadro RTX",
    pynvml.NVML_BRAND_NVIDIA_RTX: "NVIDIA RTX",
    pynvml.NVML_BRAND_NVIDIA: "NVIDIA",
    pynvml.NVML_BRAND_GEFORCE_RTX: "GeForce RTX",
    pynvml.NVML_BRAND_TITAN_RTX: "Titan RTX",
}


def brand_name(brand: int) -> str:
    """Name of an NVML_BRAND_* value."""
    return _BRANDS.get(brand, "Unknown")


# --- reader tables: one reader per catalog field ----------------------------------------------

Number = Callable[[float], float | None]

# Read with one nvmlDeviceGetFieldValues call per GPU: name -> (NVML field id, convert).
FIELD_VALUES: Mapping[str, tuple[int, Number]] = {
    "DCGM_FI_DEV_MEMORY_TEMP": (pynvml.NVML_FI_DEV_MEMORY_TEMP, memory_temp_c),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, float),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": (pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER, float),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": (pynvml.NVML_FI_DEV_REMAPPED_UNC, float),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": (pynvml.NVML_FI_DEV_REMAPPED_COR, float),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": (pynvml.NVML_FI_DEV_REMAPPED_FAILURE, float),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": (pynvml.NVML_FI_DEV_REMAPPED_PENDING, float),
    "DCGM_FI_DEV_POWER_USAGE_INSTANT": (pynvml.NVML_FI_DEV_POWER_INSTANT, milli_to_unit),
    "DCGM_FI_DEV_POWER_VIOLATION": (pynvml.NVML_FI_DEV_PERF_POLICY_POWER, float),
    "DCGM_FI_DEV_THERMAL_VIOLATION": (pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL, float),
    "DCGM_FI_DEV_SYNC_BOOST_VIOLATION": (pynvml.NVML_FI_DEV_PERF_POLICY_SYNC_BOOST, float),
    "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION": (pynvml.NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT, float),
    "DCGM_FI_DEV_LOW_UTIL_VIOLATION": (pynvml.NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION, float),
    "DCGM_FI_DEV_RELIABILITY_VIOLATION": (pynvml.NVML_FI_DEV_PERF_POLICY_RELIABILITY, float),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": (pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, float),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": (pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, float),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": (pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL, float),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": (pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL, float),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": (
        pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
        float,
    ),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": (
        pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
        float,
    ),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": (
        pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
        float,
    ),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": (
        pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
        float,
    ),
}

# NVLink data throughput counters (KiB, RX + TX) published as MB/s rates: name -> scopeId.
NVLINK_RATES: Mapping[str, int] = {
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": _UINT_MAX,  # all links
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0": 0,
}
NVLINK_COUNTERS = (
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
)

# One NVML call per handle and round, shared by the fields that read from its result.
QUERIES: Mapping[str, Callable[[Any, Any], Any]] = {
    "sm_clock": lambda lib, h: lib.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
    "mem_clock": lambda lib, h: lib.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
    "max_sm_clock": lambda lib, h: lib.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
    "max_mem_clock": lambda lib, h: lib.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM),
    "temperature": lambda lib, h: lib.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
    "power": lambda lib, h: lib.nvmlDeviceGetPowerUsage(h),
    "power_limit": lambda lib, h: lib.nvmlDeviceGetPowerManagementLimit(h),
    "enforced_power_limit": lambda lib, h: lib.nvmlDeviceGetEnforcedPowerLimit(h),
    "utilization": lambda lib, h: lib.nvmlDeviceGetUtilizationRates(h),
    "encoder": lambda lib, h: lib.nvmlDeviceGetEncoderUtilization(h),
    "decoder": lambda lib, h: lib.nvmlDeviceGetDecoderUtilization(h),
    "memory": lambda lib, h: lib.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
    "licensing": lambda lib, h: lib.nvmlDeviceGetGridLicensableFeatures(h),
    "clock_events": lambda lib, h: lib.nvmlDeviceGetCurrentClocksEventReasons(h),
    "retired_sbe": lambda lib, h: lib.nvmlDeviceGetRetiredPages(
        h, pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    ),
    "retired_dbe": lambda lib, h: lib.nvmlDeviceGetRetiredPages(
        h, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    ),
    "retired_pending": lambda lib, h: lib.nvmlDeviceGetRetiredPagesPendingStatus(h),
    "pcie_tx": lambda lib, h: lib.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES),
    "pcie_rx": lambda lib, h: lib.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES),
}

# name -> (query, extract the legacy-unit value from its result).
CALLS: Mapping[str, tuple[str, Callable[[Any], float]]] = {
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock", float),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock", float),
    "DCGM_FI_DEV_MAX_SM_CLOCK": ("max_sm_clock", float),
    "DCGM_FI_DEV_MAX_MEM_CLOCK": ("max_mem_clock", float),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature", float),
    "DCGM_FI_DEV_POWER_USAGE": ("power", milli_to_unit),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit", milli_to_unit),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": ("enforced_power_limit", milli_to_unit),
    "DCGM_FI_DEV_GPU_UTIL": ("utilization", lambda u: float(u.gpu)),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("utilization", lambda u: float(u.memory)),
    "DCGM_FI_DEV_ENC_UTIL": ("encoder", lambda r: float(r[0])),
    "DCGM_FI_DEV_DEC_UTIL": ("decoder", lambda r: float(r[0])),
    "DCGM_FI_DEV_FB_FREE": ("memory", lambda m: float(m.free // BYTES_PER_MIB)),
    "DCGM_FI_DEV_FB_USED": ("memory", lambda m: float(m.used // BYTES_PER_MIB)),
    "DCGM_FI_DEV_FB_RESERVED": ("memory", lambda m: float(m.reserved // BYTES_PER_MIB)),
    "DCGM_FI_DEV_FB_TOTAL": ("memory", lambda m: float(m.total // BYTES_PER_MIB)),
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": ("licensing", vgpu_license_status),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("clock_events", float),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("clock_events", float),
    "DCGM_FI_DEV_RETIRED_SBE": ("retired_sbe", lambda pages: float(len(pages))),
    "DCGM_FI_DEV_RETIRED_DBE": ("retired_dbe", lambda pages: float(len(pages))),
    "DCGM_FI_DEV_RETIRED_PENDING": ("retired_pending", float),
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": ("pcie_tx", float),
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": ("pcie_rx", float),
}

# Profiling fields from NVML GPM: name -> (metric id, factor to the legacy unit).
GPM: Mapping[str, tuple[int, float]] = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": (pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL, 0.01),
    "DCGM_FI_PROF_SM_ACTIVE": (pynvml.NVML_GPM_METRIC_SM_UTIL, 0.01),
    "DCGM_FI_PROF_SM_OCCUPANCY": (pynvml.NVML_GPM_METRIC_SM_OCCUPANCY, 0.01),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, 0.01),
    "DCGM_FI_PROF_DRAM_ACTIVE": (pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL, 0.01),
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": (pynvml.NVML_GPM_METRIC_FP64_UTIL, 0.01),
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": (pynvml.NVML_GPM_METRIC_FP32_UTIL, 0.01),
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": (pynvml.NVML_GPM_METRIC_FP16_UTIL, 0.01),
    "DCGM_FI_PROF_PCIE_TX_BYTES": (pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC, float(BYTES_PER_MIB)),
    "DCGM_FI_PROF_PCIE_RX_BYTES": (pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC, float(BYTES_PER_MIB)),
}

# Static labels, read once at discovery.
NODE_LABELS: Mapping[str, Callable[[Any], str]] = {
    "DCGM_FI_DRIVER_VERSION": lambda lib: lib.nvmlSystemGetDriverVersion(),
    "DCGM_FI_NVML_VERSION": lambda lib: lib.nvmlSystemGetNVMLVersion(),
}
DEVICE_LABELS: Mapping[str, Callable[[Any, Any], str]] = {
    "DCGM_FI_DEV_BRAND": lambda lib, h: brand_name(lib.nvmlDeviceGetBrand(h)),
    "DCGM_FI_DEV_SERIAL": lambda lib, h: lib.nvmlDeviceGetSerial(h),
    "DCGM_FI_DEV_OEM_INFOROM_VER": lambda lib, h: lib.nvmlDeviceGetInforomVersion(
        h, pynvml.NVML_INFOROM_OEM
    ),
    "DCGM_FI_DEV_ECC_INFOROM_VER": lambda lib, h: lib.nvmlDeviceGetInforomVersion(
        h, pynvml.NVML_INFOROM_ECC
    ),
    "DCGM_FI_DEV_POWER_INFOROM_VER": lambda lib, h: lib.nvmlDeviceGetInforomVersion(
        h, pynvml.NVML_INFOROM_POWER
    ),
    "DCGM_FI_DEV_INFOROM_IMAGE_VER": lambda lib, h: lib.nvmlDeviceGetInforomImageVersion(h),
    "DCGM_FI_DEV_VBIOS_VERSION": lambda lib, h: lib.nvmlDeviceGetVbiosVersion(h),
}

SERVED_FIELDS: frozenset[str] = frozenset(
    (*FIELD_VALUES, *NVLINK_RATES, *CALLS, *GPM, *NODE_LABELS, *DEVICE_LABELS)
)
"""Every catalog field `nvml.py` reads: all but EXPORTER_FIELDS (XIDs from events, windows)."""
