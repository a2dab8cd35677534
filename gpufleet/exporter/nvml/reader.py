"""The NVML adapter: finds the GPUs and MIG instances and reads the selected fields from NVML.

The gather stage of the collector. It turns NVML calls into plain `EntitySample`s in
dcgm-exporter's legacy units (the tables in `readers` say which call serves which field).
`lib` is the `pynvml` module or the simulated NVML; this module never branches on which.

It must never let one GPU, MIG instance or field spoil the rest: a lost GPU drops that GPU's
entities for the round (counted `gpu_lost`); a failing call drops the values it feeds
(counted `nvml_error` or `timeout`); NotSupported drops them without counting (logged once
per call and GPU model); a conversion that raises drops its one value (counted
`unexpected`); a MIG instance that fails at discovery is left out alone (counted). It never
fakes a value NVML cannot give, e.g. profiling fields without GPM, or "no processes" when
the per-process calls fail or are not made (`EntitySample.processes` is None then).

`collect` calls NVML synchronously and blocks as long as NVML blocks (a wedged driver can
hang a call): the caller runs it under its own watchdog. Not thread-safe: one thread calls
`discover`, `collect` and `close`. The caller owns `nvmlInit` and `nvmlShutdown`.

Parts: `discovery` finds the entities, `gpm` and `processes` hold the stateful reads,
`calls` counts and logs failing calls; this module runs the rounds.
"""

import logging
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import pynvml

from gpufleet.exporter.core.fields import (
    CATALOG,
    DEPENDENCIES,
    EXPORTER_FIELDS,
    P2P_FIELD,
    FieldSpec,
    MigSource,
)
from gpufleet.exporter.core.samples import Entity, EntitySample
from gpufleet.exporter.nvml.calls import MISSING, NvmlCalls
from gpufleet.exporter.nvml.discovery import Gpu, Target, discover_gpu, read_labels
from gpufleet.exporter.nvml.gpm import GpmReader
from gpufleet.exporter.nvml.p2p import read_p2p
from gpufleet.exporter.nvml.processes import ProcessReader, process_samples
from gpufleet.exporter.nvml.readers import (
    CALLS,
    DEVICE_LABELS,
    FIELD_VALUES,
    GPM,
    NODE_LABELS,
    NVLINK_COUNTERS,
    NVLINK_RATES,
    QUERIES,
    SERVED_FIELDS,
    field_value_number,
    kib_rate_mb_per_s,
)
from gpufleet.nvml.values import error_kind

log = logging.getLogger(__name__)

ERROR_KINDS = ("gpu_lost", "nvml_error", "timeout", "unexpected")
"""Error kinds `collect` counts; `unexpected` is a non-NVML exception (a bug) on one GPU."""


