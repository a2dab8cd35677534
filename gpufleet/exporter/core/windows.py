"""Counting events within a sliding time window: dcgm-exporter's DCGM_EXP_*_COUNT metrics.

`DCGM_EXP_XID_ERRORS_COUNT` counts XID events per xid; `DCGM_EXP_CLOCK_EVENTS_COUNT`
counts, per clock event reason, the *collections* in which NVML reported that reason bit
set. NVML only tells the reasons active at the moment of the call, so the clock count
depends on the collection interval (`-c`), just as dcgm's depends on its watch interval:
a 5 min window at a 5 s interval counts at most 60 per reason.

A window is the half-open interval (now - window, now]: an event exactly one window old has
fallen out. Histories are (monotonic seconds, value) pairs in time order, as the edges
record them.

Pure: no I/O, no clock (`now` is an argument), no logging.
"""

from collections import Counter
from collections.abc import Iterable, Iterator

History = tuple[tuple[float, int], ...]
"""(monotonic seconds, value) pairs, oldest first: an xid, or a clock event reason bitmask."""

HISTORY_MAX_ENTRIES = 10_000
"""Most entries an edge keeps per GPU, so an XID storm or a tiny interval cannot grow
memory without bound (older entries are dropped first, undercounting only then)."""

# dcgm-exporter's `clock_event` label values for NVML's nvmlClocksEventReason* bits
# (pynvml's constants; tests/exporter/core/test_windows.py checks the values against pynvml).
CLOCK_EVENTS: tuple[tuple[str, int], ...] = (
    ("gpu_idle", 0x1),  # nvmlClocksEventReasonGpuIdle
    ("clocks_setting", 0x2),  # nvmlClocksEventReasonApplicationsClocksSetting
    ("power_cap", 0x4),  # nvmlClocksEventReasonSwPowerCap
    ("hw_slowdown", 0x8),  # nvmlClocksEventReasonHwSlowdown
    ("sync_boost", 0x10),  # nvmlClocksEventReasonSyncBoost
    ("sw_thermal", 0x20),  # nvmlClocksEventReasonSwThermalSlowdown
    ("hw_thermal", 0x40),  # nvmlClocksEventReasonHwThermalSlowdown
    ("hw_power_brake", 0x80),  # nvmlClocksEventReasonHwPowerBrakeSlowdown
    ("display_clocks", 0x100),  # nvmlClocksEventReasonDisplayClockSetting
)


def _within(history: Iterable[tuple[float, int]], now: float, window_ms: int) -> Iterator[int]:
    start = now - window_ms / 1000.0
    return (value for at, value in history if start < at <= now)


def count_xids(
    history: Iterable[tuple[float, int]], *, now: float, window_ms: int
) -> dict[int, int]:
    """XID events per xid in the window ending at `now`; xids with none are absent."""
    return dict(sorted(Counter(_within(history, now, window_ms)).items()))


def count_clock_events(
    history: Iterable[tuple[float, int]], *, now: float, window_ms: int
) -> dict[str, int]:
    """Per reason (CLOCK_EVENTS order), the entries in the window with its bit set; reasons
    never set are absent. Bits outside CLOCK_EVENTS are not counted."""
    counts = dict.fromkeys((name for name, _ in CLOCK_EVENTS), 0)
    for mask in _within(history, now, window_ms):
        for name, bit in CLOCK_EVENTS:
            if mask & bit:
                counts[name] += 1
    return {name: n for name, n in counts.items() if n}
