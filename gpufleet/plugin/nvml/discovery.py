"""Device discovery for the plugin: reads the node's GPUs, MIG devices and topology via NVML.

Exists so everything downstream (`core.devices`, `core.allocate`, `core.preferred`) works
on the plain `NodeGpus` record and never touches NVML. On top of the shared
`gpufleet.nvml.discovery` it reads what only the plugin needs: device minors, memory, NUMA
nodes, compute capability and the links between GPUs. It calls only pynvml-API functions on the
injected `lib` (the `pynvml` module or a `SimulatedNvml`) and must never branch on which
one it has, nor call `nvmlInit`/`nvmlShutdown`: the caller owns NVML's lifetime.

Partial results: a GPU that fails while being read (lost, or an NVML error on its identity)
is left out, logged and counted; one MIG device that fails is left out alone; a pair whose
topology cannot be read scores 0. Only a failing `nvmlDeviceGetCount` fails discovery.
"""

import logging
from collections import Counter
from collections.abc import Mapping
from itertools import combinations
from typing import Any

import pynvml

from gpufleet.nvml.discovery import (
    ABSENT,
    NvmlGpu,
    NvmlMig,
    gpu_device,
    mig_capable,
    mig_devices,
    mig_enabled,
)
from gpufleet.nvml.values import error_kind, text
from gpufleet.plugin.core.model import GpuInfo, MigAttributes, MigInfo, NodeGpus

log = logging.getLogger(__name__)

_MIB = 1 << 20
_NVLINK_SCORE_PER_LINK = 10  # any NVLink pair beats the best PCIe path (3)
# PCIe distance -> score, as NodeGpus documents: fewer hops through the host, higher.
_PCIE_SCORES = {
    pynvml.NVML_TOPOLOGY_INTERNAL: 3,  # two GPUs on one board
    pynvml.NVML_TOPOLOGY_SINGLE: 3,  # one PCIe switch
    pynvml.NVML_TOPOLOGY_MULTIPLE: 3,  # several switches, no host bridge
    pynvml.NVML_TOPOLOGY_HOSTBRIDGE: 2,
    pynvml.NVML_TOPOLOGY_NODE: 1,  # same NUMA node, across host bridges
    pynvml.NVML_TOPOLOGY_SYSTEM: 0,  # across sockets
}


def discover(lib: Any, *, errors: Counter[str] | None = None) -> NodeGpus:
    """Every GPU NVML can read, with MIG devices and pairwise link scores.

    `lib` must be initialised. Failures per GPU, MIG device or pair are counted by kind
    (`gpu_lost`, `nvml_error`, `unexpected`) in `errors`. Raises NVMLError only if NVML
    cannot count the GPUs.
    """
    errors = Counter() if errors is None else errors
    gpus: list[GpuInfo] = []
    handles: dict[int, Any] = {}
    for index in range(lib.nvmlDeviceGetCount()):
        try:
            device = gpu_device(lib, index)
            gpus.append(_gpu(lib, device, errors=errors))
        except Exception as err:  # this GPU only; the others are still advertised
            kind = error_kind(err)
            errors[kind] += 1
            log.warning(
                "GPU %d left out of discovery: %s (%s)",
                index,
                type(err).__name__,
                err,
                exc_info=kind == "unexpected",
            )
            continue
        handles[index] = device.handle
    return NodeGpus(
        gpus=tuple(gpus),
        driver_version=_system(lib.nvmlSystemGetDriverVersion, "", errors),
        cuda_driver_version=_system(lib.nvmlSystemGetCudaDriverVersion, 0, errors),
        links=_links(lib, handles, errors),
    )


def _gpu(lib: Any, device: NvmlGpu, *, errors: Counter[str]) -> GpuInfo:
    handle = device.handle
    enabled = mig_enabled(lib, handle)
    return GpuInfo(
        index=device.index,
        uuid=device.uuid,
        minor=lib.nvmlDeviceGetMinorNumber(handle),
        name=device.name,
        memory_mib=_memory_mib(lib, handle, f"GPU {device.index}"),
        numa_node=_numa_node(lib, handle),
        mig_enabled=enabled,
        migs=_migs(lib, device, errors) if enabled else (),
        compute_capability=_compute_capability(lib, handle),
        mig_capable=mig_capable(lib, handle),
        pci_bus_id=text(lib.nvmlDeviceGetPciInfo(handle).busId),
    )


def _memory_mib(lib: Any, handle: Any, what: str) -> int:
    """Total memory in MiB; 0 where NVML does not say, as NVIDIA's plugin ignores it (no
    nvidia.com/gpu.memory label, no MPS memory limit) since its commit e3323ce: some
    systems answer NotSupported, and an unprivileged caller gets NoPermission for a
    MIG-enabled GPU's aggregate. The device itself was left out."""
    try:
        return lib.nvmlDeviceGetMemoryInfo(handle).total // _MIB
    except pynvml.NVMLError as err:
        log.warning("%s: ignoring an error getting its memory: %s", what, err)
        return 0


