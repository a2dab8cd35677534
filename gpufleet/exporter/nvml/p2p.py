"""NVLink P2P status between GPU pairs, for dcgm-exporter's DCGM_EXP_P2P_STATUS.

DCGM (CreateNvlinkP2PStatus) asks `nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_NVLINK)`
for every ordered pair of GPUs; so does this, at discovery only: the answer is topology, and
8 GPUs cost 56 calls. A pair whose call fails is left out (counted by `NvmlCalls`); a lost GPU
leaves out its pairs only (not counted again here: discovery and collection count it).
"""

from collections import Counter
from collections.abc import Iterable
from typing import Any

import pynvml

from gpufleet.exporter.nvml.calls import MISSING, NvmlCalls
from gpufleet.exporter.nvml.discovery import Gpu


def read_p2p(
    lib: Any, calls: NvmlCalls, gpus: Iterable[Gpu], errors: Counter[str]
) -> dict[int, dict[int, int]]:
    """gpu index -> peer gpu index -> NVML_P2P_STATUS_* over NVLink, every ordered pair."""
    targets = [gpu.target for gpu in gpus]
    status: dict[int, dict[int, int]] = {}
    for a in targets:
        row = status.setdefault(a.entity.gpu, {})
        for b in targets:
            if a is b:
                continue
            try:
                answer = calls.read(
                    errors,
                    "nvmlDeviceGetP2PStatus",
                    a.model,
                    lib.nvmlDeviceGetP2PStatus,
                    a.handle,
                    b.handle,
                    pynvml.NVML_P2P_CAPS_INDEX_NVLINK,
                )
            except pynvml.NVMLError_GpuIsLost:  # counted by discovery and collection
                continue
            if answer is not MISSING:
                row[b.entity.gpu] = int(answer)
    return status
