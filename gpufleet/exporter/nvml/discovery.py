"""Discovery for the NVML reader: the GPUs, their MIG instances and their static labels.

Exists so `reader` can read as the collection loop while this module answers "what is
there": on top of the shared `gpufleet.nvml.discovery` (each GPU's identity, its MIG
instances with NVIDIA's profile names), the exporter's view of it: entities, labels and
whether NVML GPM works. It keeps no state between calls; the reader decides what to keep
when a GPU fails here.

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

from gpufleet.exporter.core.samples import Entity, MigInstance
from gpufleet.exporter.core.selection import dcgm_instance_ids
from gpufleet.exporter.nvml.calls import MIG_MODE, MISSING, UNSUPPORTED, NvmlCalls
from gpufleet.nvml.discovery import NvmlGpu, gpu_device, mig_devices, mig_enabled
from gpufleet.nvml.values import error_kind, text


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """Something read as one entity: a whole GPU or one MIG instance."""

    entity: Entity
    handle: Any
    labels: Mapping[str, str]
    key: str  # GPU or MIG UUID: keys the state kept across rediscovery
    model: str  # for logs: "NVIDIA H100 80GB HBM3" (" in MIG mode"), "... MIG 1g.10gb"


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
    previous: Gpu | None = None,
) -> Gpu:
    """Read GPU `index`: identity, label fields, GPM support (if `gpm_fields`), MIG instances.

    Raises NVMLError when the GPU cannot be identified; a label NVML cannot give keeps its
    value from `previous` (the same GPU's last discovery), else is omitted; a MIG instance
    that cannot be read is left out and counted in `errors`.
    """
    device = gpu_device(lib, index)
    entity = Entity(
        gpu=index,
        uuid=device.uuid,
        pci_bus_id=text(lib.nvmlDeviceGetPciInfo(device.handle).busId),
        model_name=device.name,
    )
    same = previous is not None and previous.target.entity.uuid == entity.uuid
    labels = read_labels(
        calls,
        label_readers,
        (lib, device.handle),
        device.name,
        errors=errors,
        previous=previous.target.labels if same else {},
    )
    # A GPU in MIG mode answers fewer queries (utilization goes to its instances): say so in
    # the "not supported on ..." lines, or they read as if the model lacked them.
    in_mig_mode = mig_enabled(lib, device.handle)
    model = f"{device.name}{MIG_MODE}" if in_mig_mode else device.name
    target = Target(
        entity=entity, handle=device.handle, labels=labels, key=entity.uuid, model=model
    )
    gpm = bool(gpm_fields) and _gpm_supported(lib, calls, device.handle, device.name, gpm_fields)
    migs = _discover_migs(lib, calls, device, target, errors) if in_mig_mode else ()
    return Gpu(target=target, gpm=gpm, migs=migs)


def read_labels(
    calls: NvmlCalls,
    readers: Mapping[str, Callable[..., str]],
    args: tuple[Any, ...],
    model: str,
    *,
    errors: Counter[str],
    previous: Mapping[str, str],
) -> dict[str, str]:
    """Label field -> text, from `read(*args)` per field. A failing read keeps the
    `previous` value (one failed read at a re-scan changed every series' labels for a
    minute), or leaves the label out if there was none; failures count in `errors`."""
    labels = {}
    for name, read in readers.items():
        value = calls.read(errors, name, model, read, *args)
        if value is not MISSING:
            labels[name] = text(value)
        elif name in previous:
            labels[name] = previous[name]
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
    lib: Any, calls: NvmlCalls, device: NvmlGpu, parent: Target, errors: Counter[str]
) -> tuple[Target, ...]:
    """The MIG instances of a GPU in MIG mode as targets, by GPU instance id; failures
    counted, logged once."""
    found, failed = mig_devices(lib, device)
    for failure in failed:
        err, kind = failure.error, error_kind(failure.error)
        errors[kind] += 1
        calls.once(
            ("mig-discovery", parent.key, failure.index, kind),
            logging.WARNING,
            "MIG device %d of GPU %s left out: %s (%s)",
            failure.index,
            parent.key,
            type(err).__name__,
            err,
            exc=kind == "unexpected",
        )
    # Numbered over all found instances, as DCGM counts the ones left out below too.
    dcgm_ids = dcgm_instance_ids(
        device.index,
        slots=lib.nvmlDeviceGetMaxMigDeviceCount(device.handle),
        instances=[(mig.profile_rank, mig.gi_id) for mig in found],
    )
    migs = []
    for mig in found:
        if not mig.profile:
            calls.once(
                ("mig-no-profile", parent.key, mig.gi_id),
                logging.WARNING,
                "MIG instance %d of GPU %s left out: no profile name",
                mig.gi_id,
                parent.key,
            )
            continue
        instance = MigInstance(
            profile=mig.profile,
            gi_id=mig.gi_id,
            ci_id=mig.ci_id,
            uuid=mig.uuid,
            dcgm_id=dcgm_ids[mig.gi_id],
        )
        migs.append(
            Target(
                entity=dataclasses.replace(parent.entity, mig=instance),
                handle=mig.handle,
                labels=parent.labels,
                key=mig.uuid,
                model=f"{device.name} MIG {mig.profile}",
            )
        )
    return tuple(sorted(migs, key=lambda t: t.entity.key))