class NvmlReader:
    """Reads the selected catalog fields of every GPU and MIG instance of the node."""

    def __init__(self, lib: Any, fields: Iterable[FieldSpec]) -> None:
        """Raises ValueError naming any selected field no reader serves. EXPORTER_FIELDS
        are accepted and not read as such (`xid.XidWatcher` and the collector serve them),
        but their DEPENDENCIES are read even if not selected themselves: the collector
        judges from them (dcgm adds those watches too). P2P_FIELD reads the P2P status
        of every GPU pair at each `discover`."""
        self._lib = lib
        fields = list(fields)
        names = {f.name for f in fields}
        fields += [CATALOG[d] for n in names for d in DEPENDENCIES.get(n, ()) if d not in names]
        self._specs = {f.name: f for f in fields if f.name not in EXPORTER_FIELDS}
        self._read_p2p = P2P_FIELD in names
        self._p2p: Mapping[int, Mapping[int, int]] = {}
        unknown = sorted(set(self._specs) - SERVED_FIELDS)
        if unknown:
            raise ValueError(f"no NVML reader for field(s): {', '.join(unknown)}")
        self._calls = NvmlCalls(log)
        self._gpm = GpmReader(lib, self._calls)
        self._processes = ProcessReader(lib, self._calls)
        selected = self._specs.keys()
        self._field_values = [n for n in FIELD_VALUES if n in selected]
        self._rates = [n for n in NVLINK_RATES if n in selected]
        self._fv_request = [(FIELD_VALUES[n][0], 0) for n in self._field_values] + [
            (counter, NVLINK_RATES[n]) for n in self._rates for counter in NVLINK_COUNTERS
        ]
        self._call_fields = [n for n in CALLS if n in selected]
        self._gpm_fields = [n for n in GPM if n in selected]
        self._device_label_readers = {n: DEVICE_LABELS[n] for n in DEVICE_LABELS if n in selected}
        self._node_label_readers = {n: NODE_LABELS[n] for n in NODE_LABELS if n in selected}
        self._query_fields = {
            q: ", ".join(n for n in self._call_fields if CALLS[n][0] == q)
            for q, _ in CALLS.values()
        }
        self._gpus: tuple[Gpu, ...] = ()
        self._node_labels: Mapping[str, str] = {}
        self._nvlink_previous: dict[tuple[str, str], tuple[float, float]] = {}  # kib, time
        self._lost: set[str] = set()
        self._discovery_errors: Counter[str] = Counter()  # reported by the next `collect`

    @property
    def entities(self) -> tuple[Entity, ...]:
        """The topology of the last `discover`: each GPU, then its MIG instances."""
        return tuple(t.entity for gpu in self._gpus for t in (gpu.target, *gpu.migs))

    @property
    def p2p(self) -> Mapping[int, Mapping[int, int]]:
        """gpu -> peer gpu -> NVLink P2P status (NVML_P2P_STATUS_*), as of the last
        `discover`; a pair whose call failed is absent. Empty unless P2P_FIELD is selected."""
        return self._p2p

    @property
    def lost_gpus(self) -> frozenset[int]:
        """Indexes of the GPUs the last `collect` found lost."""
        return frozenset(g.target.entity.gpu for g in self._gpus if g.target.key in self._lost)

    @property
    def node_labels(self) -> Mapping[str, str]:
        """Node-level label fields (driver and NVML versions), read at discovery."""
        return self._node_labels

    def discover(self) -> tuple[Entity, ...]:
        """(Re)read the GPU and MIG topology and the static labels; cache them.

        A GPU that fails during discovery keeps its previous topology (so a lost GPU stays
        visible as `gpu_lost` in `collect`), or is left out if it was never seen; a MIG
        instance that fails is left out, its GPU and siblings kept. Such failures are
        counted in the next `collect`'s errors. Rate, GPM and process-utilization state
        survives for entities that are still there.
        Raises NVMLError only if NVML cannot even count the GPUs.
        """
        previous = {gpu.target.entity.gpu: gpu for gpu in self._gpus}
        gpus = []
        for index in range(self._lib.nvmlDeviceGetCount()):
            try:
                gpus.append(
                    discover_gpu(
                        self._lib,
                        self._calls,
                        index=index,
                        errors=self._discovery_errors,
                        label_readers=self._device_label_readers,
                        gpm_fields=self._gpm_fields,
                        previous=previous.get(index),
                    )
                )
            except Exception as err:  # NVML or a surprise: this GPU only
                if index in previous:
                    gpus.append(previous[index])
                self._discovery_failed(index, err, kept=index in previous)
        self._gpus = tuple(gpus)
        self._node_labels = read_labels(
            self._calls,
            self._node_label_readers,
            (self._lib,),
            "node",
            errors=self._discovery_errors,
            previous=self._node_labels,
        )
        if self._read_p2p:
            self._p2p = read_p2p(self._lib, self._calls, self._gpus, self._discovery_errors)
        self._forget_vanished()
        return self.entities

    def collect(
        self, now_monotonic: float, processes_of: Collection[int] | None = None
    ) -> tuple[tuple[EntitySample, ...], Mapping[str, int]]:
        """Read every selected field of every discovered entity.

        Partial by design: a lost or broken GPU is left out (its MIG instances too) and the
        others are still read; values NVML cannot give are absent. `now_monotonic` (seconds)
        times the NVLink rates. Profiling fields and NVLink rates appear from the second call.
        `processes_of` names the GPUs (by index) whose processes are read, with their MIG
        instances'; None reads every GPU's. The others' samples have `processes` None, as
        when NVML cannot tell: the per-process calls cost the driver milliseconds per GPU.

        Returns:
            The samples, and error counts of this round (plus those of any `discover` since
            the previous round) for every kind in ERROR_KINDS.
        """
        errors: Counter[str] = self._discovery_errors
        self._discovery_errors = Counter()
        samples: list[EntitySample] = []
        for gpu in self._gpus:
            key = gpu.target.key
            try:
                processes = processes_of is None or gpu.target.entity.gpu in processes_of
                samples += self._collect_gpu(gpu, now_monotonic, errors, processes)
            except pynvml.NVMLError_GpuIsLost:
                errors["gpu_lost"] += 1
                if key not in self._lost:
                    self._lost.add(key)
                    log.warning(
                        "GPU %d (%s) is lost; left out until it answers", gpu.target.entity.gpu, key
                    )
                continue
            except Exception:  # a bug or a driver surprise must not cost the other GPUs
                errors["unexpected"] += 1
                self._calls.once(
                    ("unexpected", key), logging.ERROR, "reading GPU %s failed", key, exc=True
                )
                continue
            if key in self._lost:
                self._lost.discard(key)
                log.info("GPU %d (%s) answers again", gpu.target.entity.gpu, key)
        return tuple(samples), {kind: errors[kind] for kind in ERROR_KINDS}

    def close(self) -> None:
        """Free the GPM sample buffers. The reader is not used afterwards."""
        self._gpm.close()

    def _discovery_failed(self, index: int, err: Exception, *, kept: bool) -> None:
        kind = error_kind(err)
        if kind != "gpu_lost" or not kept:  # a kept lost GPU is counted by `collect`
            self._discovery_errors[kind] += 1
        self._calls.once(
            ("discovery", index, kind, getattr(err, "value", None)),
            logging.ERROR if kind == "unexpected" else logging.WARNING,
            "GPU %d: %s (%s) at discovery; %s",
            index,
            type(err).__name__,
            err,
            "previous topology kept" if kept else "left out",
            exc=kind == "unexpected",
        )

    def _forget_vanished(self) -> None:
        keys = {t.key for gpu in self._gpus for t in (gpu.target, *gpu.migs)}
        self._gpm.forget(keys)
        self._nvlink_previous = {k: v for k, v in self._nvlink_previous.items() if k[0] in keys}
        self._processes.forget(keys)
        self._lost &= keys

    # --- collection ---

    def _collect_gpu(
        self, gpu: Gpu, now: float, errors: Counter[str], processes: bool
    ) -> list[EntitySample]:
        target = gpu.target
        values: dict[str, float] = {}
        self._read_field_values(target, now, values, errors)
        self._read_calls(target, self._call_fields, values, errors)
        if gpu.gpm:
            self._gpm.read_gpu(target, self._gpm_fields, values, errors)
        running, utilization = MISSING, MISSING
        if processes:
            running, utilization = self._processes.read(target, errors, now)
        samples = [_sample(target, values, running, utilization)]
        instance_calls = [n for n in self._call_fields if self._specs[n].mig is MigSource.INSTANCE]
        instance_gpm = [n for n in self._gpm_fields if self._specs[n].mig is MigSource.INSTANCE]
        for mig in gpu.migs:
            mig_values: dict[str, float] = {}  # whole-GPU fields stay on the GPU (`series`)
            self._read_calls(mig, instance_calls, mig_values, errors)
            if gpu.gpm:
                self._gpm.read_mig(target, mig, instance_gpm, mig_values, errors)
            mig_running, mig_utilization = MISSING, MISSING
            if processes:
                mig_running, mig_utilization = self._processes.read_mig(
                    mig, running, utilization, errors, now
                )
            samples.append(_sample(mig, mig_values, mig_running, mig_utilization))
        return samples

    def _read_field_values(
        self, target: Target, now: float, values: dict[str, float], errors: Counter[str]
    ) -> None:
        """All field-value fields of one GPU in one nvmlDeviceGetFieldValues call."""
        if not self._fv_request:
            return
        results = self._calls.read(
            errors,
            "nvmlDeviceGetFieldValues",
            target.model,
            self._lib.nvmlDeviceGetFieldValues,
            target.handle,
            self._fv_request,
        )
        if results is MISSING:
            return
        names = self._field_values + [n for n in self._rates for _ in NVLINK_COUNTERS]
        kib: dict[str, float] = {}
        failed: set[str] = set()
        for name, result in zip(names, results, strict=True):
            number = self._field_number(name, result, target.model, errors)
            if number is None:
                failed.add(name)
            elif name in NVLINK_RATES:
                kib[name] = kib.get(name, 0.0) + number
            else:
                value = self._calls.convert(
                    errors, name, target.model, FIELD_VALUES[name][1], number
                )
                if value is not MISSING and value is not None:
                    values[name] = value
        for name, total in kib.items():
            if name in failed:
                continue
            previous = self._nvlink_previous.get((target.key, name))
            self._nvlink_previous[(target.key, name)] = (total, now)
            if previous is not None:
                rate = kib_rate_mb_per_s(previous, (total, now))
                if rate is not None:
                    values[name] = rate

    def _field_number(
        self, name: str, result: Any, model: str, errors: Counter[str]
    ) -> float | None:
        status = result.nvmlReturn
        if status == pynvml.NVML_SUCCESS:
            number = field_value_number(result.valueType, result.value)
            if number is not None:
                return number
            status = pynvml.NVML_ERROR_UNKNOWN  # a value type this code cannot read
        if status == pynvml.NVML_ERROR_GPU_IS_LOST:
            raise pynvml.NVMLError(status)
        self._calls.failed(errors, name, model, pynvml.NVMLError(status))
        return None

    def _read_calls(
        self, target: Target, names: list[str], values: dict[str, float], errors: Counter[str]
    ) -> None:
        """The fields read by plain calls, one call per query shared by its fields."""
        results: dict[str, Any] = {}
        for name in names:
            query, extract = CALLS[name]
            if query not in results:
                what = f"{query} ({self._query_fields[query]})"
                results[query] = self._calls.read(
                    errors, what, target.model, QUERIES[query], self._lib, target.handle
                )
            if results[query] is not MISSING:
                value = self._calls.convert(errors, name, target.model, extract, results[query])
                if value is not MISSING:
                    values[name] = value


def _sample(
    target: Target, values: dict[str, float], running: Any, utilization: Any
) -> EntitySample:
    return EntitySample(
        entity=target.entity,
        values=values,
        labels=target.labels,
        processes=process_samples(running, utilization),
    )
