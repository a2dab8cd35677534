"""dcgm-exporter's `-d/--devices` selector: which entities get series.

`f` (flex, the default): MIG instances on MIG-enabled GPUs, whole GPUs elsewhere.
`g[:range]`: whole GPUs only. `i[:range]`: MIG instances only. A range is a comma list of
GPU indexes and spans, e.g. `0-3,5`; for `i` it selects the instances of those GPUs.
Pure: no I/O.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.exporter.core.samples import EntitySample


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceSelector:
    kind: str  # "f", "g" or "i"
    gpus: frozenset[int] | None = None  # None: every GPU


FLEX = DeviceSelector(kind="f")  # dcgm-exporter's default


def parse_devices(text: str) -> DeviceSelector:
    """Parse `f`, `g`, `g:0-3,5`, `i`, `i:1`. Raises ValueError naming the bad part."""
    kind, sep, spec = text.strip().partition(":")
    if kind not in ("f", "g", "i") or (kind == "f" and sep) or (sep and not spec):
        raise ValueError(f"devices {text!r}: expected 'f', 'g[:range]' or 'i[:range]'")
    if not spec:
        return DeviceSelector(kind=kind)
    gpus: set[int] = set()
    for part in spec.split(","):
        low, _, high = part.strip().partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise ValueError(f"devices {text!r}: bad range {part!r}; expected e.g. 0-3,5")
        gpus.update(range(int(low), int(high or low) + 1))
    return DeviceSelector(kind=kind, gpus=frozenset(gpus))


def select_entities(
    samples: Iterable[EntitySample], selector: DeviceSelector
) -> tuple[EntitySample, ...]:
    """Keep the samples the selector reports, in order."""
    samples = tuple(samples)
    mig_parents = {s.entity.gpu for s in samples if s.entity.mig is not None}

    def keep(s: EntitySample) -> bool:
        if selector.gpus is not None and s.entity.gpu not in selector.gpus:
            return False
        if selector.kind == "g":
            return s.entity.mig is None
        if selector.kind == "i":
            return s.entity.mig is not None
        return s.entity.mig is not None or s.entity.gpu not in mig_parents

    return tuple(s for s in samples if keep(s))
