"""The field catalog against dcgm-exporter's published names, types, help texts and units."""

from types import MappingProxyType

import pytest

from gpufleet.exporter.core.fields import CATALOG, XID_MESSAGES, FieldSpec, MetricType, MigSource

GAUGE, COUNTER, LABEL = MetricType.GAUGE, MetricType.COUNTER, MetricType.LABEL

# dcgm-exporter's default counters (4.x up to 4.8.x): the 25 active rows and the label row,
# as etc/default-counters.csv spells them.
DEFAULT_ROWS = (
    ("DCGM_FI_DEV_SM_CLOCK", GAUGE, "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", GAUGE, "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", GAUGE, "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", GAUGE, "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", GAUGE, "Power draw (in W)."),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        COUNTER,
        "Total energy consumption since boot (in mJ).",
    ),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", COUNTER, "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", GAUGE, "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", GAUGE, "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", GAUGE, "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", GAUGE, "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", GAUGE, "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", GAUGE, "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", GAUGE, "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", GAUGE, "Framebuffer memory reserved (in MiB)."),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        COUNTER,  # a rate in truth; the CSV says counter and dashboards rely on the name
        "Total number of NVLink bandwidth counters for all lanes.",
    ),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", GAUGE, "vGPU License status"),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        COUNTER,
        "Number of remapped rows for uncorrectable errors",
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        COUNTER,
        "Number of remapped rows for correctable errors",
    ),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", GAUGE, "Whether remapping of rows has failed"),
    ("DCGM_FI_DRIVER_VERSION", LABEL, "Driver Version"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GAUGE, "Ratio of time the graphics engine is active."),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        GAUGE,
        "Ratio of cycles the tensor (HMMA) pipe is active.",
    ),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        GAUGE,
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        GAUGE,
        "The rate of data transmitted over the PCIe bus - including both protocol headers and "
        "data payloads - in bytes per second.",
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        GAUGE,
        "The rate of data received over the PCIe bus - including both protocol headers and "
        "data payloads - in bytes per second.",
    ),
)

# Commented-out rows of the same CSV that NVML can serve, and of its chart's
# customMetrics example (deployment/values.yaml).
OPTIONAL_ROWS = (
    (
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        COUNTER,
        "Total number of bytes transmitted through PCIe TX (in KB) via NVML.",
    ),
    (
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        COUNTER,
        "Total number of bytes received through PCIe RX (in KB) via NVML.",
    ),
    (
        "DCGM_FI_DEV_POWER_VIOLATION",
        COUNTER,
        "Throttling duration due to power constraints (in ns).",
    ),
    (
        "DCGM_FI_DEV_LOW_UTIL_VIOLATION",
        COUNTER,
        "Throttling duration due to low utilization (in ns).",
    ),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", COUNTER, "Total number of double-bit persistent ECC errors."),
    ("DCGM_FI_DEV_RETIRED_PENDING", COUNTER, "Total number of pages pending retirement."),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", COUNTER, "Total number of NVLink retries."),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0",
        COUNTER,
        "The number of bytes of active NVLink rx or tx data including both header and payload.",
    ),
    ("DCGM_FI_DEV_SERIAL", LABEL, "Device Serial Number"),
    ("DCGM_FI_DEV_POWER_INFOROM_VER", LABEL, "Power management object inforom version"),
    ("DCGM_FI_PROF_SM_ACTIVE", GAUGE, "The ratio of cycles an SM has at least 1 warp assigned."),
    ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", GAUGE, "Ratio of cycles the fp16 pipes are active."),
)


@pytest.mark.parametrize(
    ("name", "type_", "help_"), DEFAULT_ROWS, ids=[row[0] for row in DEFAULT_ROWS]
)
def test_default_row_matches_dcgm_exporter(name: str, type_: MetricType, help_: str) -> None:
    spec = CATALOG[name]
    assert (spec.type, spec.help, spec.default) == (type_, help_, True)


@pytest.mark.parametrize(
    ("name", "type_", "help_"), OPTIONAL_ROWS, ids=[row[0] for row in OPTIONAL_ROWS]
)
def test_optional_row_matches_dcgm_exporter(name: str, type_: MetricType, help_: str) -> None:
    spec = CATALOG[name]
    assert (spec.type, spec.help, spec.default) == (type_, help_, False)


def test_default_flag_marks_exactly_the_default_list() -> None:
    assert {n for n, s in CATALOG.items() if s.default} == {row[0] for row in DEFAULT_ROWS}


def test_catalog_is_read_only_and_keyed_by_name() -> None:
    assert isinstance(CATALOG, MappingProxyType)
    assert all(isinstance(s, FieldSpec) and s.name == n for n, s in CATALOG.items())
    assert all(s.help and s.nvml for s in CATALOG.values())


