"""dcgm-exporter's `-d/--devices` selector: which entities get series.

`f` (flex, the default): every GPU and every MIG instance. dcgm-exporter's flex drops a
MIG-enabled GPU for its instances and copies the GPU's own quantities onto each; here the
GPU keeps them once (see `series`), and its instances serve the rest.
`g[:range]`: whole GPUs only; the range names GPU indexes. `i[:range]`: MIG instances
only; the range names DCGM GPU-instance entity ids, as dcgm-exporter's does (not NVML's
GPU_I_ID, nor the GPU index): DCGM numbers GPU g's instances from g times the GPU's MIG
device count (`dcgm_instance_ids`), so on H100s GPU 1's first instance is 7. A range is
a comma list of ids and spans, e.g. `0-3,5`.
A range names what must exist: as dcgm-exporter refuses to start on "couldn't find
requested GPU ID" (or "GPU instance ID"), `missing` says what a range names that the node
lacks, in dcgm-exporter's words.
Pure: no I/O.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.exporter.core.samples import Entity, EntitySample

# ASCII digits only, as Go's strconv.Atoi (str.isdigit() also takes '²', which int()
# refuses), and few enough that a span is a GPU index, not a memory bomb.
_INDEX = re.compile(r"[0-9]{1,6}")


class DeviceSelectorError(ValueError):
    """A `-d` value that does not parse; the message quotes it (the caller names the flag)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceSelector:
    kind: str  # "f", "g" or "i"
    # inclusive spans of GPU indexes (`g`) or DCGM GPU-instance ids (`i`); None: all
    spans: tuple[tuple[int, int], ...] | None = None

    def names(self, entity: Entity) -> bool:
        """Whether the range (if any) includes the entity's GPU index, or for `i` its
        instance's DCGM id."""
        if self.spans is None:
            return True
        number = _number(self.kind, entity)
        return number is not None and any(low <= number <= high for low, high in self.spans)


def _number(kind: str, entity: Entity) -> int | None:
    """What a `kind` range numbers the entity by: its DCGM instance id for `i`."""
    if kind == "i":
        return entity.mig.dcgm_id if entity.mig else None
    return entity.gpu


FLEX = DeviceSelector(kind="f")  # dcgm-exporter's default


def parse_devices(text: str) -> DeviceSelector:
    """Parse `f`, `g`, `g:0-3,5`, `i`, `i:1`. Raises DeviceSelectorError naming the bad part."""
    kind, sep, spec = text.strip().partition(":")
    if kind not in ("f", "g", "i") or (kind == "f" and sep) or (sep and not spec):
        raise DeviceSelectorError(f"{text!r}: expected 'f', 'g[:range]' or 'i[:range]'")
    if not spec:
        return DeviceSelector(kind=kind)
    spans = []
    for part in spec.split(","):
        low, dash, high = part.strip().partition("-")
        if not _INDEX.fullmatch(low) or (dash and not _INDEX.fullmatch(high)):
            raise DeviceSelectorError(f"{text!r}: bad range {part!r}; expected ids like 0-3,5")
        span = (int(low), int(high) if dash else int(low))
        if span[0] > span[1]:
            raise DeviceSelectorError(f"{text!r}: range {part!r} is empty")
        spans.append(span)
    return DeviceSelector(kind=kind, spans=tuple(spans))


def selected(entities: Iterable[Entity], selector: DeviceSelector) -> tuple[Entity, ...]:
    """The entities the selector reports, in order."""

    def keep(e: Entity) -> bool:
        if not selector.names(e):
            return False
        if selector.kind == "g":
            return e.mig is None
        if selector.kind == "i":
            return e.mig is not None
        return True

    return tuple(e for e in entities if keep(e))


def select_entities(
    samples: Iterable[EntitySample], selector: DeviceSelector
) -> tuple[EntitySample, ...]:
    """Keep the samples the selector reports, in order."""
    samples = tuple(samples)
    keep = set(selected((s.entity for s in samples), selector))
    return tuple(s for s in samples if s.entity in keep)


def missing(selector: DeviceSelector, entities: Iterable[Entity]) -> str | None:
    """What the selector's range names that `entities` (a discovery) lacks, in
    dcgm-exporter's words for the first gap and then all of them ("couldn't find requested
    GPU ID '8' (missing: 8-99; GPUs on this node: 0-7)"), or None: nothing, or no range."""
    if selector.spans is None:
        return None
    if selector.kind == "i":
        what, there = "GPU instance ID", "DCGM GPU instance IDs"
        have = sorted({e.mig.dcgm_id for e in entities if e.mig is not None})
    else:
        what, there = "GPU ID", "GPUs"
        have = sorted({e.gpu for e in entities if e.mig is None})
    gaps = [gap for span in selector.spans for gap in _gaps(span, have)]
    if not gaps:
        return None
    return (
        f"couldn't find requested {what} '{gaps[0][0]}' "
        f"(missing: {_spans_text(gaps)}; {there} on this node: {_spans_text(_runs(have))})"
    )


def dcgm_instance_ids(
    gpu: int, *, slots: int, instances: Iterable[tuple[int | None, int]]
) -> dict[int, int]:
    """DCGM's GPU-instance entity id of each of GPU `gpu`'s instances, by NVML GI id.

    DCGM (DcgmCacheManager::InitializeGpuInstances) numbers them `gpu * slots + n`, with
    `slots` the GPU's nvmlDeviceGetMaxMigDeviceCount and `n` counting the instances in the
    order it walks them: profile by profile in NVML's profile table order, then each
    profile's instances (taken here in GI id order). `instances` are (profile rank or None
    when unknown, which sorts last; GI id) pairs.
    """
    ordered = sorted(instances, key=lambda pair: (pair[0] is None, pair[0] or 0, pair[1]))
    return {gi_id: gpu * slots + n for n, (_, gi_id) in enumerate(ordered)}


def _gaps(span: tuple[int, int], have: list[int]) -> list[tuple[int, int]]:
    """The parts of an inclusive span not covered by the sorted indexes `have`."""
    low, high = span
    gaps = []
    for index in have:
        if index > high:
            break
        if index >= low:
            if index > low:
                gaps.append((low, index - 1))
            low = index + 1
    if low <= high:
        gaps.append((low, high))
    return gaps


def _runs(indexes: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for index in indexes:
        if runs and runs[-1][1] == index - 1:
            runs[-1] = (runs[-1][0], index)
        else:
            runs.append((index, index))
    return runs


def _spans_text(spans: list[tuple[int, int]]) -> str:
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans) or "none"
