"""GPU health as dcgm-exporter's DCGM_EXP_GPU_HEALTH_STATUS reports it, from what NVML tells.

dcgm-exporter asks DCGM's health module (`DCGM_HEALTH_WATCH_ALL`) and serves, per GPU, one
series per health watch with its result (PASS 0, WARN 10, FAIL 20) and the incident's
`DCGM_FR_*` code. DCGM has no NVML-free secret for most checks: it watches NVML fields and
XIDs. This module applies DCGM's own rules (modules/health/DcgmHealthWatch.cpp) to the same
NVML readings:

- XIDs since the exporter started, in DCGM's tables: the "devastating" ones under `ALL`, the
  subsystem ones under MEM, PCIE, THERMAL, POWER and NVLINK (DCGM never forgets an XID either);
- a GPU NVML reports lost: `ALL` FAIL `DCGM_FR_FALLEN_OFF_BUS`, what XID 79 says;
- MEM: volatile double-bit ECC errors (FAIL), pages pending retirement (WARN), failed row
  remapping (FAIL), and ours: rows pending remapping (WARN `DCGM_FR_PENDING_ROW_REMAP`);
- THERMAL / POWER: the thermal / power violation counters moved in the last minute (WARN).

What DCGM checks with no NVML source here stays PASS: PCIe replay rate against the link's
expected rate, NVLink error-counter thresholds and link state, InfoROM validity, the driver's
recovery action, and the PMU, MCU and SM watches (XID-only in DCGM, with no XID mapped).
Where DCGM reports several incidents for one watch, dcgm-exporter keeps the last it lists;
this keeps the most severe (the last among equals, in DCGM's order).

Pure: no I/O, no clock, no logging.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum


class HealthResult(IntEnum):
    """dcgmHealthWatchResults_t: the series value."""

    PASS = 0
    WARN = 10
    FAIL = 20


# The `health_watch` values dcgm-exporter serves, in its order (gpuHealthChecks).
WATCHES = (
    "PCIE",
    "NVLINK",
    "PMU",
    "MCU",
    "MEM",
    "SM",
    "INFOROM",
    "THERMAL",
    "POWER",
    "DRIVER",
    "ALL",
)

# `health_error_code` as dcgm-exporter prints DCGM's codes: names from its table, where an
# alias prints its older name and a code missing from it prints DCGM_FR_UNKNOWN(<code>).
OK = "DCGM_FR_OK"
XID_ERROR = "DCGM_FR_XID_ERROR"
VOLATILE_DBE = "DCGM_FR_VOLATILE_DBE_DETECTED"
PENDING_PAGE_RETIREMENTS = "DCGM_FR_PENDING_PAGE_RETIREMENTS"
ROW_REMAP_FAILURE = "DCGM_FR_ROW_REMAP_FAILURE"
PENDING_ROW_REMAP = "DCGM_FR_PENDING_ROW_REMAP"
CLOCKS_EVENT_THERMAL = "DCGM_FR_CLOCK_THROTTLE_THERMAL"  # DCGM_FR_CLOCKS_EVENT_THERMAL, 10
CLOCKS_EVENT_POWER = "DCGM_FR_CLOCK_THROTTLE_POWER"  # DCGM_FR_CLOCKS_EVENT_POWER, 12
FALLEN_OFF_BUS = "DCGM_FR_FALLEN_OFF_BUS"
UNCONTAINED_ERROR = "DCGM_FR_UNCONTAINED_ERROR"
CONTAINED_ERROR = "DCGM_FR_UNKNOWN(131)"  # DCGM_FR_CONTAINED_ERROR: not in dcgm-exporter's table

_W, _F = HealthResult.WARN, HealthResult.FAIL

# DCGM's BuildXidMappings: xid -> (watch, result, code). XID 93 (InfoROM) is Volta-only in
# DCGM and left out, as the architecture is not known here.
XID_INCIDENTS: Mapping[int, tuple[str, HealthResult, str]] = {
    48: ("ALL", _F, XID_ERROR),
    74: ("ALL", _F, XID_ERROR),
    79: ("ALL", _F, FALLEN_OFF_BUS),
    94: ("ALL", _W, CONTAINED_ERROR),
    95: ("ALL", _F, UNCONTAINED_ERROR),
    119: ("ALL", _F, XID_ERROR),
    120: ("ALL", _F, XID_ERROR),
    140: ("ALL", _F, XID_ERROR),
    31: ("MEM", _W, XID_ERROR),
    32: ("MEM", _W, XID_ERROR),
    43: ("MEM", _W, XID_ERROR),
    63: ("MEM", _W, PENDING_PAGE_RETIREMENTS),
    64: ("MEM", _F, ROW_REMAP_FAILURE),
    38: ("PCIE", _W, XID_ERROR),
    39: ("PCIE", _W, XID_ERROR),
    42: ("PCIE", _W, XID_ERROR),
    60: ("THERMAL", _W, CLOCKS_EVENT_THERMAL),
    61: ("THERMAL", _W, XID_ERROR),
    62: ("THERMAL", _W, XID_ERROR),
    54: ("POWER", _W, XID_ERROR),
    56: ("POWER", _W, XID_ERROR),
    57: ("POWER", _W, CLOCKS_EVENT_POWER),
    58: ("POWER", _W, XID_ERROR),
    78: ("POWER", _W, XID_ERROR),
    67: ("NVLINK", _W, XID_ERROR),
    73: ("NVLINK", _W, XID_ERROR),
    121: ("NVLINK", _W, XID_ERROR),
    137: ("NVLINK", _W, XID_ERROR),
}

VIOLATION_WINDOW_SECONDS = 60.0
"""DCGM compares the violation counters over the last minute."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Incident:
    """What one watch reports for one GPU: a series' value and `health_error_code`."""

    result: HealthResult
    code: str


