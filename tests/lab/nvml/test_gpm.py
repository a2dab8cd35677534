"""GPM through the simulator: metrics from two samples on Hopper, refused before Hopper."""

from collections.abc import Iterator

import pynvml
import pytest
from helpers.clock import ManualClock

from gpufleet.lab.nvml.api import SimulatedNvml

PERCENT_METRICS = [
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL,
    pynvml.NVML_GPM_METRIC_SM_UTIL,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
    pynvml.NVML_GPM_METRIC_FP64_UTIL,
    pynvml.NVML_GPM_METRIC_FP32_UTIL,
    pynvml.NVML_GPM_METRIC_FP16_UTIL,
]
RATE_METRICS = [
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(50.0)


@pytest.fixture
def sim(clock: ManualClock) -> Iterator[SimulatedNvml]:
    lib = SimulatedNvml("1xH100+1xH100:mig=all-1g.10gb+1xA100", seed=4, clock=clock)
    lib.nvmlInit()
    yield lib
    lib.close()


def _metrics(lib: SimulatedNvml, s1: object, s2: object, ids: list[int]) -> object:
    get = pynvml.c_nvmlGpmMetricsGet_t()
    get.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    get.numMetrics = len(ids)
    get.sample1, get.sample2 = s1, s2
    for i, metric_id in enumerate(ids):
        get.metrics[i].metricId = metric_id
    return lib.nvmlGpmMetricsGet(get)


def test_support_query(sim: SimulatedNvml) -> None:
    h100, a100 = sim.nvmlDeviceGetHandleByIndex(0), sim.nvmlDeviceGetHandleByIndex(2)
    assert type(sim.nvmlGpmQueryDeviceSupport(h100)) is pynvml.c_nvmlGpmSupport_t
    assert sim.nvmlGpmQueryDeviceSupport(h100).isSupportedDevice == 1
    assert sim.nvmlGpmQueryDeviceSupport(a100).isSupportedDevice == 0
    sample = sim.nvmlGpmSampleAlloc()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlGpmSampleGet(a100, sample)
    sim.nvmlGpmSampleFree(sample)


def test_metrics_on_h100(sim: SimulatedNvml, clock: ManualClock) -> None:
    h = sim.nvmlDeviceGetHandleByIndex(0)
    sim.spawn_process(sim.devices[0].uuid, pod_uid="p", used_memory_bytes=0, sm_share=0.7)
    s1, s2 = sim.nvmlGpmSampleAlloc(), sim.nvmlGpmSampleAlloc()
    assert isinstance(s1, pynvml.c_nvmlGpmSample_t)
    for _ in range(5):
        sim.nvmlGpmSampleGet(h, s1)
        clock.now += 1.0
        sim.nvmlGpmSampleGet(h, s2)
        got = _metrics(sim, s1, s2, [*PERCENT_METRICS, *RATE_METRICS, 9999])
        metrics = [got.metrics[i] for i in range(got.numMetrics)]
        assert all(m.nvmlReturn == pynvml.NVML_SUCCESS for m in metrics[:-1])
        assert metrics[-1].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
        percents = [m.value for m in metrics[: len(PERCENT_METRICS)]]
        assert all(0.0 <= v <= 100.0 for v in percents)
        assert percents[0] >= 50.0  # the process keeps the GPU busy
        assert all(m.value > 0 for m in metrics[len(PERCENT_METRICS) : -1])
    sim.nvmlGpmSampleFree(s1)
    sim.nvmlGpmSampleFree(s2)


def test_mig_samples(sim: SimulatedNvml, clock: ManualClock) -> None:
    parent = sim.nvmlDeviceGetHandleByIndex(1)
    busy = sim.devices[1].mig[2]
    sim.spawn_process(busy.uuid, pod_uid="p", used_memory_bytes=0, sm_share=1.0)
    values = {}
    for gi in (7, busy.gi_id):
        s1, s2 = sim.nvmlGpmSampleAlloc(), sim.nvmlGpmSampleAlloc()
        sim.nvmlGpmMigSampleGet(parent, gi, s1)
        clock.now += 1.0
        sim.nvmlGpmMigSampleGet(parent, gi, s2)
        values[gi] = _metrics(sim, s1, s2, [pynvml.NVML_GPM_METRIC_SM_UTIL]).metrics[0].value
    assert 0 <= values[7] < 20 < values[busy.gi_id] <= 100
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlGpmMigSampleGet(parent, 1, sim.nvmlGpmSampleAlloc())


def test_metrics_get_argument_errors(sim: SimulatedNvml) -> None:
    h0 = sim.nvmlDeviceGetHandleByIndex(0)
    s1, s2, fresh = sim.nvmlGpmSampleAlloc(), sim.nvmlGpmSampleAlloc(), sim.nvmlGpmSampleAlloc()
    sim.nvmlGpmSampleGet(h0, s1)
    sim.nvmlGpmMigSampleGet(sim.nvmlDeviceGetHandleByIndex(1), 7, s2)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        _metrics(sim, s1, s2, [pynvml.NVML_GPM_METRIC_SM_UTIL])  # different devices
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        _metrics(sim, s1, fresh, [pynvml.NVML_GPM_METRIC_SM_UTIL])  # never sampled
    get = pynvml.c_nvmlGpmMetricsGet_t()
    get.version = 7
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        sim.nvmlGpmMetricsGet(get)
