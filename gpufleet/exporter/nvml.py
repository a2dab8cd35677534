"""The NVML adapter: finds the GPUs and MIG instances and reads the selected fields from NVML.

The gather stage of the collector. It turns NVML calls into plain `EntitySample`s in
dcgm-exporter's legacy units (the tables in `nvml_readers` say which call serves which field).
`lib` is the `pynvml` module or the simulated NVML; this module never branches on which.

It must never let one GPU or one field spoil the rest: a lost GPU drops that GPU's entities
for the round (counted `gpu_lost`); a failing call drops the values it feeds (counted
`nvml_error` or `timeout`); NotSupported drops them without counting (logged once per call
and GPU model). It never fakes a value NVML cannot give, e.g. profiling fields without GPM.

`collect` calls NVML synchronously and blocks as long as NVML blocks (a wedged driver can
hang a call): the caller runs it under its own watchdog. Not thread-safe: one thread calls
`discover`, `collect` and `close`. The caller owns `nvmlInit` and `nvmlShutdown`.
"""

import dataclasses
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pynvml

from gpufleet.exporter.fields import FieldSpec, MigSource
from gpufleet.exporter.nvml_readers import (
    CALLS,
    DEVICE_LABELS,
    FIELD_VALUES,
    GPM,
    NODE_LABELS,
    NVLINK_COUNTERS,
    NVLINK_RATES,
    QUERIES,
    SERVED_FIELDS,
    XID_FIELD,
    field_value_number,
    kib_rate_mb_per_s,
    mig_profile_name,
    text,
)
from gpufleet.exporter.snapshot import Entity, EntitySample, MigInstance, ProcessSample

log = logging.getLogger(__name__)

ERROR_KINDS = ("gpu_lost", "nvml_error", "timeout", "unexpected")
"""Error kinds `collect` counts; `unexpected` is a non-NVML exception (a bug) on one GPU."""

_MISSING = object()  # a read that gave nothing: NotSupported, or an error already counted
_UNSUPPORTED = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound)


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


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Target:
    """Something read as one entity: a whole GPU or one MIG instance."""

    entity: Entity
    handle: Any
    labels: Mapping[str, str]
    key: str  # GPU or MIG UUID: keys the state kept across rediscovery
    model: str  # for logs: "NVIDIA H100 80GB HBM3" or "NVIDIA H100 80GB HBM3 MIG 1g.10gb"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Gpu:
    target: _Target
    gpm: bool  # NVML GPM works here and profiling fields are selected
    migs: tuple[_Target, ...] = ()


