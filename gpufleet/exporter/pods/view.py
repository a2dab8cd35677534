"""The kubelet's view of GPU allocations, as plain data.

Plain data apart from `podresources` (the client that fills it over the kubelet's socket), so
what the collector reads carries no I/O. Only `-k` loads it: without a watcher the collector
passes empties itself.
"""

from dataclasses import dataclass

from gpufleet.exporter.core.attribution import ContainerDevices
from gpufleet.exporter.core.dra import ClaimDevice
from gpufleet.kubelet.checkpoint import CheckpointEntry


@dataclass(frozen=True, slots=True, kw_only=True)
class KubeletView:
    """One successful refresh: what `List` and the checkpoint said."""

    containers: tuple[ContainerDevices, ...] = ()
    checkpoint: tuple[CheckpointEntry, ...] = ()
    claims: tuple[ClaimDevice, ...] = ()  # DRA devices (`dynamic_resources`), every driver
    refreshed_at: float | None = None  # wall-clock seconds of the List; None: no data
    refreshed_monotonic: float | None = None


EMPTY_VIEW = KubeletView()
