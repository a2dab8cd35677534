"""The field catalog: every DCGM field the exporter can serve, and how it maps to NVML.

Pure data: no I/O, no clock, no logging. The metric name is the DCGM field name
(dcgm-exporter's legacy names, <= 4.8); `name_v49` and `scale_v49` give the 4.9 name and
unit, `name_v1` dcgm-exporter 1.x's lowercase name. `nvml/readers.py` maps every entry to
the NVML call that serves it (XID errors: `nvml/xid.py`; the DCGM_EXP_* window counts: the
collector's history, `windows.py`; health: `health.py` over DEPENDENCIES; P2P:
`nvml/p2p.py`); a test keeps the two in step.
"""

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType


class MetricType(StrEnum):
    """The `type` column of a counters CSV, in dcgm-exporter's order."""

    GAUGE = "gauge"
    COUNTER = "counter"
    # dcgm-exporter accepts these and writes them into the TYPE line over the field's one
    # plain sample; Prometheus' text parser stores that sample and the declared type.
    HISTOGRAM = "histogram"
    SUMMARY = "summary"
    LABEL = "label"  # emitted as a label on every series, not as a metric


class MigSource(StrEnum):
    """Where a field's value comes from for a MIG instance entity."""

    INSTANCE = "instance"  # read on the MIG device handle / GPM MIG sample
    PARENT = "parent"  # a whole-GPU quantity: the parent GPU's value (as DCGM does)
    NONE = "none"  # NVML cannot serve it on MIG (e.g. GPU_UTIL): omitted


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldSpec:
    """One DCGM field."""

    name: str  # legacy DCGM field name = metric name, e.g. "DCGM_FI_DEV_SM_CLOCK"
    type: MetricType  # type in dcgm-exporter's default CSV
    help: str  # dcgm-exporter's help text
    nvml: str  # the NVML call behind it, for docs and the real-GPU comparison
    mig: MigSource = MigSource.PARENT
    name_v49: str | None = None  # DCGM 4.7 / dcgm-exporter 4.9 name; None = unchanged
    scale_v49: float = 1.0  # multiply a legacy-unit value by this for the 4.9 unit
    help_v49: str | None = None
    gpm: bool = False  # a PROF field computed with NVML GPM (Hopper and newer)
    default: bool = False  # in dcgm-exporter's default counters CSV
    # dcgm-exporter 1.x's lowercase name (go-dcgm's legacy_fields.csv), e.g. "dcgm_sm_clock".
    name_v1: str | None = None
    # Set on a selection's copy when the CSV named the field by `name_v1`: dcgm-exporter then
    # serves that name (and its legacy unit) whatever the profile.
    served_v1: bool = False


XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
"""The one catalog field served from NVML events (`xid.py`), not polled by `nvml.py`."""
XID_COUNT_FIELD = "DCGM_EXP_XID_ERRORS_COUNT"
"""dcgm-exporter's own metric: XIDs per xid within a window, counted from `xid.py`'s history."""
CLOCK_EVENTS_COUNT_FIELD = "DCGM_EXP_CLOCK_EVENTS_COUNT"
"""dcgm-exporter's own metric: collections per clock event reason within a window."""
CLOCK_EVENT_REASONS_FIELD = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
"""The field CLOCK_EVENTS_COUNT_FIELD is counted from; read whenever either is selected."""
HEALTH_FIELD = "DCGM_EXP_GPU_HEALTH_STATUS"
"""dcgm-exporter's own metric: DCGM's health watches per GPU, judged from NVML (`health.py`)."""
P2P_FIELD = "DCGM_EXP_P2P_STATUS"
"""dcgm-exporter's own metric: NVLink P2P status from each GPU to every other."""
EXPORTER_FIELDS = frozenset(
    {XID_FIELD, XID_COUNT_FIELD, CLOCK_EVENTS_COUNT_FIELD, HEALTH_FIELD, P2P_FIELD}
)
"""Catalog fields the collector serves from history or per-GPU state, not polled as such."""
HEALTH_INPUTS = (
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_RETIRED_PENDING",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_POWER_VIOLATION",
)
"""The polled fields HEALTH_FIELD is judged from (its XIDs come from `xid.py`)."""
DEPENDENCIES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {CLOCK_EVENTS_COUNT_FIELD: (CLOCK_EVENT_REASONS_FIELD,), HEALTH_FIELD: HEALTH_INPUTS}
)
"""Fields read whenever the key is selected, as dcgm adds the watches its collectors need."""
BYTES_PER_MIB = 1 << 20
"""dcgm's legacy memory unit (FB_*, per-process memory, PCIe MB/s), in bytes."""

