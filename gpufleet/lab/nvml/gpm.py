"""pynvml's GPM (GPU performance monitoring) functions for the simulator.

A sample records which device (or GPU instance) and which simulated time it was taken at;
`nvmlGpmMetricsGet` derives each metric from the load between two samples: percentages
from utilization at the interval's midpoint, bandwidths as counter deltas over the interval
(so they agree with the byte counters). Models without GPM (pre-Hopper) report
`isSupportedDevice = 0` and refuse samples, as NVML does.
"""

from collections.abc import Callable
from typing import Any

import pynvml

from gpufleet.lab.nvml.handles import HandleTable
from gpufleet.lab.nvml.machine import Machine, Node, nvml_error

_MIB = 1 << 20
_NVLINK_RX_RATIO = 0.97  # matches counters: RX data is 0.97 of TX
# Percent metrics as a fraction of the entity's utilization.
_UTIL_SHARE: dict[int, float] = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: 1.0,
    pynvml.NVML_GPM_METRIC_SM_UTIL: 0.92,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 0.45,
    pynvml.NVML_GPM_METRIC_INTEGER_UTIL: 0.08,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 0.55,
    pynvml.NVML_GPM_METRIC_DFMA_TENSOR_UTIL: 0.0,
    pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL: 0.5,
    pynvml.NVML_GPM_METRIC_DMMA_TENSOR_UTIL: 0.0,
    pynvml.NVML_GPM_METRIC_IMMA_TENSOR_UTIL: 0.05,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 0.6,
    pynvml.NVML_GPM_METRIC_FP64_UTIL: 0.02,
    pynvml.NVML_GPM_METRIC_FP32_UTIL: 0.2,
    pynvml.NVML_GPM_METRIC_FP16_UTIL: 0.1,
}
_IDLE_ENGINES = {
    *range(pynvml.NVML_GPM_METRIC_NVDEC_0_UTIL, pynvml.NVML_GPM_METRIC_NVDEC_7_UTIL + 1),
    *range(pynvml.NVML_GPM_METRIC_NVJPG_0_UTIL, pynvml.NVML_GPM_METRIC_NVJPG_7_UTIL + 1),
    pynvml.NVML_GPM_METRIC_NVOFA_0_UTIL,
    pynvml.NVML_GPM_METRIC_NVOFA_1_UTIL,
}
_NVLINK_LINK_METRICS = range(
    pynvml.NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC, pynvml.NVML_GPM_METRIC_NVLINK_L17_TX_PER_SEC + 1
)


class _Sample:
    __slots__ = ("e", "target")

    def __init__(self) -> None:
        self.target: Node | None = None  # a GPU, or a MIG device for a MIG sample
        self.e = 0.0


class GpmCalls:
    """GPM support query, samples and metrics."""

    _m: Machine
    _gpm_samples: HandleTable[_Sample]

    def nvmlGpmQueryDeviceSupport(self, device: Any) -> Any:
        node = self._m.enter("nvmlGpmQueryDeviceSupport", device, mig_ok=False)
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(node.model.gpm)
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        self._m.enter_system("nvmlGpmSampleAlloc")
        with self._m.lock:
            return self._gpm_samples.new(_Sample())

    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:
        self._m.enter_system("nvmlGpmSampleFree")
        with self._m.lock:
            if self._gpm_samples.drop(gpmSample) is None:
                raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlGpmSampleGet(self, device: Any, gpmSample: Any) -> Any:
        node = self._m.enter("nvmlGpmSampleGet", device, mig_ok=False)
        self._take(node, node, gpmSample)
        return gpmSample

    def nvmlGpmMigSampleGet(self, device: Any, gpuInstanceId: int, gpmSample: Any) -> Any:
        node = self._m.enter("nvmlGpmMigSampleGet", device, mig_ok=False)
        child = next((c for c in node.children if c.mig.gi_id == gpuInstanceId), None)
        if node.model.gpm and child is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        self._take(node, child, gpmSample)
        return gpmSample

    def _take(self, gpu: Node, target: Node | None, handle: Any) -> None:
        if not gpu.model.gpm:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        sample = self._gpm_samples.get(handle)
        if sample is None:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        sample.target, sample.e = target, self._m.now()

    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        """Fill `metricsGet.metrics[:numMetrics]` (value, nvmlReturn) from its two samples."""
        self._m.enter_system("nvmlGpmMetricsGet")
        if metricsGet.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise nvml_error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        s1 = self._gpm_samples.get(metricsGet.sample1)
        s2 = self._gpm_samples.get(metricsGet.sample2)
        if s1 is None or s2 is None or s1.target is None or s1.target is not s2.target:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if metricsGet.numMetrics > pynvml.NVML_GPM_METRIC_MAX:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        target = s1.target
        self._m.enter("nvmlGpmMetricsGet", target.handle)
        value_of = self._metric_values(target, min(s1.e, s2.e), max(s1.e, s2.e))
        for i in range(metricsGet.numMetrics):
            metric = metricsGet.metrics[i]
            value = value_of(metric.metricId)
            metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED if value is None else 0
            metric.value = 0.0 if value is None else value
        return metricsGet

    def _metric_values(self, target: Node, t1: float, t2: float) -> Callable[[int], float | None]:
        gpu = target.parent or target
        util = self._m.load_at(target, (t1 + t2) / 2).util
        share = target.profile.slices / 7 if target.profile else 1.0
        dt = t2 - t1
        traits, links = gpu.traits, gpu.model.nvlinks

        def rate_mib(wave: Any, unit: int) -> float:
            if dt <= 0:
                return 0.0
            delta = self._m.counter(wave, t2) - self._m.counter(wave, t1)
            return delta * unit / _MIB / dt * share

        def value_of(metric_id: int) -> float | None:
            if metric_id in _UTIL_SHARE:
                return 100.0 * util * _UTIL_SHARE[metric_id]
            if metric_id in _IDLE_ENGINES:
                return 0.0
            if metric_id == pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC:
                return rate_mib(traits.pcie_tx_bytes_per_s, 1)
            if metric_id == pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC:
                return rate_mib(traits.pcie_rx_bytes_per_s, 1)
            if metric_id == pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC and links:
                return rate_mib(traits.nvlink_kib_per_s, 1024)
            if metric_id == pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC and links:
                return rate_mib(traits.nvlink_kib_per_s, 1024) * _NVLINK_RX_RATIO
            if metric_id in _NVLINK_LINK_METRICS:
                link, is_tx = divmod(metric_id - _NVLINK_LINK_METRICS.start, 2)
                if link >= links:
                    return None
                tx = rate_mib(traits.nvlink_kib_per_s, 1024) / links
                return tx if is_tx else tx * _NVLINK_RX_RATIO
            return None

        return value_of