def _numa_node(lib: Any, handle: Any) -> int | None:
    try:
        node = lib.nvmlDeviceGetNumaNodeId(handle)
    except ABSENT:
        return None
    return node if node >= 0 else None  # -1: no affinity (single-socket or unknown)


def _compute_capability(lib: Any, handle: Any) -> tuple[int, int]:
    try:
        major, minor = lib.nvmlDeviceGetCudaComputeCapability(handle)
    except ABSENT:
        return (0, 0)
    return (major, minor)


def _migs(lib: Any, device: NvmlGpu, errors: Counter[str]) -> tuple[MigInfo, ...]:
    """The GPU's MIG devices by index; one that fails is left out alone, a lost GPU raises."""
    found, failed = mig_devices(lib, device)
    for failure in failed:
        errors[error_kind(failure.error)] += 1
        log.warning(
            "MIG device %d of GPU %s left out: %s", failure.index, device.uuid, failure.error
        )
    migs = []
    for mig in found:
        try:
            info = _mig(lib, mig)
        except pynvml.NVMLError_GpuIsLost:
            raise
        except Exception as err:  # this slice only; its siblings and GPU stay
            errors[error_kind(err)] += 1
            log.warning("MIG device %d of GPU %s left out: %s", mig.index, device.uuid, err)
            continue
        if not info.profile:
            errors["nvml_error"] += 1
            log.warning("MIG device %d of GPU %s left out: no profile name", mig.index, device.uuid)
            continue
        migs.append(info)
    return tuple(migs)


def _mig(lib: Any, mig: NvmlMig) -> MigInfo:
    """The plugin's record of a MIG device: the shared facts and its memory."""
    return MigInfo(
        uuid=mig.uuid,
        profile=mig.profile,
        gi_id=mig.gi_id,
        ci_id=mig.ci_id,
        index=mig.index,
        memory_mib=_memory_mib(lib, mig.handle, f"MIG device {mig.uuid}"),
        attributes=_mig_attributes(lib, mig.handle),
    )


def _mig_attributes(lib: Any, handle: Any) -> MigAttributes | None:
    """For the node labels only, so a failure leaves them out, not the MIG device."""
    try:
        a = lib.nvmlDeviceGetAttributes(handle)
    except pynvml.NVMLError:
        return None
    return MigAttributes(
        memory_mb=a.memorySizeMB,
        multiprocessors=a.multiprocessorCount,
        gi_slices=a.gpuInstanceSliceCount,
        ci_slices=a.computeInstanceSliceCount,
        copy_engines=a.sharedCopyEngineCount,
        decoders=a.sharedDecoderCount,
        encoders=a.sharedEncoderCount,
        jpegs=a.sharedJpegCount,
        ofas=a.sharedOfaCount,
    )


def _links(
    lib: Any, handles: Mapping[int, Any], errors: Counter[str]
) -> dict[tuple[int, int], int]:
    """Score per GPU pair (i < j): NVLink count * 10 over NVLink, else the PCIe distance.

    A pair whose topology cannot be read is left at 0 (counted; one log line in all).
    """
    nvlinks = {index: _nvlink_count(lib, handle) for index, handle in handles.items()}
    links: dict[tuple[int, int], int] = {}
    failed = []
    for i, j in combinations(sorted(handles), 2):
        try:
            score = _pair_score(lib, handles[i], handles[j], min(nvlinks[i], nvlinks[j]))
        except Exception as err:  # this pair only: it scores 0
            errors[error_kind(err)] += 1
            failed.append(f"{i}-{j} ({type(err).__name__})")
            continue
        if score:
            links[(i, j)] = score
    if failed:
        log.warning("GPU topology unreadable for pairs %s; they score 0", ", ".join(failed))
    return links


def _pair_score(lib: Any, a: Any, b: Any, nvlinks: int) -> int:
    try:
        status = lib.nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
    except ABSENT:
        status = pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
    if status == pynvml.NVML_P2P_STATUS_OK:
        # NVSwitch boards route every link through the switches: a pair shares the links
        # both GPUs have up. At least one, since NVML says the pair talks over NVLink.
        return max(nvlinks, 1) * _NVLINK_SCORE_PER_LINK
    return _PCIE_SCORES.get(lib.nvmlDeviceGetTopologyCommonAncestor(a, b), 0)


def _nvlink_count(lib: Any, handle: Any) -> int:
    """NVLinks up on a GPU; 0 when it has none or NVML cannot tell."""
    count = 0
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            if lib.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED:
                count += 1
        except pynvml.NVMLError:
            continue  # past the GPU's last link, or no NVLink at all
    return count


def _system(call: Any, default: Any, errors: Counter[str]) -> Any:
    try:
        return call()
    except pynvml.NVMLError as err:
        errors[error_kind(err)] += 1
        log.warning("%s failed: %s", getattr(call, "__name__", "NVML call"), err)
        return default
