"""The load model behind the simulator: determinism, monotonic counters, load tracking."""

import pynvml
import pytest
from helpers.clock import ManualClock

from gpufleet.lab.nvml import workload
from gpufleet.lab.nvml.api import SimulatedNvml
from gpufleet.lab.nvml.models import MODELS

UINT_MAX = 0xFFFFFFFF
COUNTER_FIELDS = [
    pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
    pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER,
    (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, UINT_MAX),
    (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, UINT_MAX),
    (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 3),
    pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
    pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
    pynvml.NVML_FI_DEV_PERF_POLICY_POWER,
    pynvml.NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION,
]


def _sim(clock: ManualClock, seed: int = 11) -> SimulatedNvml:
    lib = SimulatedNvml("2xH100+1xA100", seed=seed, clock=clock, wall_clock=lambda: 1.7e9)
    lib.nvmlInit()
    return lib


def _snapshot(lib: SimulatedNvml) -> list[object]:
    out: list[object] = []
    for i in range(lib.nvmlDeviceGetCount()):
        h = lib.nvmlDeviceGetHandleByIndex(i)
        out += [
            lib.nvmlDeviceGetPowerUsage(h),
            lib.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
            lib.nvmlDeviceGetUtilizationRates(h).gpu,
            lib.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            lib.nvmlDeviceGetTotalEnergyConsumption(h),
            lib.nvmlDeviceGetPcieReplayCounter(h),
        ]
        out += [
            (f.nvmlReturn, f.value.ullVal) for f in lib.nvmlDeviceGetFieldValues(h, COUNTER_FIELDS)
        ]
    return out


def _scenario(lib: SimulatedNvml, clock: ManualClock) -> list[list[object]]:
    snaps = []
    pid = lib.spawn_process(
        lib.devices[0].uuid, pod_uid="p", used_memory_bytes=1 << 30, sm_share=0.8
    )
    for step in range(12):
        clock.now += 7.3
        if step == 6:
            lib.kill_process(pid)
        snaps.append(_snapshot(lib))
    return snaps


def test_same_seed_same_clock_same_values() -> None:
    a_clock, b_clock = ManualClock(500.0), ManualClock(500.0)
    a, b = _sim(a_clock), _sim(b_clock)
    try:
        assert _scenario(a, a_clock) == _scenario(b, b_clock)
    finally:
        a.close()
        b.close()


def test_different_seeds_differ() -> None:
    a_clock, b_clock = ManualClock(500.0), ManualClock(500.0)
    a, b = _sim(a_clock, seed=1), _sim(b_clock, seed=2)
    try:
        assert _snapshot(a) != _snapshot(b)
    finally:
        a.close()
        b.close()


def test_counters_never_decrease_even_when_the_clock_goes_back() -> None:
    clock = ManualClock(500.0)
    lib = _sim(clock)
    try:
        pid = lib.spawn_process(lib.devices[1].uuid, pod_uid="p", used_memory_bytes=0, sm_share=1.0)
        times = [500.0 + t for t in (0, 3, 2.5, 60, 59, 61, 4000, 3990, 4000.05, 9000)]
        previous = None
        for i, t in enumerate(times):
            clock.now = t
            if i == 5:
                lib.kill_process(pid)
            values = []
            for g in range(3):
                h = lib.nvmlDeviceGetHandleByIndex(g)
                values.append(lib.nvmlDeviceGetTotalEnergyConsumption(h))
                values.append(lib.nvmlDeviceGetPcieReplayCounter(h))
                values += [f.value.ullVal for f in lib.nvmlDeviceGetFieldValues(h, COUNTER_FIELDS)]
            if previous is not None:
                assert all(v >= p for v, p in zip(values, previous, strict=True)), t
            previous = values
        h = lib.nvmlDeviceGetHandleByIndex(0)
        assert lib.nvmlDeviceGetPcieReplayCounter(h) >= 0
    finally:
        lib.close()


def test_energy_integrates_power() -> None:
    clock = ManualClock(500.0)
    lib = _sim(clock)
    try:
        h = lib.nvmlDeviceGetHandleByIndex(0)
        start = lib.nvmlDeviceGetTotalEnergyConsumption(h)
        clock.now += 100
        spent_mj = lib.nvmlDeviceGetTotalEnergyConsumption(h) - start
        model = MODELS["H100"]
        assert model.idle_power_mw * 100 <= spent_mj <= model.power_limit_mw * 100
    finally:
        lib.close()


def test_load_follows_processes() -> None:
    clock = ManualClock(500.0)
    lib = _sim(clock)
    try:
        h = lib.nvmlDeviceGetHandleByIndex(0)
        idle_power = lib.nvmlDeviceGetPowerUsage(h)
        pids = [
            lib.spawn_process(lib.devices[0].uuid, pod_uid="p", used_memory_bytes=0, sm_share=0.5)
            for _ in range(2)
        ]
        assert lib.nvmlDeviceGetUtilizationRates(h).gpu >= 60
        assert lib.nvmlDeviceGetPowerUsage(h) > idle_power
        for pid in pids:
            lib.kill_process(pid)
        assert lib.nvmlDeviceGetPowerUsage(h) == idle_power
    finally:
        lib.close()


def test_field_values_shape() -> None:
    clock = ManualClock(500.0)
    lib = _sim(clock)
    try:
        h100, a100 = lib.nvmlDeviceGetHandleByIndex(0), lib.nvmlDeviceGetHandleByIndex(2)
        ids = [
            pynvml.NVML_FI_DEV_MEMORY_TEMP,
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 12),
            pynvml.NVML_FI_DEV_REMAPPED_UNC,
            pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
            pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT,
            pynvml.NVML_FI_DEV_RETIRED_SBE,
        ]
        h = lib.nvmlDeviceGetFieldValues(h100, ids)
        a = lib.nvmlDeviceGetFieldValues(a100, ids)
        assert [f.fieldId for f in h] == [i if isinstance(i, int) else i[0] for i in ids]
        assert h[1].scopeId == 12
        assert all(f.timestamp == h[0].timestamp > 0 for f in h)
        assert [f.nvmlReturn for f in h] == [0, 0, 0, 0, 0, pynvml.NVML_ERROR_NOT_SUPPORTED]
        assert a[1].nvmlReturn == pynvml.NVML_ERROR_INVALID_ARGUMENT  # A100 has 12 links
        assert h[0].valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
        assert 20 < h[0].value.uiVal < 100
        assert (h[4].value.uiVal, a[4].value.uiVal) == (18, 12)
    finally:
        lib.close()


@pytest.mark.parametrize("key", ["a", "b", "c", "gpu:0", "gpu:7"])
def test_waves_stay_in_range_and_integrals_grow(key: str) -> None:
    w = workload.wave(key, low=0.2, high=0.9)
    samples = [w.at(t * 3.1) for t in range(1000)]
    assert min(samples) >= 0.2 - 1e-9 and max(samples) <= 0.9 + 1e-9
    integrals = [w.integral(t * 3.1) for t in range(1000)]
    assert integrals == sorted(integrals)


@pytest.mark.parametrize(
    ("bg", "demands", "util", "scale"),
    [
        (0.1, [], 0.1, 1.0),
        (-0.05, [], 0.0, 1.0),
        (0.1, [0.3, 0.2], 0.6, 1.0),
        (0.1, [0.6, 0.6], 1.0, 1.3),
    ],
    ids=["background-only", "background-dips-below-zero", "shares-add", "oversubscribed"],
)
def test_utilization(bg: float, demands: list[float], util: float, scale: float) -> None:
    assert workload.utilization(bg, demands) == pytest.approx((util, scale))