# 4.9: names from DCGM 4.7's deprecation table, units per the 4.9.0 release notes.
V49_ROWS = (
    ("DCGM_FI_DEV_SM_CLOCK", None, 1e6),
    ("DCGM_FI_DEV_MEM_CLOCK", None, 1e6),
    ("DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", 1.0),
    ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", 1.0),
    ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS", 1.0),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", None, 1e-3),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_PCIE_REPLAY_TOTAL", 1.0),
    ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO", 0.01),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", None, 0.01),
    ("DCGM_FI_DEV_ENC_UTIL", None, 0.01),
    ("DCGM_FI_DEV_DEC_UTIL", None, 0.01),
    ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR", 1.0),
    ("DCGM_FI_DEV_FB_FREE", None, 2**20),
    ("DCGM_FI_DEV_FB_USED", None, 2**20),
    ("DCGM_FI_DEV_FB_RESERVED", None, 2**20),
    ("DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_FB_CAPACITY_BYTES", 2**20),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL", 1e6),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", 1.0),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL", 1.0),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_FAILED", 1.0),
    ("DCGM_FI_DRIVER_VERSION", "DCGM_FI_SYSTEM_DRIVER_VERSION", 1.0),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", 1.0),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_TENSOR_UTIL_RATIO", 1.0),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_DRAM_UTIL_RATIO", 1.0),
    ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_UTIL_RATIO", 1.0),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_SM_OCCUPANCY_RATIO", 1.0),
    ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "DCGM_FI_PROF_FP64_UTIL_RATIO", 1.0),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", None, 1.0),
)


@pytest.mark.parametrize(("name", "name_v49", "scale"), V49_ROWS, ids=[row[0] for row in V49_ROWS])
def test_v49_name_and_unit(name: str, name_v49: str | None, scale: float) -> None:
    spec = CATALOG[name]
    assert (spec.name_v49, spec.scale_v49) == (name_v49, pytest.approx(scale))


def test_unit_change_comes_with_a_v49_help_text() -> None:
    changed = [s for s in CATALOG.values() if s.scale_v49 != 1.0]
    assert len([s for s in changed if s.default]) == 11  # "Eleven of them also change unit"
    assert all(s.help_v49 for s in changed)


def test_v49_names_are_unique_and_never_shadow_a_legacy_name() -> None:
    v49 = [s.name_v49 for s in CATALOG.values() if s.name_v49]
    assert len(v49) == len(set(v49))
    assert not set(v49) & set(CATALOG)


MIG_ROWS = (
    ("DCGM_FI_DEV_FB_USED", MigSource.INSTANCE),
    ("DCGM_FI_DEV_FB_FREE", MigSource.INSTANCE),
    ("DCGM_FI_DEV_FB_TOTAL", MigSource.INSTANCE),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", MigSource.INSTANCE),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", MigSource.INSTANCE),
    ("DCGM_FI_DEV_GPU_UTIL", MigSource.NONE),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", MigSource.NONE),
    ("DCGM_FI_DEV_ENC_UTIL", MigSource.NONE),
    ("DCGM_FI_DEV_DEC_UTIL", MigSource.NONE),
    ("DCGM_FI_DEV_GPU_TEMP", MigSource.PARENT),
    ("DCGM_FI_DEV_POWER_USAGE", MigSource.PARENT),
    ("DCGM_FI_DEV_SM_CLOCK", MigSource.PARENT),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", MigSource.PARENT),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", MigSource.PARENT),
)


@pytest.mark.parametrize(("name", "source"), MIG_ROWS, ids=[row[0] for row in MIG_ROWS])
def test_mig_source(name: str, source: MigSource) -> None:
    assert CATALOG[name].mig is source


def test_profiling_fields_are_gpm_fields_read_per_instance() -> None:
    prof = {n for n in CATALOG if n.startswith("DCGM_FI_PROF_")}
    assert prof == {n for n, s in CATALOG.items() if s.gpm}
    assert len(prof) == 10
    assert all(CATALOG[n].mig is MigSource.INSTANCE for n in prof)


def test_label_rows() -> None:
    labels = {n for n, s in CATALOG.items() if s.type is LABEL}
    assert labels == {
        "DCGM_FI_DRIVER_VERSION",
        "DCGM_FI_NVML_VERSION",
        "DCGM_FI_DEV_BRAND",
        "DCGM_FI_DEV_SERIAL",
        "DCGM_FI_DEV_OEM_INFOROM_VER",
        "DCGM_FI_DEV_ECC_INFOROM_VER",
        "DCGM_FI_DEV_POWER_INFOROM_VER",
        "DCGM_FI_DEV_INFOROM_IMAGE_VER",
        "DCGM_FI_DEV_VBIOS_VERSION",
    }


@pytest.mark.parametrize(
    "xid", [13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120]
)
def test_well_known_xid_has_a_message(xid: int) -> None:
    message = XID_MESSAGES[xid]
    assert message == message.strip() and message[0].isupper() and '"' not in message
