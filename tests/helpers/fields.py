"""Small FieldSpecs for the exporter's pure tests: legacy and DCGM 4.9 names, units, MIG sources.

Shaped like catalog rows but independent of the catalog, so a catalog change never changes
what these tests mean. `nvml="-"`: no reader behind them.
"""

from gpufleet.exporter.core.fields import FieldSpec, MetricType, MigSource

G, C, L = MetricType.GAUGE, MetricType.COUNTER, MetricType.LABEL

UTIL = FieldSpec(
    name="DCGM_FI_DEV_GPU_UTIL",
    type=G,
    help="GPU utilization (in %).",
    nvml="-",
    mig=MigSource.NONE,
    name_v49="DCGM_FI_DEV_GPU_UTIL_RATIO",
    scale_v49=0.01,
    help_v49="GPU utilization (ratio).",
)
FB_USED = FieldSpec(
    name="DCGM_FI_DEV_FB_USED",
    type=G,
    help="Framebuffer memory used (in MiB).",
    nvml="-",
    mig=MigSource.INSTANCE,
    scale_v49=float(2**20),
    help_v49="Framebuffer memory used (in bytes).",
)
ENERGY = FieldSpec(
    name="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    type=C,
    help="Total energy consumption since boot (in mJ).",
    nvml="-",
    scale_v49=1e-3,
    help_v49="Total energy consumption since boot (in J).",
)
XID = FieldSpec(
    name="DCGM_FI_DEV_XID_ERRORS",
    type=G,
    help="Value of the last XID error encountered.",
    nvml="-",
    name_v49="DCGM_FI_DEV_XID_ERROR",
)
DRIVER = FieldSpec(
    name="DCGM_FI_DRIVER_VERSION",
    type=L,
    help="Driver Version",
    nvml="-",
    name_v49="DCGM_FI_SYSTEM_DRIVER_VERSION",
)
SERIAL = FieldSpec(name="DCGM_FI_DEV_SERIAL", type=L, help="Device Serial Number", nvml="-")
FB_FREE = FieldSpec(
    name="DCGM_FI_DEV_FB_FREE",
    type=G,
    help="Framebuffer memory free (in MiB).",
    nvml="-",
    mig=MigSource.INSTANCE,
)
SM_CLOCK = FieldSpec(
    name="DCGM_FI_DEV_SM_CLOCK",
    type=G,
    help="SM clock frequency (in MHz).",
    nvml="-",
    scale_v49=1e6,
    help_v49="SM clock frequency (in Hz).",
)
GPU_TEMP = FieldSpec(
    name="DCGM_FI_DEV_GPU_TEMP",
    type=G,
    help="GPU temperature (in C).",
    nvml="-",
    name_v49="DCGM_FI_DEV_GPU_TEMP_CELSIUS",
)
