"""Per-GPU state behind DCGM_EXP_GPU_HEALTH_STATUS and DCGM_EXP_P2P_STATUS.

Both are per physical GPU whatever `-d` selects, as dcgm-exporter's collectors are, so
they are gathered from the reader's whole-GPU samples before device selection. Health needs
the last minute of the violation counters (DCGM compares the first and latest reading in
it); this keeps that short history and hands plain inputs to the pure `health.gpu_health`.
No I/O, no clock (`now` is an argument), no logging. Not thread-safe: the collector calls
it from one collection at a time.
"""

from collections import deque
from collections.abc import Iterable, Mapping

from gpufleet.exporter.core.fields import HEALTH_FIELD, P2P_FIELD
from gpufleet.exporter.core.health import (
    VIOLATION_WINDOW_SECONDS,
    HealthInputs,
    Incident,
    gpu_health,
    moved,
)
from gpufleet.exporter.core.samples import Entity, EntitySample, XidState
from gpufleet.exporter.core.windows import HISTORY_MAX_ENTRIES

_THERMAL = "DCGM_FI_DEV_THERMAL_VIOLATION"
_POWER = "DCGM_FI_DEV_POWER_VIOLATION"


class GpuStatus:
    """Gathers the per-GPU part of a NodeSample for the fields selected."""

    def __init__(self, selected: Iterable[str]) -> None:
        selected = set(selected)
        self.health_selected = HEALTH_FIELD in selected
        self.selected = self.health_selected or P2P_FIELD in selected
        # gpu -> (monotonic seconds, thermal ns, power ns), the last minute's readings.
        self._violations: dict[int, deque[tuple[float, float | None, float | None]]] = {}

    def gpus(
        self, samples: Iterable[EntitySample], topology: Iterable[Entity]
    ) -> dict[int, EntitySample]:
        """Every discovered GPU: its whole-GPU sample, or none of its values when lost."""
        read = {s.entity.gpu: s for s in samples if s.entity.mig is None}
        return {
            e.gpu: read.get(e.gpu) or EntitySample(entity=e, values={})
            for e in topology
            if e.mig is None
        }

    def health(
        self,
        gpus: Mapping[int, EntitySample],
        *,
        lost: frozenset[int],
        xid: Mapping[int, XidState],
        now: float,
    ) -> dict[int, Mapping[str, Incident]]:
        """Each GPU's health by watch, from this round's readings and the kept history."""
        if not self.health_selected:
            return {}
        health = {}
        for gpu, sample in sorted(gpus.items()):
            values = sample.values
            history = self._violations.setdefault(gpu, deque(maxlen=HISTORY_MAX_ENTRIES))
            history.append((now, values.get(_THERMAL), values.get(_POWER)))
            while history[0][0] < now - VIOLATION_WINDOW_SECONDS:
                history.popleft()
            state = xid.get(gpu)
            health[gpu] = gpu_health(
                HealthInputs(
                    lost=gpu in lost,
                    xids=state.counts if state else (),
                    ecc_dbe_volatile=values.get("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
                    retired_pending=values.get("DCGM_FI_DEV_RETIRED_PENDING"),
                    remap_pending=values.get("DCGM_FI_DEV_ROW_REMAP_PENDING"),
                    remap_failure=values.get("DCGM_FI_DEV_ROW_REMAP_FAILURE"),
                    thermal_violation_moved=moved(_known(history, 1), now=now),
                    power_violation_moved=moved(_known(history, 2), now=now),
                )
            )
        for gone in set(self._violations) - set(gpus):
            del self._violations[gone]
        return health


def _known(
    history: Iterable[tuple[float, float | None, float | None]], column: int
) -> list[tuple[float, float]]:
    return [(row[0], value) for row in history if (value := row[column]) is not None]
