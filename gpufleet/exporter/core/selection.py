"""dcgm-exporter's `-d/--devices` selector: which entities get series.

`f` (flex, the default): every GPU and every MIG instance. dcgm-exporter's flex drops a
MIG-enabled GPU for its instances and copies the GPU's own quantities onto each; here the
GPU keeps them once (see `series`), and its instances serve the rest.
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

    def keep(s: EntitySample) -> bool:
        if selector.gpus is not None and s.entity.gpu not in selector.gpus:
            return False
        if selector.kind == "g":
            return s.entity.mig is None
        if selector.kind == "i":
            return s.entity.mig is not None
        return True

    return tuple(s for s in samples if keep(s))
