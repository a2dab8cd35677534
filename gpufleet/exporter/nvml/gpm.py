"""Profiling fields through NVML GPM: one pair of sample buffers per GPU and GPU instance.

Exists because GPM is stateful where the rest of NVML is not: a metric is the difference of
two samples, so each GPU and MIG instance keeps its previous sample between rounds, and the
buffers are NVML allocations that must be freed. Keeping that lifecycle here lets `reader`
treat GPM as one more read.

It must never report a value from a single sample (the first round gives none), never leak
a buffer (those of vanished entities are freed at rediscovery, all of them on `close`), and
never log through a logger of its own: it uses the given `NvmlCalls`.
"""

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pynvml

from gpufleet.exporter.nvml.calls import MISSING, NvmlCalls
from gpufleet.exporter.nvml.discovery import Target
from gpufleet.exporter.nvml.readers import GPM


class _GpmSampler:
    """Two reused GPM sample buffers of one GPU or GPU instance: previous and current."""

    __slots__ = ("_current", "_has_previous", "_lib", "_previous")

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        self._previous = lib.nvmlGpmSampleAlloc()
        try:
            self._current = lib.nvmlGpmSampleAlloc()
        except pynvml.NVMLError:
            lib.nvmlGpmSampleFree(self._previous)
            raise
        self._has_previous = False

    def metrics(self, take: Callable[[Any], Any], metric_ids: tuple[int, ...]) -> dict[int, float]:
        """Take a sample; return metric id -> value over the interval since the previous one.

        Empty on the first call (one sample gives no interval). Metrics NVML could not compute
        are absent. If sampling raises, the previous sample stays the baseline.
        """
        take(self._current)
        self._previous, self._current = self._current, self._previous
        if not self._has_previous:
            self._has_previous = True
            return {}
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(metric_ids)
        request.sample1 = self._current  # the older sample, after the swap
        request.sample2 = self._previous
        for i, metric_id in enumerate(metric_ids):
            request.metrics[i].metricId = metric_id
        result = self._lib.nvmlGpmMetricsGet(request)
        metrics = (result.metrics[i] for i in range(len(metric_ids)))
        return {m.metricId: m.value for m in metrics if m.nvmlReturn == pynvml.NVML_SUCCESS}

    def close(self) -> None:
        for sample in (self._previous, self._current):
            self._lib.nvmlGpmSampleFree(sample)


class GpmReader:
    """Reads GPM fields of GPUs and MIG instances, keeping each one's sampler by UUID."""

    def __init__(self, lib: Any, calls: NvmlCalls) -> None:
        self._lib = lib
        self._calls = calls
        self._samplers: dict[str, _GpmSampler] = {}

    def read_gpu(
        self, gpu: Target, names: Sequence[str], values: dict[str, float], errors: Counter[str]
    ) -> None:
        """Add the GPU-wide GPM fields `names` to `values`; failures are counted in `errors`."""
        take = lambda sample: self._lib.nvmlGpmSampleGet(gpu.handle, sample)  # noqa: E731
        self._read(gpu, take, names, values, errors)

    def read_mig(
        self,
        gpu: Target,
        mig: Target,
        names: Sequence[str],
        values: dict[str, float],
        errors: Counter[str],
    ) -> None:
        """Add GPU-instance GPM fields `names` of MIG instance `mig` of `gpu` to `values`."""
        gi_id = mig.entity.mig.gi_id
        take = lambda sample: self._lib.nvmlGpmMigSampleGet(gpu.handle, gi_id, sample)  # noqa: E731
        self._read(mig, take, names, values, errors)

    def forget(self, keys: set[str]) -> None:
        """Free the samplers of entities whose UUID is not in `keys`."""
        for key in [k for k in self._samplers if k not in keys]:
            self._calls.read(Counter(), "nvmlGpmSampleFree", key, self._samplers.pop(key).close)

    def close(self) -> None:
        """Free every sampler; a failure to free is logged at debug level and passed over."""
        for sampler in self._samplers.values():
            try:
                sampler.close()
            except pynvml.NVMLError as err:
                self._calls.log.debug("freeing a GPM sample failed: %s", err)
        self._samplers.clear()

    def _read(
        self,
        target: Target,
        take: Callable[[Any], Any],
        names: Sequence[str],
        values: dict[str, float],
        errors: Counter[str],
    ) -> None:
        sampler = self._samplers.get(target.key)
        if sampler is None:
            sampler = self._calls.read(
                errors, "nvmlGpmSampleAlloc", target.model, _GpmSampler, self._lib
            )
            if sampler is MISSING:
                return
            self._samplers[target.key] = sampler
        metric_ids = tuple(GPM[n][0] for n in names)
        what = f"GPM ({', '.join(names)})"
        metrics = self._calls.read(errors, what, target.model, sampler.metrics, take, metric_ids)
        if metrics is MISSING:
            return
        for name in names:
            metric_id, factor = GPM[name]
            if metric_id in metrics:
                values[name] = metrics[metric_id] * factor