PASS = Incident(result=HealthResult.PASS, code=OK)


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthInputs:
    """One GPU's NVML readings behind its health; None where NVML could not tell."""

    lost: bool = False
    xids: Iterable[int] = ()  # every xid seen since the exporter started
    ecc_dbe_volatile: float | None = None
    retired_pending: float | None = None
    remap_pending: float | None = None
    remap_failure: float | None = None
    thermal_violation_moved: bool = False  # within VIOLATION_WINDOW_SECONDS
    power_violation_moved: bool = False


def gpu_health(inputs: HealthInputs) -> dict[str, Incident]:
    """Every watch in WATCHES order, PASS unless an incident says otherwise."""
    found: list[tuple[str, Incident]] = []  # in DCGM's order: XIDs first, then readings
    for xid in sorted(set(inputs.xids)):
        if xid in XID_INCIDENTS:
            watch, result, code = XID_INCIDENTS[xid]
            found.append((watch, Incident(result=result, code=code)))
    if inputs.lost:
        found.append(("ALL", Incident(result=_F, code=FALLEN_OFF_BUS)))
    readings = (
        (inputs.ecc_dbe_volatile, "MEM", _F, VOLATILE_DBE),
        (inputs.retired_pending, "MEM", _W, PENDING_PAGE_RETIREMENTS),
        (inputs.remap_failure, "MEM", _F, ROW_REMAP_FAILURE),
        (inputs.remap_pending, "MEM", _W, PENDING_ROW_REMAP),
        (inputs.thermal_violation_moved, "THERMAL", _W, CLOCKS_EVENT_THERMAL),
        (inputs.power_violation_moved, "POWER", _W, CLOCKS_EVENT_POWER),
    )
    for reading, watch, result, code in readings:
        if reading:  # None (unknown), 0 and False are no incident
            found.append((watch, Incident(result=result, code=code)))
    health = dict.fromkeys(WATCHES, PASS)
    for watch, incident in found:
        if incident.result >= health[watch].result:
            health[watch] = incident
    return health


def moved(history: Iterable[tuple[float, float]], *, now: float) -> bool:
    """Whether a counter's (monotonic seconds, value) readings changed within the last
    VIOLATION_WINDOW_SECONDS ending at `now`: DCGM's first-vs-latest comparison."""
    recent = [value for at, value in history if now - VIOLATION_WINDOW_SECONDS <= at <= now]
    return len(recent) >= 2 and recent[0] != recent[-1]
