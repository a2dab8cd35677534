"""The -d/--devices selector (dcgm-exporter's flex, GPU and instance modes)."""

import pytest

from gpufleet.exporter.core.samples import Entity, EntitySample, MigInstance
from gpufleet.exporter.core.selection import parse_devices, select_entities


def sample(gpu: int, gi: int | None = None) -> EntitySample:
    mig = MigInstance(profile="1g.10gb", gi_id=gi, ci_id=0, uuid=f"MIG-{gpu}-{gi}") if gi else None
    entity = Entity(gpu=gpu, uuid=f"GPU-{gpu}", pci_bus_id="0", model_name="m", mig=mig)
    return EntitySample(entity=entity, values={})


# GPU 0 whole, GPU 1 MIG-enabled with instances 7 and 8 (the reader reports the parent too).
NODE = (sample(0), sample(1), sample(1, 7), sample(1, 8))


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("f", [(0, None), (1, None), (1, 7), (1, 8)]),
        ("g", [(0, None), (1, None)]),
        ("i", [(1, 7), (1, 8)]),
        ("g:1", [(1, None)]),
        ("i:0", []),
        ("g:0-1", [(0, None), (1, None)]),
    ],
    ids=[
        "flex keeps MIG parents, for their whole-GPU fields",
        "gpus only",
        "instances only",
        "gpu range",
        "instance range",
        "span",
    ],
)
def test_select(spec, expected):
    assert [s.entity.key for s in select_entities(NODE, parse_devices(spec))] == expected


@pytest.mark.parametrize("spec", ["x", "f:1", "g:a", "g:1-b", "i:"], ids=str)
def test_bad_spec_names_itself(spec):
    with pytest.raises(ValueError, match="devices"):
        parse_devices(spec)
