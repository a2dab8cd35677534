"""dcgm-exporter's `-d/--devices` selector: which entities get series.

`f` (flex, the default): every GPU and every MIG instance. dcgm-exporter's flex drops a
MIG-enabled GPU for its instances and copies the GPU's own quantities onto each; here the
GPU keeps them once (see `series`), and its instances serve the rest.
`g[:range]`: whole GPUs only. `i[:range]`: MIG instances only. A range is a comma list of
GPU indexes and spans, e.g. `0-3,5`; for `i` it selects the instances of those GPUs.
A range names what must exist: as dcgm-exporter refuses to start on "couldn't find
requested GPU ID", `missing` says what a range names that the node lacks.
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
    spans: tuple[tuple[int, int], ...] | None = None  # inclusive GPU index spans; None: all

    def names(self, gpu: int) -> bool:
        """Whether the range (if any) includes GPU index `gpu`."""
        return self.spans is None or any(low <= gpu <= high for low, high in self.spans)


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
            raise DeviceSelectorError(
                f"{text!r}: bad range {part!r}; expected GPU indexes like 0-3,5"
            )
        span = (int(low), int(high) if dash else int(low))
        if span[0] > span[1]:
            raise DeviceSelectorError(f"{text!r}: range {part!r} is empty")
        spans.append(span)
    return DeviceSelector(kind=kind, spans=tuple(spans))


def selected(entities: Iterable[Entity], selector: DeviceSelector) -> tuple[Entity, ...]:
    """The entities the selector reports, in order."""

    def keep(e: Entity) -> bool:
        if not selector.names(e.gpu):
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
    """What the selector's range names that `entities` (a discovery) lacks, as a phrase
    ("no GPU 8-99 on this node (GPUs 0-7)"), or None: nothing, or no range given."""
    if selector.spans is None:
        return None
    entities = tuple(entities)
    if selector.kind == "i":
        have = sorted({e.gpu for e in entities if e.mig is not None})
        what, there = "MIG instances on GPU", "GPUs with MIG instances"
    else:
        have = sorted({e.gpu for e in entities if e.mig is None})
        what, there = "GPU", "GPUs"
    gaps = [gap for span in selector.spans for gap in _gaps(span, have)]
    if not gaps:
        return None
    return f"no {what} {_spans_text(gaps)} on this node ({there}: {_spans_text(_runs(have))})"


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
