"""Discovery for the NVML reader: the GPUs, their MIG instances and their static labels.

Exists so `nvml` can read as the collection loop while this module answers "what is there":
each GPU's identity and labels, whether NVML GPM works on it, and its MIG instances with
NVIDIA's profile names. It keeps no state between calls; the reader decides what to keep when
a GPU fails here.

It must never invent an entity, nor let one MIG instance hide its GPU: a MIG instance
without a profile name, or whose reads fail, is left out alone (logged; failures counted);
an NVMLError while reading a GPU's identity or MIG mode, or a lost GPU anywhere, propagates
to the caller; only labels (left out) and profile names (taken from the device name) have
fallbacks. It logs only through the given `NvmlCalls`.
"""

import dataclasses
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pynvml

from gpufleet.exporter.core.samples import Entity, MigInstance
from gpufleet.exporter.nvml.calls import MISSING, UNSUPPORTED, NvmlCalls
from gpufleet.nvml.mig_profiles import mig_profile_name, profile_id, profile_names
from gpufleet.nvml.values import error_kind, text


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """Something read as one entity: a whole GPU or one MIG instance."""

    entity: Entity
    handle: Any
    labels: Mapping[str, str]
    key: str  # GPU or MIG UUID: keys the state kept across rediscovery
    model: str  # for logs: "NVIDIA H100 80GB HBM3" or "NVIDIA H100 80GB HBM3 MIG 1g.10gb"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Gpu:
    """One discovered GPU and its MIG instances (empty when MIG is off or unsupported)."""

    target: Target
    gpm: bool  # NVML GPM works here and profiling fields are selected
    migs: tuple[Target, ...] = ()


def discover_gpu(
    lib: Any,
    calls: NvmlCalls,
    *,
    index: int,
    errors: Counter[str],
    label_readers: Mapping[str, Callable[..., str]],
    gpm_fields: Sequence[str],
) -> Gpu:
    """Read GPU `index`: identity, label fields, GPM support (if `gpm_fields`), MIG instances.

    Raises NVMLError when the GPU cannot be identified; a label NVML cannot give is omitted;
    a MIG instance that cannot be read is left out and counted in `errors`.
    """
    handle = lib.nvmlDeviceGetHandleByIndex(index)
    model = text(lib.nvmlDeviceGetName(handle))
    entity = Entity(
        gpu=index,
        uuid=text(lib.nvmlDeviceGetUUID(handle)),
        pci_bus_id=text(lib.nvmlDeviceGetPciInfo(handle).busId),
        model_name=model,
    )
    labels = read_labels(calls, label_readers, (lib, handle), model)
    target = Target(entity=entity, handle=handle, labels=labels, key=entity.uuid, model=model)
    return Gpu(
        target=target,
        gpm=bool(gpm_fields) and _gpm_supported(lib, calls, handle, model, gpm_fields),
        migs=_discover_migs(lib, calls, target, errors),
    )


def read_labels(
    calls: NvmlCalls,
    readers: Mapping[str, Callable[..., str]],
    args: tuple[Any, ...],
    model: str,
) -> dict[str, str]:
    """Label field -> text, from `read(*args)` per field; a failing read is left out."""
    labels = {}
    for name, read in readers.items():
        value = calls.read(Counter(), name, model, read, *args)
        if value is not MISSING:
            labels[name] = text(value)
    return labels


def _gpm_supported(
    lib: Any, calls: NvmlCalls, handle: Any, model: str, gpm_fields: Sequence[str]
) -> bool:
    try:
        supported = bool(lib.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except UNSUPPORTED:
        supported = False
    if not supported:
        calls.once(
            ("no-gpm", model),
            logging.INFO,
            "%s has no NVML GPM (Hopper and newer): profiling fields unavailable, omitted: %s",
            model,
            ", ".join(gpm_fields),
        )
    return supported


def _discover_migs(
    lib: Any, calls: NvmlCalls, parent: Target, errors: Counter[str]
) -> tuple[Target, ...]:
    handle = parent.handle
    try:
        mode = lib.nvmlDeviceGetMigMode(handle)[0]
    except UNSUPPORTED:
        return ()
    if mode != pynvml.NVML_DEVICE_MIG_ENABLE:
        return ()
    profiles = profile_names(lib, handle)
    migs = []
    for index in range(lib.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = _discover_mig(lib, calls, parent, index, profiles)
        except pynvml.NVMLError_GpuIsLost:
            raise
        except Exception as err:  # this slice only; its siblings and GPU stay
            kind = error_kind(err)
            errors[kind] += 1
            calls.once(
                ("mig-discovery", parent.key, index, kind),
                logging.WARNING,
                "MIG device %d of GPU %s left out: %s (%s)",
                index,
                parent.key,
                type(err).__name__,
                err,
                exc=kind == "unexpected",
            )
            continue
        if mig is not None:
            migs.append(mig)
    return tuple(sorted(migs, key=lambda t: t.entity.key))


def _discover_mig(
    lib: Any, calls: NvmlCalls, parent: Target, index: int, profiles: Mapping[int, str]
) -> Target | None:
    """MIG device `index` of `parent`; None when there is none there or it has no name."""
    try:
        mig_handle = lib.nvmlDeviceGetMigDeviceHandleByIndex(parent.handle, index)
    except pynvml.NVMLError_NotFound:
        return None  # no MIG device at this index
    gi_id = lib.nvmlDeviceGetGpuInstanceId(mig_handle)
    profile = profiles.get(profile_id(lib, parent.handle, gi_id)) or mig_profile_name(
        text(lib.nvmlDeviceGetName(mig_handle))
    )
    if profile is None:
        calls.once(
            ("mig-no-profile", parent.key, gi_id),
            logging.WARNING,
            "MIG instance %d of GPU %s left out: no profile name",
            gi_id,
            parent.key,
        )
        return None
    mig = MigInstance(
        profile=profile,
        gi_id=gi_id,
        ci_id=lib.nvmlDeviceGetComputeInstanceId(mig_handle),
        uuid=text(lib.nvmlDeviceGetUUID(mig_handle)),
    )
    return Target(
        entity=dataclasses.replace(parent.entity, mig=mig),
        handle=mig_handle,
        labels=parent.labels,
        key=mig.uuid,
        model=f"{parent.model} MIG {profile}",
    )