# Unit changes dcgm-exporter 4.9 applied to the default fields (legacy value x scale).
_HZ_PER_MHZ = 1e6
_J_PER_MJ = 1e-3
_RATIO_PER_PERCENT = 0.01
_BYTES_PER_MIB = float(BYTES_PER_MIB)
_BPS_PER_MBPS = 1e6


def _gpm(name: str, help: str, *, metric: str, name_v49: str | None, default: bool) -> FieldSpec:
    """A DCGM profiling field served from NVML GPM (Hopper and newer) on each instance."""
    return FieldSpec(
        name=name,
        type=MetricType.GAUGE,
        help=help,
        nvml=f"nvmlGpmMetricsGet({metric})",
        mig=MigSource.INSTANCE,
        name_v49=name_v49,
        gpm=True,
        default=default,
    )


def _label(name: str, help: str, *, nvml: str, name_v49: str | None = None) -> FieldSpec:
    """A `label` row: a static string attached to every series, not a metric."""
    return FieldSpec(name=name, type=MetricType.LABEL, help=help, nvml=nvml, name_v49=name_v49)


def _fv(field_id: str) -> str:
    return f"nvmlDeviceGetFieldValues({field_id})"


# Help texts of the default and commented rows are dcgm-exporter's, verbatim. Fields that
# no dcgm-exporter CSV lists (marked "ours") carry help texts written here, in its style.
_SPECS: tuple[FieldSpec, ...] = (
    # --- dcgm-exporter's default counters (<= 4.8.x), in CSV order ---
    FieldSpec(
        name="DCGM_FI_DEV_SM_CLOCK",
        type=MetricType.GAUGE,
        help="SM clock frequency (in MHz).",
        nvml="nvmlDeviceGetClockInfo(NVML_CLOCK_SM)",
        scale_v49=_HZ_PER_MHZ,
        help_v49="SM clock frequency (in Hz).",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DEV_MEM_CLOCK",
        type=MetricType.GAUGE,
        help="Memory clock frequency (in MHz).",
        nvml="nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)",
        scale_v49=_HZ_PER_MHZ,
        help_v49="Memory clock frequency (in Hz).",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DEV_MEMORY_TEMP",
        type=MetricType.GAUGE,
        help="Memory temperature (in C).",
        nvml=_fv("NVML_FI_DEV_MEMORY_TEMP") + "; values above 200 dropped, as DCGM does",
        name_v49="DCGM_FI_DEV_MEMORY_TEMP_CELSIUS",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DEV_GPU_TEMP",
        type=MetricType.GAUGE,
        help="GPU temperature (in C).",
        nvml="nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
        name_v49="DCGM_FI_DEV_GPU_TEMP_CELSIUS",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DEV_POWER_USAGE",
        type=MetricType.GAUGE,
        help="Power draw (in W).",
        nvml="nvmlDeviceGetPowerUsage / 1000",
        name_v49="DCGM_FI_DEV_BOARD_POWER_WATTS",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        type=MetricType.COUNTER,
        help="Total energy consumption since boot (in mJ).",
        nvml=_fv("NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
        scale_v49=_J_PER_MJ,
        help_v49="Total energy consumption since boot (in J).",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        type=MetricType.COUNTER,
        help="Total number of PCIe retries.",
        nvml=_fv("NVML_FI_DEV_PCIE_REPLAY_COUNTER"),
        name_v49="DCGM_FI_DEV_PCIE_REPLAY_TOTAL",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DEV_GPU_UTIL",
        type=MetricType.GAUGE,
        help="GPU utilization (in %).",
        nvml="nvmlDeviceGetUtilizationRates().gpu",
        mig=MigSource.NONE,
        name_v49="DCGM_FI_DEV_GPU_UTIL_RATIO",
        scale_v49=_RATIO_PER_PERCENT,
        help_v49="GPU utilization (ratio).",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DEV_MEM_COPY_UTIL",
        type=MetricType.GAUGE,
        help="Memory utilization (in %).",
        nvml="nvmlDeviceGetUtilizationRates().memory",
        mig=MigSource.NONE,
        scale_v49=_RATIO_PER_PERCENT,
        help_v49="Memory utilization (ratio).",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DEV_ENC_UTIL",
        type=MetricType.GAUGE,
        help="Encoder utilization (in %).",
        nvml="nvmlDeviceGetEncoderUtilization()[0]",
        mig=MigSource.NONE,
        scale_v49=_RATIO_PER_PERCENT,
        help_v49="Encoder utilization (ratio).",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DEV_DEC_UTIL",
        type=MetricType.GAUGE,
        help="Decoder utilization (in %).",
        nvml="nvmlDeviceGetDecoderUtilization()[0]",
        mig=MigSource.NONE,
        scale_v49=_RATIO_PER_PERCENT,
        help_v49="Decoder utilization (ratio).",
        default=True,
    ),
    FieldSpec(
        name=XID_FIELD,
        type=MetricType.GAUGE,
        help="Value of the last XID error encountered.",
        nvml="nvmlEventSetWait_v2 on nvmlEventTypeXidCriticalError (xid.py)",
        name_v49="DCGM_FI_DEV_XID_ERROR",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DEV_FB_FREE",
        type=MetricType.GAUGE,
        help="Framebuffer memory free (in MiB).",
        nvml="nvmlDeviceGetMemoryInfo(version=nvmlMemory_v2).free >> 20",
        mig=MigSource.INSTANCE,
        scale_v49=_BYTES_PER_MIB,
        help_v49="Framebuffer memory free (in bytes).",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DEV_FB_USED",
        type=MetricType.GAUGE,
        help="Framebuffer memory used (in MiB).",
        nvml="nvmlDeviceGetMemoryInfo(version=nvmlMemory_v2).used >> 20",
        mig=MigSource.INSTANCE,
        scale_v49=_BYTES_PER_MIB,
        help_v49="Framebuffer memory used (in bytes).",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DEV_FB_RESERVED",
        type=MetricType.GAUGE,
        help="Framebuffer memory reserved (in MiB).",
        nvml="nvmlDeviceGetMemoryInfo(version=nvmlMemory_v2).reserved >> 20",
        mig=MigSource.INSTANCE,
        scale_v49=_BYTES_PER_MIB,
        help_v49="Framebuffer memory reserved (in bytes).",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        # `counter` as dcgm-exporter's CSV declares it, although DCGM publishes a rate:
        # compatibility fact, not a choice.
        type=MetricType.COUNTER,
        help="Total number of NVLink bandwidth counters for all lanes.",
        nvml=_fv("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX+TX, scopeId UINT_MAX")
        + "; rate of the KiB counters in MB/s",
        name_v49="DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL",
        scale_v49=_BPS_PER_MBPS,
        help_v49="Total NVLink throughput for all links (in B/s).",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        type=MetricType.GAUGE,
        help="vGPU License status",
        nvml="nvmlDeviceGetGridLicensableFeatures: 1 if the vGPU feature is licensed",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        type=MetricType.COUNTER,
        help="Number of remapped rows for uncorrectable errors",
        nvml=_fv("NVML_FI_DEV_REMAPPED_UNC"),
        name_v49="DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        type=MetricType.COUNTER,
        help="Number of remapped rows for correctable errors",
        nvml=_fv("NVML_FI_DEV_REMAPPED_COR"),
        name_v49="DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DEV_ROW_REMAP_FAILURE",
        type=MetricType.GAUGE,
        help="Whether remapping of rows has failed",
        nvml=_fv("NVML_FI_DEV_REMAPPED_FAILURE"),
        name_v49="DCGM_FI_DEV_ROW_REMAP_FAILED",
        default=True,
    ),
    FieldSpec(
        name="DCGM_FI_DRIVER_VERSION",
        type=MetricType.LABEL,
        help="Driver Version",
        nvml="nvmlSystemGetDriverVersion",
        name_v49="DCGM_FI_SYSTEM_DRIVER_VERSION",
        default=True,
    ),
    _gpm(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "Ratio of time the graphics engine is active.",
        metric="NVML_GPM_METRIC_GRAPHICS_UTIL / 100",
        name_v49="DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",
        default=True,
    ),
    _gpm(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        metric="NVML_GPM_METRIC_ANY_TENSOR_UTIL / 100",
        name_v49="DCGM_FI_PROF_TENSOR_UTIL_RATIO",
        default=True,
    ),
    _gpm(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        metric="NVML_GPM_METRIC_DRAM_BW_UTIL / 100",
        name_v49="DCGM_FI_PROF_DRAM_UTIL_RATIO",
        default=True,
    ),
    _gpm(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "The rate of data transmitted over the PCIe bus - including both protocol headers "
        "and data payloads - in bytes per second.",
        metric="NVML_GPM_METRIC_PCIE_TX_PER_SEC * 2^20",
        name_v49=None,
        default=True,
    ),
    _gpm(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "The rate of data received over the PCIe bus - including both protocol headers "
        "and data payloads - in bytes per second.",
        metric="NVML_GPM_METRIC_PCIE_RX_PER_SEC * 2^20",
        name_v49=None,
        default=True,
    ),
    # --- commented-out rows of dcgm-exporter's CSV: profiling ---
    _gpm(
        "DCGM_FI_PROF_SM_ACTIVE",
        "The ratio of cycles an SM has at least 1 warp assigned.",
        metric="NVML_GPM_METRIC_SM_UTIL / 100",
        name_v49="DCGM_FI_PROF_SM_UTIL_RATIO",
        default=False,
    ),
    _gpm(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "The ratio of number of warps resident on an SM.",
        metric="NVML_GPM_METRIC_SM_OCCUPANCY / 100",
        name_v49="DCGM_FI_PROF_SM_OCCUPANCY_RATIO",
        default=False,
    ),
    _gpm(
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
        "Ratio of cycles the fp64 pipes are active.",
        metric="NVML_GPM_METRIC_FP64_UTIL / 100",
        name_v49="DCGM_FI_PROF_FP64_UTIL_RATIO",
        default=False,
    ),
    _gpm(
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        "Ratio of cycles the fp32 pipes are active.",
        metric="NVML_GPM_METRIC_FP32_UTIL / 100",
        name_v49="DCGM_FI_PROF_FP32_UTIL_RATIO",
        default=False,
    ),
    _gpm(
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
        "Ratio of cycles the fp16 pipes are active.",
        metric="NVML_GPM_METRIC_FP16_UTIL / 100",
        name_v49="DCGM_FI_PROF_FP16_UTIL_RATIO",
        default=False,
    ),
    # --- commented-out rows: PCIe throughput (the peer chart's own customMetrics example) ---
    # A rate in KB/s whatever DCGM's "counter" says; each read blocks NVML about 20 ms.
    *(
        FieldSpec(
            name=f"DCGM_FI_DEV_PCIE_{way}_THROUGHPUT",
            type=MetricType.COUNTER,
            help=f"Total number of bytes {verb} through PCIe {way} (in KB) via NVML.",
            nvml=f"nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_{way}_BYTES)",
        )
        for way, verb in (("TX", "transmitted"), ("RX", "received"))
    ),
    # --- commented-out rows: violations (ns since driver load) ---
    *(
        FieldSpec(
            name=f"DCGM_FI_DEV_{what}_VIOLATION",
            type=MetricType.COUNTER,
            help=f"Throttling duration due to {why} (in ns).",
            nvml=_fv(f"NVML_FI_DEV_PERF_POLICY_{policy}"),
        )
        for what, why, policy in (
            ("POWER", "power constraints", "POWER"),
            ("THERMAL", "thermal constraints", "THERMAL"),
            ("SYNC_BOOST", "sync-boost constraints", "SYNC_BOOST"),
            ("BOARD_LIMIT", "board limit constraints", "BOARD_LIMIT"),
            ("LOW_UTIL", "low utilization", "LOW_UTILIZATION"),
            ("RELIABILITY", "reliability constraints", "RELIABILITY"),
        )
    ),
    # --- commented-out rows: ECC, retired pages, NVLink errors ---
    *(
        FieldSpec(
            name=f"DCGM_FI_DEV_ECC_{bits}_{scope}_TOTAL",
            type=MetricType.COUNTER,
            help=f"Total number of {width}-bit {kind} ECC errors.",
            nvml=_fv(f"NVML_FI_DEV_ECC_{bits}_{scope}_TOTAL"),
        )
        for bits, width in (("SBE", "single"), ("DBE", "double"))
        for scope, kind in (("VOL", "volatile"), ("AGG", "persistent"))
    ),
    FieldSpec(
        name="DCGM_FI_DEV_RETIRED_SBE",
        type=MetricType.COUNTER,
        help="Total number of retired pages due to single-bit errors.",
        nvml="len(nvmlDeviceGetRetiredPages(NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS))",
    ),
    FieldSpec(
        name="DCGM_FI_DEV_RETIRED_DBE",
        type=MetricType.COUNTER,
        help="Total number of retired pages due to double-bit errors.",
        nvml="len(nvmlDeviceGetRetiredPages(NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR))",
    ),
    FieldSpec(
        name="DCGM_FI_DEV_RETIRED_PENDING",
        type=MetricType.COUNTER,
        help="Total number of pages pending retirement.",
        nvml="nvmlDeviceGetRetiredPagesPendingStatus",
    ),
    FieldSpec(
        name="DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        type=MetricType.COUNTER,
        help="Total number of NVLink flow-control CRC errors.",
        nvml=_fv("NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"),
    ),
    FieldSpec(
        name="DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        type=MetricType.COUNTER,
        help="Total number of NVLink data CRC errors.",
        nvml=_fv("NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"),
    ),
    FieldSpec(
        name="DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        type=MetricType.COUNTER,
        help="Total number of NVLink retries.",
        nvml=_fv("NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"),
    ),
    FieldSpec(
        name="DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        type=MetricType.COUNTER,
        help="Total number of NVLink recovery errors.",
        nvml=_fv("NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"),
    ),
    # Per-link bandwidth: only link 0, the one row dcgm-exporter's CSV documents. Other links
    # are one catalog row each (and one scopeId in nvml/readers.py) when someone needs them.
    FieldSpec(
        name="DCGM_FI_DEV_NVLINK_BANDWIDTH_L0",
        type=MetricType.COUNTER,
        help="The number of bytes of active NVLink rx or tx data including both header and "
        "payload.",
        nvml=_fv("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX+TX, scopeId 0")
        + "; rate of the KiB counters in MB/s",
    ),
    # --- commented-out rows: static labels ---
    _label("DCGM_FI_NVML_VERSION", "NVML Version", nvml="nvmlSystemGetNVMLVersion"),
    _label("DCGM_FI_DEV_BRAND", "Device Brand", nvml="nvmlDeviceGetBrand, as a name"),
    _label("DCGM_FI_DEV_SERIAL", "Device Serial Number", nvml="nvmlDeviceGetSerial"),
    _label(
        "DCGM_FI_DEV_OEM_INFOROM_VER",
        "OEM inforom version",
        nvml="nvmlDeviceGetInforomVersion(NVML_INFOROM_OEM)",
    ),
    _label(
        "DCGM_FI_DEV_ECC_INFOROM_VER",
        "ECC inforom version",
        nvml="nvmlDeviceGetInforomVersion(NVML_INFOROM_ECC)",
    ),
    _label(
        "DCGM_FI_DEV_POWER_INFOROM_VER",
        "Power management object inforom version",
        nvml="nvmlDeviceGetInforomVersion(NVML_INFOROM_POWER)",
    ),
    _label(
        "DCGM_FI_DEV_INFOROM_IMAGE_VER",
        "Inforom image version",
        nvml="nvmlDeviceGetInforomImageVersion",
    ),
    _label(
        "DCGM_FI_DEV_VBIOS_VERSION", "VBIOS version of the device", nvml="nvmlDeviceGetVbiosVersion"
    ),
    # --- ours: other DCGM fields with a direct NVML source ---
    FieldSpec(
        name="DCGM_FI_DEV_POWER_USAGE_INSTANT",
        type=MetricType.GAUGE,
        help="Instantaneous power draw (in W).",
        nvml=_fv("NVML_FI_DEV_POWER_INSTANT") + " / 1000",
    ),
    FieldSpec(
        name="DCGM_FI_DEV_FB_TOTAL",
        type=MetricType.GAUGE,
        help="Framebuffer memory total (in MiB).",
        nvml="nvmlDeviceGetMemoryInfo(version=nvmlMemory_v2).total >> 20",
        mig=MigSource.INSTANCE,
        # dcgm-exporter 4.9 serves total GPU memory in bytes under this name.
        name_v49="DCGM_FI_DEV_FB_CAPACITY_BYTES",
        scale_v49=_BYTES_PER_MIB,
        help_v49="Framebuffer memory total (in bytes).",
    ),
    FieldSpec(
        name="DCGM_FI_DEV_ROW_REMAP_PENDING",
        type=MetricType.GAUGE,
        help="Whether remapping of rows is pending (the GPU needs a reset).",
        nvml=_fv("NVML_FI_DEV_REMAPPED_PENDING"),
    ),
    FieldSpec(
        name="DCGM_FI_DEV_MAX_SM_CLOCK",
        type=MetricType.GAUGE,
        help="Maximum SM clock frequency (in MHz).",
        nvml="nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM)",
    ),
    FieldSpec(
        name="DCGM_FI_DEV_MAX_MEM_CLOCK",
        type=MetricType.GAUGE,
        help="Maximum memory clock frequency (in MHz).",
        nvml="nvmlDeviceGetMaxClockInfo(NVML_CLOCK_MEM)",
    ),
    FieldSpec(
        name="DCGM_FI_DEV_POWER_MGMT_LIMIT",
        type=MetricType.GAUGE,
        help="Power management limit (in W).",
        nvml="nvmlDeviceGetPowerManagementLimit / 1000",
    ),
    FieldSpec(
        name="DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
        type=MetricType.GAUGE,
        help="Effective power limit the driver enforces (in W).",
        nvml="nvmlDeviceGetEnforcedPowerLimit / 1000",
    ),
    # DCGM field 112 has two names: the current one and the pre-DCGM-3.3 one.
    FieldSpec(
        name=CLOCK_EVENT_REASONS_FIELD,
        type=MetricType.GAUGE,
        help="Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*).",
        nvml="nvmlDeviceGetCurrentClocksEventReasons",
    ),
    FieldSpec(
        name="DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        type=MetricType.GAUGE,
        help="Current clock throttle reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*).",
        nvml="nvmlDeviceGetCurrentClocksEventReasons",
    ),
    # --- dcgm-exporter's own (DCGM_EXP_*) metrics, commented out in its CSV ---
    FieldSpec(
        name=XID_COUNT_FIELD,
        type=MetricType.GAUGE,
        help="Count of XID Errors within user-specified time window "
        "(see xid-count-window-size param).",
        nvml="nvmlEventSetWait_v2 on nvmlEventTypeXidCriticalError, counted over -x (windows.py)",
    ),
    FieldSpec(
        name=HEALTH_FIELD,
        type=MetricType.COUNTER,  # as dcgm-exporter's CSV declares it
        help="DCGM reported health status",
        nvml="XIDs, GPU lost, ECC DBE, pending retirement/remap, violations (health.py)",
    ),
    FieldSpec(
        name=P2P_FIELD,
        type=MetricType.COUNTER,  # as dcgm-exporter's CSV declares it
        help="P2P NvLink status",
        nvml="nvmlDeviceGetP2PStatus(NVML_P2P_CAPS_INDEX_NVLINK) per GPU pair, at discovery",
    ),
    FieldSpec(
        name=CLOCK_EVENTS_COUNT_FIELD,
        type=MetricType.GAUGE,
        help="Count of clock events within the user-specified time window "
        "(see clock-events-count-window-size param).",
        nvml="nvmlDeviceGetCurrentClocksEventReasons, counted over "
        "--clock-events-count-window-size (windows.py)",
    ),
)

# dcgm-exporter 1.x's lowercase names (`etc/1.x-compatibility-metrics.csv`), as go-dcgm's
# `pkg/dcgm/legacy_fields.csv` maps them to DCGM field ids (in the comments). Its
# dcgm_pcie_{tx,rx}_throughput (200, 201) have no catalog field and stay unknown.
_V1_NAMES: Mapping[str, str] = {
    "DCGM_FI_DEV_SM_CLOCK": "dcgm_sm_clock",  # 100
    "DCGM_FI_DEV_MEM_CLOCK": "dcgm_memory_clock",  # 101
    "DCGM_FI_DEV_MEMORY_TEMP": "dcgm_memory_temp",  # 140
    "DCGM_FI_DEV_GPU_TEMP": "dcgm_gpu_temp",  # 150
    "DCGM_FI_DEV_POWER_USAGE": "dcgm_power_usage",  # 155
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "dcgm_total_energy_consumption",  # 156
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "dcgm_pcie_replay_counter",  # 202
    "DCGM_FI_DEV_GPU_UTIL": "dcgm_gpu_utilization",  # 203
    "DCGM_FI_DEV_MEM_COPY_UTIL": "dcgm_mem_copy_utilization",  # 204
    "DCGM_FI_DEV_ENC_UTIL": "dcgm_enc_utilization",  # 206
    "DCGM_FI_DEV_DEC_UTIL": "dcgm_dec_utilization",  # 207
    XID_FIELD: "dcgm_xid_errors",  # 230
    "DCGM_FI_DEV_POWER_VIOLATION": "dcgm_power_violation",  # 240
    "DCGM_FI_DEV_THERMAL_VIOLATION": "dcgm_thermal_violation",  # 241
    "DCGM_FI_DEV_SYNC_BOOST_VIOLATION": "dcgm_sync_boost_violation",  # 242
    "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION": "dcgm_board_limit_violation",  # 243
    "DCGM_FI_DEV_LOW_UTIL_VIOLATION": "dcgm_low_util_violation",  # 244
    "DCGM_FI_DEV_RELIABILITY_VIOLATION": "dcgm_reliability_violation",  # 245
    "DCGM_FI_DEV_FB_FREE": "dcgm_fb_free",  # 251
    "DCGM_FI_DEV_FB_USED": "dcgm_fb_used",  # 252
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "dcgm_ecc_sbe_volatile_total",  # 310
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "dcgm_ecc_dbe_volatile_total",  # 311
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": "dcgm_ecc_sbe_aggregate_total",  # 312
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": "dcgm_ecc_dbe_aggregate_total",  # 313
    "DCGM_FI_DEV_RETIRED_SBE": "dcgm_retired_pages_sbe",  # 390
    "DCGM_FI_DEV_RETIRED_DBE": "dcgm_retired_pages_dbe",  # 391
    "DCGM_FI_DEV_RETIRED_PENDING": "dcgm_retired_pages_pending",  # 392
    # 409, 419, 429, 439
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "dcgm_nvlink_flit_crc_error_count_total",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": "dcgm_nvlink_data_crc_error_count_total",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": "dcgm_nvlink_replay_error_count_total",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": "dcgm_nvlink_recovery_error_count_total",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "dcgm_nvlink_bandwidth_total",  # 449
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "dcgm_fi_prof_gr_engine_active",  # 1001
    "DCGM_FI_PROF_SM_ACTIVE": "dcgm_fi_prof_sm_active",  # 1002
    "DCGM_FI_PROF_SM_OCCUPANCY": "dcgm_fi_prof_sm_occupancy",  # 1003
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "dcgm_fi_prof_pipe_tensor_active",  # 1004
    "DCGM_FI_PROF_DRAM_ACTIVE": "dcgm_fi_prof_dram_active",  # 1005
    "DCGM_FI_PROF_PCIE_TX_BYTES": "dcgm_fi_prof_pcie_tx_bytes",  # 1009
    "DCGM_FI_PROF_PCIE_RX_BYTES": "dcgm_fi_prof_pcie_rx_bytes",  # 1010
}

CATALOG: Mapping[str, FieldSpec] = MappingProxyType(
    {spec.name: replace(spec, name_v1=_V1_NAMES.get(spec.name)) for spec in _SPECS}
)
"""Every field the exporter can serve, keyed by legacy DCGM name."""

XID_MESSAGES: Mapping[int, str] = MappingProxyType(
    {
        8: "GPU stopped processing (engine timeout)",
        13: "Graphics engine exception (e.g. illegal memory access in a kernel)",
        31: "GPU memory page fault",
        32: "Invalid or corrupted push buffer stream",
        38: "Driver firmware error",
        43: "GPU stopped processing: a context hit a fault and was reset",
        45: "Preemptive cleanup after an earlier error or a killed process",
        48: "Double-bit ECC error",
        56: "Display engine error",
        57: "Error programming the video memory interface",
        58: "Unstable video memory interface detected",
        61: "Internal micro-controller breakpoint or warning",
        62: "Internal micro-controller halt",
        63: "ECC page retirement or row remapping recorded",
        64: "ECC page retirement or row remapping failed to record",
        65: "Video processor exception",
        68: "Video decoder (NVDEC) exception",
        69: "Graphics engine class error",
        74: "NVLink error",
        79: "GPU has fallen off the bus",
        92: "High single-bit ECC error rate",
        94: "Contained ECC error: only the affected applications must restart",
        95: "Uncontained ECC error: the GPU needs a reset",
        109: "Context switch timeout",
        119: "GSP firmware RPC timeout",
        120: "GSP firmware error",
        154: "GPU recovery action changed",
    }
)
"""Short descriptions of well-known XIDs, for the `err_msg` label."""