class NvmlReader:
    """Reads the selected catalog fields of every GPU and MIG instance of the node."""

    def __init__(
        self, lib: Any, fields: Iterable[FieldSpec], *, collect_processes: bool = True
    ) -> None:
        """Raises ValueError naming any selected field no reader serves. XID_FIELD is
        accepted and ignored: `xid.XidWatcher` serves it."""
        self._lib = lib
        self._specs = {f.name: f for f in fields if f.name != XID_FIELD}
        unknown = sorted(set(self._specs) - SERVED_FIELDS)
        if unknown:
            raise ValueError(f"no NVML reader for field(s): {', '.join(unknown)}")
        self._collect_processes = collect_processes
        selected = self._specs.keys()
        self._field_values = [n for n in FIELD_VALUES if n in selected]
        self._rates = [n for n in NVLINK_RATES if n in selected]
        self._fv_request = [(FIELD_VALUES[n][0], 0) for n in self._field_values] + [
            (counter, NVLINK_RATES[n]) for n in self._rates for counter in NVLINK_COUNTERS
        ]
        self._calls = [n for n in CALLS if n in selected]
        self._gpm = [n for n in GPM if n in selected]
        self._device_labels = [n for n in DEVICE_LABELS if n in selected]
        self._node_label_fields = [n for n in NODE_LABELS if n in selected]
        self._query_fields = {
            q: ", ".join(n for n in self._calls if CALLS[n][0] == q) for q, _ in CALLS.values()
        }
        self._gpus: tuple[_Gpu, ...] = ()
        self._node_labels: Mapping[str, str] = {}
        self._samplers: dict[str, _GpmSampler] = {}
        self._nvlink_previous: dict[tuple[str, str], tuple[float, float]] = {}  # kib, time
        self._process_seen_us: dict[str, int] = {}  # last process-utilization timestamp
        self._logged: set[tuple[object, ...]] = set()
        self._lost: set[str] = set()

    @property
    def entities(self) -> tuple[Entity, ...]:
        """The topology of the last `discover`: each GPU, then its MIG instances."""
        return tuple(t.entity for gpu in self._gpus for t in (gpu.target, *gpu.migs))

    @property
    def node_labels(self) -> Mapping[str, str]:
        """Node-level label fields (driver and NVML versions), read at discovery."""
        return self._node_labels

    def discover(self) -> tuple[Entity, ...]:
        """(Re)read the GPU and MIG topology and the static labels; cache them.

        A GPU that fails during discovery keeps its previous topology (so a lost GPU stays
        visible as `gpu_lost` in `collect`), or is left out if it was never seen. Rate, GPM
        and process-utilization state survives for entities that are still there.
        Raises NVMLError only if NVML cannot even count the GPUs.
        """
        previous = {gpu.target.entity.gpu: gpu for gpu in self._gpus}
        gpus = []
        for index in range(self._lib.nvmlDeviceGetCount()):
            try:
                gpus.append(self._discover_gpu(index))
            except pynvml.NVMLError as err:
                if index in previous:
                    gpus.append(previous[index])
                self._once(
                    ("discovery", index, err.value),
                    logging.WARNING,
                    "GPU %d: NVML error %d at discovery (%s); %s",
                    index,
                    err.value,
                    err,
                    "previous topology kept" if index in previous else "left out",
                )
        self._gpus = tuple(gpus)
        self._node_labels = self._labels(
            {n: NODE_LABELS[n] for n in self._node_label_fields}, (self._lib,), "node"
        )
        self._forget_vanished()
        return self.entities

    def collect(self, now_monotonic: float) -> tuple[tuple[EntitySample, ...], Mapping[str, int]]:
        """Read every selected field of every discovered entity.

        Partial by design: a lost or broken GPU is left out (its MIG instances too) and the
        others are still read; values NVML cannot give are absent. `now_monotonic` (seconds)
        times the NVLink rates. Profiling fields and NVLink rates appear from the second call.

        Returns:
            The samples, and error counts of this round for every kind in ERROR_KINDS.
        """
        errors: Counter[str] = Counter()
        samples: list[EntitySample] = []
        for gpu in self._gpus:
            key = gpu.target.key
            try:
                samples += self._collect_gpu(gpu, now_monotonic, errors)
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
                self._once(
                    ("unexpected", key), logging.ERROR, "reading GPU %s failed", key, exc=True
                )
                continue
            if key in self._lost:
                self._lost.discard(key)
                log.info("GPU %d (%s) answers again", gpu.target.entity.gpu, key)
        return tuple(samples), {kind: errors[kind] for kind in ERROR_KINDS}

    def close(self) -> None:
        """Free the GPM sample buffers. The reader is not used afterwards."""
        for sampler in self._samplers.values():
            try:
                sampler.close()
            except pynvml.NVMLError as err:
                log.debug("freeing a GPM sample failed: %s", err)
        self._samplers.clear()

    # --- discovery ---

    def _discover_gpu(self, index: int) -> _Gpu:
        lib = self._lib
        handle = lib.nvmlDeviceGetHandleByIndex(index)
        model = text(lib.nvmlDeviceGetName(handle))
        entity = Entity(
            gpu=index,
            uuid=text(lib.nvmlDeviceGetUUID(handle)),
            pci_bus_id=text(lib.nvmlDeviceGetPciInfo(handle).busId),
            model_name=model,
        )
        labels = self._labels(
            {n: DEVICE_LABELS[n] for n in self._device_labels}, (lib, handle), model
        )
        target = _Target(entity=entity, handle=handle, labels=labels, key=entity.uuid, model=model)
        return _Gpu(
            target=target,
            gpm=bool(self._gpm) and self._gpm_supported(handle, model),
            migs=self._discover_migs(target),
        )

    def _gpm_supported(self, handle: Any, model: str) -> bool:
        try:
            supported = bool(self._lib.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
        except _UNSUPPORTED:
            supported = False
        if not supported:
            self._once(
                ("no-gpm", model),
                logging.INFO,
                "%s has no NVML GPM (Hopper and newer): profiling fields unavailable, omitted: %s",
                model,
                ", ".join(self._gpm),
            )
        return supported

    def _discover_migs(self, parent: _Target) -> tuple[_Target, ...]:
        lib, handle = self._lib, parent.handle
        try:
            mode = lib.nvmlDeviceGetMigMode(handle)[0]
        except _UNSUPPORTED:
            return ()
        if mode != pynvml.NVML_DEVICE_MIG_ENABLE:
            return ()
        profiles = self._profile_names(handle)
        migs = []
        for index in range(lib.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig_handle = lib.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
            except pynvml.NVMLError_NotFound:
                continue  # no MIG device at this index
            gi_id = lib.nvmlDeviceGetGpuInstanceId(mig_handle)
            profile = profiles.get(self._profile_id(handle, gi_id)) or mig_profile_name(
                text(lib.nvmlDeviceGetName(mig_handle))
            )
            if profile is None:
                log.warning(
                    "MIG instance %d of GPU %s left out: no profile name", gi_id, parent.key
                )
                continue
            mig = MigInstance(
                profile=profile,
                gi_id=gi_id,
                ci_id=lib.nvmlDeviceGetComputeInstanceId(mig_handle),
                uuid=text(lib.nvmlDeviceGetUUID(mig_handle)),
            )
            migs.append(
                _Target(
                    entity=dataclasses.replace(parent.entity, mig=mig),
                    handle=mig_handle,
                    labels=parent.labels,
                    key=mig.uuid,
                    model=f"{parent.model} MIG {profile}",
                )
            )
        return tuple(sorted(migs, key=lambda t: t.entity.key))

    def _profile_names(self, handle: Any) -> dict[int, str]:
        """GPU-instance profile id -> NVIDIA's profile name, from NVML's profile table."""
        names = {}
        for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = self._lib.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
            except pynvml.NVMLError:
                continue  # profile not available on this GPU
            name = mig_profile_name(text(info.name))
            if name:
                names[info.id] = name
        return names

    def _profile_id(self, handle: Any, gi_id: int) -> int | None:
        try:
            instance = self._lib.nvmlDeviceGetGpuInstanceById(handle, gi_id)
            return self._lib.nvmlGpuInstanceGetInfo(instance).profileId
        except pynvml.NVMLError:
            return None  # fall back to the MIG device's name

    def _labels(
        self, readers: Mapping[str, Callable[..., str]], args: tuple[Any, ...], model: str
    ) -> dict[str, str]:
        labels = {}
        for name, read in readers.items():
            value = self._read(Counter(), name, model, read, *args)
            if value is not _MISSING:
                labels[name] = text(value)
        return labels

    def _forget_vanished(self) -> None:
        keys = {t.key for gpu in self._gpus for t in (gpu.target, *gpu.migs)}
        for key in [k for k in self._samplers if k not in keys]:
            self._read(Counter(), "nvmlGpmSampleFree", key, self._samplers.pop(key).close)
        self._nvlink_previous = {k: v for k, v in self._nvlink_previous.items() if k[0] in keys}
        self._process_seen_us = {k: v for k, v in self._process_seen_us.items() if k in keys}
        self._lost &= keys

    # --- collection ---

    def _collect_gpu(self, gpu: _Gpu, now: float, errors: Counter[str]) -> list[EntitySample]:
        lib, target = self._lib, gpu.target
        values: dict[str, float] = {}
        self._read_field_values(target, now, values, errors)
        self._read_calls(target, self._calls, values, errors)
        if gpu.gpm:
            take = lambda sample: lib.nvmlGpmSampleGet(target.handle, sample)  # noqa: E731
            self._read_gpm(target, take, self._gpm, values, errors)
        running, utilization = self._processes(target, errors)
        samples = [self._sample(target, values, running, utilization)]
        inherited = {n: v for n, v in values.items() if self._specs[n].mig is MigSource.PARENT}
        instance_calls = [n for n in self._calls if self._specs[n].mig is MigSource.INSTANCE]
        instance_gpm = [n for n in self._gpm if self._specs[n].mig is MigSource.INSTANCE]
        for mig in gpu.migs:
            mig_values = dict(inherited)
            self._read_calls(mig, instance_calls, mig_values, errors)
            if gpu.gpm:
                gi_id = mig.entity.mig.gi_id

                def take(sample: Any, gi_id: int = gi_id) -> Any:
                    return lib.nvmlGpmMigSampleGet(target.handle, gi_id, sample)

                self._read_gpm(mig, take, instance_gpm, mig_values, errors)
            mig_running, mig_utilization = self._mig_processes(mig, running, utilization, errors)
            samples.append(self._sample(mig, mig_values, mig_running, mig_utilization))
        return samples

    def _read_field_values(
        self, target: _Target, now: float, values: dict[str, float], errors: Counter[str]
    ) -> None:
        """All field-value fields of one GPU in one nvmlDeviceGetFieldValues call."""
        if not self._fv_request:
            return
        results = self._read(
            errors,
            "nvmlDeviceGetFieldValues",
            target.model,
            self._lib.nvmlDeviceGetFieldValues,
            target.handle,
            self._fv_request,
        )
        if results is _MISSING:
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
            elif (value := FIELD_VALUES[name][1](number)) is not None:
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
        self._failed(errors, name, model, pynvml.NVMLError(status))
        return None

    def _read_calls(
        self, target: _Target, names: list[str], values: dict[str, float], errors: Counter[str]
    ) -> None:
        """The fields read by plain calls, one call per query shared by its fields."""
        results: dict[str, Any] = {}
        for name in names:
            query, extract = CALLS[name]
            if query not in results:
                what = f"{query} ({self._query_fields[query]})"
                results[query] = self._read(
                    errors, what, target.model, QUERIES[query], self._lib, target.handle
                )
            if results[query] is not _MISSING:
                values[name] = extract(results[query])

    def _read_gpm(
        self,
        target: _Target,
        take: Callable[[Any], Any],
        names: list[str],
        values: dict[str, float],
        errors: Counter[str],
    ) -> None:
        sampler = self._samplers.get(target.key)
        if sampler is None:
            sampler = self._read(errors, "nvmlGpmSampleAlloc", target.model, _GpmSampler, self._lib)
            if sampler is _MISSING:
                return
            self._samplers[target.key] = sampler
        metric_ids = tuple(GPM[n][0] for n in names)
        what = f"GPM ({', '.join(names)})"
        metrics = self._read(errors, what, target.model, sampler.metrics, take, metric_ids)
        if metrics is _MISSING:
            return
        for name in names:
            metric_id, factor = GPM[name]
            if metric_id in metrics:
                values[name] = metrics[metric_id] * factor

    def _processes(self, target: _Target, errors: Counter[str]) -> tuple[Any, Any]:
        """(running compute processes, pid -> SM util %) of a handle; _MISSING where NVML
        could not tell."""
        if not self._collect_processes:
            return [], {}
        running = self._read(
            errors,
            "nvmlDeviceGetComputeRunningProcesses",
            target.model,
            self._lib.nvmlDeviceGetComputeRunningProcesses,
            target.handle,
        )
        since = self._process_seen_us.get(target.key, 0)
        samples = self._read(
            errors,
            "nvmlDeviceGetProcessUtilization",
            target.model,
            _process_utilization,
            self._lib,
            target.handle,
            since,
        )
        if samples is _MISSING:
            return running, _MISSING
        utilization: dict[int, float] = {}
        for sample in sorted(samples, key=lambda s: s.timeStamp):  # the latest wins
            utilization[sample.pid] = float(sample.smUtil)
            since = max(since, sample.timeStamp)
        self._process_seen_us[target.key] = since
        return running, utilization

    def _mig_processes(
        self, mig: _Target, parent_running: Any, parent_utilization: Any, errors: Counter[str]
    ) -> tuple[Any, Any]:
        """A MIG instance's processes; where its own handle cannot tell, the parent's lists,
        matched by GPU and compute instance id."""
        running, utilization = self._processes(mig, errors)
        instance = mig.entity.mig
        if running is _MISSING and parent_running is not _MISSING:
            running = [
                p
                for p in parent_running
                if (p.gpuInstanceId, p.computeInstanceId) == (instance.gi_id, instance.ci_id)
            ]
        if utilization is _MISSING:
            utilization = parent_utilization
        return running, utilization

    def _sample(
        self, target: _Target, values: dict[str, float], running: Any, utilization: Any
    ) -> EntitySample:
        util = {} if utilization is _MISSING else utilization
        processes = tuple(
            ProcessSample(
                pid=p.pid,
                used_memory_bytes=None if p.usedGpuMemory is None else int(p.usedGpuMemory),
                sm_util_percent=util.get(p.pid),
            )
            for p in sorted(() if running is _MISSING else running, key=lambda p: p.pid)
        )
        return EntitySample(
            entity=target.entity, values=values, labels=target.labels, processes=processes
        )

    # --- error accounting ---

    def _read(self, errors: Counter[str], what: str, model: str, call: Callable, *args: Any) -> Any:
        """`call(*args)`, or _MISSING after accounting for an NVML error. A lost GPU raises."""
        try:
            return call(*args)
        except pynvml.NVMLError_GpuIsLost:
            raise
        except pynvml.NVMLError as err:
            self._failed(errors, what, model, err)
            return _MISSING

    def _failed(self, errors: Counter[str], what: str, model: str, err: Any) -> None:
        if isinstance(err, _UNSUPPORTED):
            self._once(
                ("unsupported", what, model),
                logging.INFO,
                "%s: not supported on %s; omitted",
                what,
                model,
            )
            return
        kind = "timeout" if isinstance(err, pynvml.NVMLError_Timeout) else "nvml_error"
        errors[kind] += 1
        self._once(
            ("failed", what, model, err.value),
            logging.WARNING,
            "%s failed on %s: NVML error %d (%s); omitted while it fails",
            what,
            model,
            err.value,
            err,
        )

    def _once(
        self, key: tuple[object, ...], level: int, message: str, *args: Any, exc: bool = False
    ) -> None:
        """Log a condition the first time it is seen, so a steady state does not flood logs."""
        if key not in self._logged:
            self._logged.add(key)
            log.log(level, message, *args, exc_info=exc)


def _process_utilization(lib: Any, handle: Any, since_us: int) -> list[Any]:
    """Per-process utilization samples newer than `since_us`; NVML says NotFound for none."""
    try:
        return list(lib.nvmlDeviceGetProcessUtilization(handle, since_us))
    except pynvml.NVMLError_NotFound:
        return []
