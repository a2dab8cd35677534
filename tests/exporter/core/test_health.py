"""DCGM's health rules applied to NVML readings: table rows, one per rule (issue 15)."""

import pytest

from gpufleet.exporter.core.health import (
    WATCHES,
    HealthInputs,
    HealthResult,
    gpu_health,
    moved,
)

P, W, F = HealthResult.PASS, HealthResult.WARN, HealthResult.FAIL


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        (HealthInputs(), {}),
        (HealthInputs(xids=(13, 45)), {}),  # application errors: no watch of DCGM's
        (HealthInputs(xids=(79,)), {"ALL": (F, "DCGM_FR_FALLEN_OFF_BUS")}),
        (HealthInputs(lost=True), {"ALL": (F, "DCGM_FR_FALLEN_OFF_BUS")}),
        (HealthInputs(xids=(95,)), {"ALL": (F, "DCGM_FR_UNCONTAINED_ERROR")}),
        (HealthInputs(xids=(94,)), {"ALL": (W, "DCGM_FR_UNKNOWN(131)")}),
        (HealthInputs(xids=(48,)), {"ALL": (F, "DCGM_FR_XID_ERROR")}),
        (HealthInputs(xids=(63,)), {"MEM": (W, "DCGM_FR_PENDING_PAGE_RETIREMENTS")}),
        (HealthInputs(xids=(42,)), {"PCIE": (W, "DCGM_FR_XID_ERROR")}),
        (HealthInputs(xids=(60,)), {"THERMAL": (W, "DCGM_FR_CLOCK_THROTTLE_THERMAL")}),
        (HealthInputs(xids=(57,)), {"POWER": (W, "DCGM_FR_CLOCK_THROTTLE_POWER")}),
        (
            HealthInputs(xids=(74, 73)),
            {"ALL": (F, "DCGM_FR_XID_ERROR"), "NVLINK": (W, "DCGM_FR_XID_ERROR")},
        ),
        (HealthInputs(ecc_dbe_volatile=2), {"MEM": (F, "DCGM_FR_VOLATILE_DBE_DETECTED")}),
        (HealthInputs(ecc_dbe_volatile=0, retired_pending=0, remap_pending=0), {}),
        (HealthInputs(retired_pending=1), {"MEM": (W, "DCGM_FR_PENDING_PAGE_RETIREMENTS")}),
        (HealthInputs(remap_pending=1), {"MEM": (W, "DCGM_FR_PENDING_ROW_REMAP")}),
        (HealthInputs(remap_failure=1), {"MEM": (F, "DCGM_FR_ROW_REMAP_FAILURE")}),
        (
            HealthInputs(ecc_dbe_volatile=1, remap_pending=1),
            {"MEM": (F, "DCGM_FR_VOLATILE_DBE_DETECTED")},
        ),
        (
            HealthInputs(xids=(31,), remap_pending=1),
            {"MEM": (W, "DCGM_FR_PENDING_ROW_REMAP")},
        ),
        (
            HealthInputs(thermal_violation_moved=True),
            {"THERMAL": (W, "DCGM_FR_CLOCK_THROTTLE_THERMAL")},
        ),
        (HealthInputs(power_violation_moved=True), {"POWER": (W, "DCGM_FR_CLOCK_THROTTLE_POWER")}),
    ],
    ids=[
        "healthy",
        "xid-outside-dcgms-tables",
        "xid79-fallen-off-bus",
        "gpu-lost",
        "xid95-uncontained",
        "xid94-contained-unknown-to-dcgm-exporter",
        "xid48-dbe",
        "xid63-mem",
        "xid42-pcie",
        "xid60-thermal",
        "xid57-power",
        "nvlink-and-all",
        "volatile-dbe",
        "zero-readings",
        "pending-retirement",
        "pending-row-remap",
        "row-remap-failure",
        "most-severe-wins",
        "later-wins-among-equals",
        "thermal-violation",
        "power-violation",
    ],
)
def test_gpu_health(inputs: HealthInputs, expected: dict) -> None:
    health = gpu_health(inputs)
    assert list(health) == list(WATCHES)
    assert {w: (i.result, i.code) for w, i in health.items() if i.result != P} == expected
    assert all(i.code == "DCGM_FR_OK" for w, i in health.items() if w not in expected)


@pytest.mark.parametrize(
    ("history", "now", "expected"),
    [
        ((), 100.0, False),
        (((100.0, 5.0),), 100.0, False),
        (((50.0, 5.0), (100.0, 5.0)), 100.0, False),
        (((50.0, 5.0), (100.0, 6.0)), 100.0, True),
        (((30.0, 5.0), (39.0, 6.0), (100.0, 6.0)), 100.0, False),  # moved over a minute ago
        (((40.0, 5.0), (100.0, 6.0)), 100.0, True),  # the window includes its start
    ],
    ids=["none", "one", "flat", "moved", "moved-before-the-window", "window-edge"],
)
def test_violation_moved_within_the_last_minute(history, now: float, expected: bool) -> None:
    assert moved(history, now=now) is expected
