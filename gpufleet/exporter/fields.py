"""The field catalog: every DCGM field the exporter can serve, and how it maps to NVML.

Pure data. The metric name is the DCGM field name (dcgm-exporter's legacy names, <= 4.8);
`name_v49` and `scale_v49` give the 4.9 name and unit. `nvml.py` has one reader per
catalog entry; a test keeps the two in step.
"""

from dataclasses import dataclass
from enum import StrEnum


class MetricType(StrEnum):
    """The `type` column of a counters CSV."""

    GAUGE = "gauge"
    COUNTER = "counter"
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
