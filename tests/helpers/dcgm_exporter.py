"""dcgm-exporter's own artifacts (tests/data/dcgm-exporter: verbatim at one upstream commit)
and the whole catalog a user gets from them by turning on every optional row."""

import re
from pathlib import Path

from helpers import TEST_DATA

ARTIFACTS = TEST_DATA / "dcgm-exporter"
DEFAULT_COUNTERS = ARTIFACTS / "default-counters.csv"
DCP_COUNTERS = ARTIFACTS / "dcp-metrics-included.csv"
V1_COUNTERS = ARTIFACTS / "1.x-compatibility-metrics.csv"
DASHBOARD = ARTIFACTS / "dcgm-exporter-dashboard.json"

# A field row, on or commented out: `DCGM_FI_X, type, help` (1.x files: `dcgm_x, ...`).
_ROW = re.compile(r"^(#\s*)?((?:DCGM|dcgm)_\w+)\s*,")
# The rows of dcgm-exporter's files a real H100 has no value for, in both spellings: Hopper
# remaps rows instead of retiring pages, and its InfoROM has no power management object
# (README, "Compatible with dcgm-exporter").
NOT_ON_H100 = frozenset(
    {
        "DCGM_FI_DEV_RETIRED_SBE",
        "DCGM_FI_DEV_RETIRED_DBE",
        "DCGM_FI_DEV_RETIRED_PENDING",
        "DCGM_FI_DEV_POWER_INFOROM_VER",
        "dcgm_retired_pages_sbe",
        "dcgm_retired_pages_dbe",
        "dcgm_retired_pages_pending",
    }
)


def field_rows(counters: Path) -> set[str]:
    """The fields a counters file turns on (its rows not commented out)."""
    lines = counters.read_text().splitlines()
    return {m[2] for line in lines if (m := _ROW.match(line)) and not m[1]}


def every_row_on(counters: Path, dest: Path) -> Path:
    """`counters` written to `dest` with each commented-out field row turned on, as a user
    who wants everything edits it: the rows of fields already on stay the only ones."""
    lines = counters.read_text().splitlines()
    on = field_rows(counters)
    out = []
    for line in lines:
        m = _ROW.match(line)
        if m and m[1] and m[2] not in on:
            on.add(m[2])
            line = line[len(m[1]) :]
        out.append(line)
    dest.write_text("\n".join(out) + "\n")
    return dest
