"""One node's GPUs in detail: clocks, throttling, ECC, NVLink, PCIe, XIDs."""

# ruff: noqa: E501 (a PromQL query reads best on one line)

from gpufleet.exporter.core.profiles import either_profile as dcgm
from gpufleet_dashboards.grafana import (
    dashboard,
    gpu_series,
    panel,
    row,
    stat,
    target,
    ts,
    variable,
)

D = '{Hostname="$Hostname", gpu=~"$gpu"}'
G = "GPU {{gpu}}"
HOST = '{Hostname="$Hostname"}'
NVLINK_ERRORS = (
    ("CRC_FLIT", "CRC flit"),
    ("CRC_DATA", "CRC data"),
    ("REPLAY", "replay"),
    ("RECOVERY", "recovery"),
)


def node() -> dict:
    panels = [
        row("Utilization and clocks"),
        ts(
            "GPU utilization",
            target(f"sum by (gpu) {dcgm('DCGM_FI_DEV_GPU_UTIL', D)}", G),
            unit="percent",
            w=8,
        ),
        ts("SM clock", target(f"DCGM_FI_DEV_SM_CLOCK{D} * 1000000", G), unit="hertz", w=8),
        ts("Memory clock", target(f"DCGM_FI_DEV_MEM_CLOCK{D} * 1000000", G), unit="hertz", w=8),
        row("Throttling, power and temperature"),
        ts(
            "Clock events (power, thermal, ...)",
            target(
                f"sum by (gpu, clock_event) (DCGM_EXP_CLOCK_EVENTS_COUNT{D})",
                G + " {{clock_event}}",
            ),
            description="Collections in the exporter's window that saw each clock event reason (DCGM_EXP_CLOCK_EVENTS_COUNT, -f).",
            w=8,
        ),
        ts(
            "Power and power limit",
            target(dcgm("DCGM_FI_DEV_POWER_USAGE", D), G),
            target(f"DCGM_FI_DEV_POWER_MGMT_LIMIT{D}", G + " limit"),
            unit="watt",
            w=8,
        ),
        ts(
            "GPU and memory temperature",
            target(dcgm("DCGM_FI_DEV_GPU_TEMP", D), G),
            target(dcgm("DCGM_FI_DEV_MEMORY_TEMP", D), G + " HBM"),
            unit="celsius",
            w=8,
        ),
        row("Memory and ECC"),
        ts(
            "Framebuffer used",
            target(f"sum by (gpu) (DCGM_FI_DEV_FB_USED{D})", G),
            unit="mbytes",
            w=8,
        ),
        ts(
            "ECC errors since the driver loaded",
            target(f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{D}", G + " single-bit"),
            target(f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{D}", G + " double-bit"),
            w=8,
        ),
        ts(
            "Row remapping",
            target(dcgm("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", D), G + " correctable"),
            target(dcgm("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", D), G + " uncorrectable"),
            target(f"DCGM_FI_DEV_ROW_REMAP_PENDING{D}", G + " pending"),
            target(dcgm("DCGM_FI_DEV_ROW_REMAP_FAILURE", D), G + " failed"),
            w=8,
        ),
        row("NVLink and PCIe"),
        ts(
            "NVLink bandwidth",
            target(dcgm("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", D), G),
            unit="MBs",
            w=8,
        ),
        ts(
            "NVLink errors",
            *(
                target(
                    f"sum by (gpu) (increase(DCGM_FI_DEV_NVLINK_{kind}_ERROR_COUNT_TOTAL{D}[$__rate_interval]))",
                    f"{G} {name}",
                )
                for kind, name in NVLINK_ERRORS
            ),
            description="Errors on all links per interval (fields from -f).",
            w=8,
        ),
        ts(
            "PCIe throughput",
            target(f"sum by (gpu) (DCGM_FI_PROF_PCIE_TX_BYTES{D})", G + " tx"),
            target(f"sum by (gpu) (DCGM_FI_PROF_PCIE_RX_BYTES{D})", G + " rx"),
            unit="Bps",
            w=8,
        ),
        row("XIDs"),
        ts(
            "XID events in the exporter's window",
            target(
                'DCGM_EXP_XID_ERRORS_COUNT{Hostname="$Hostname", gpu=~"$gpu", xid!=""}',
                G + " XID {{xid}}",
            ),
            description="Events per XID in the last window (DCGM_EXP_XID_ERRORS_COUNT, -f); they age out, unlike the last-XID gauge.",
            w=12,
        ),
        panel(
            "table",
            "XIDs since the exporter started",
            target(f"sum by (gpu, xid) (gpufleet_xid_errors_total{D})", instant=True),
            w=6,
        ),
        stat(
            "Last XID (DCGM_FI_DEV_XID_ERRORS)",
            target(dcgm("DCGM_FI_DEV_XID_ERRORS", D), G),
            w=6,
            h=8,
        ),
        row("Pods"),
        panel(
            "table",
            "Pods on this node's GPUs",
            target(
                f"sum by (namespace, pod, gpu, GPU_I_PROFILE, GPU_I_ID, vgpu) (gpufleet_pod_gpu_share{D})",
                instant=True,
            ),
            target(
                f"sum by (namespace, pod, gpu, GPU_I_PROFILE, GPU_I_ID, vgpu) (gpufleet_pod_power_usage{D})",
                instant=True,
            ),
            w=24,
        ),
    ]
    variables = [
        variable("Hostname", f"label_values({gpu_series()}, Hostname)", label="Node", multi=False),
        variable("gpu", f"label_values({gpu_series(HOST)}, gpu)"),
    ]
    return dashboard(
        "gpufleet-node",
        "GPU node detail",
        "One node's GPUs: clocks, throttling, power, temperatures, ECC, row remapping, NVLink, PCIe, XIDs and pods.",
        variables,
        panels,
    )
