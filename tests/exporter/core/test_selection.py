"""The -d/--devices selector (dcgm-exporter's flex, GPU and instance modes)."""

import re

import pytest

from gpufleet.exporter.core.samples import Entity, EntitySample, MigInstance
from gpufleet.exporter.core.selection import (
    DeviceSelectorError,
    missing,
    parse_devices,
    select_entities,
)


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


@pytest.mark.parametrize(
    "spec",
    [
        "x",
        "f:1",
        "g:a",
        "g:1-b",
        "i:",
        "g:\u00b2",  # issue 15: "invalid literal for int()"
        "g:\u0663",  # an Arabic-Indic 3: int() takes it, Go's Atoi does not
        "g:5-3",
        "g:0-99999999999",  # a span, not a set: no memory bomb, but no such GPU index either
        "g:1,,2",
        "g: -1",
    ],
    ids=str,
)
def test_bad_spec_names_itself(spec):
    with pytest.raises(DeviceSelectorError, match=re.escape(repr(spec))):
        parse_devices(spec)


# The NODE above as discovered: GPU 0 whole, GPU 1 MIG-enabled with instances 7 and 8.
ENTITIES = tuple(s.entity for s in NODE)


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("f", None),
        ("g", None),
        ("i", None),
        ("g:0-1", None),
        ("i:1", None),
        ("g:0-99", "no GPU 2-99 on this node (GPUs: 0-1)"),
        ("g:0,5,7-9", "no GPU 5,7-9 on this node (GPUs: 0-1)"),
        ("i:0", "no MIG instances on GPU 0 on this node (GPUs with MIG instances: 1)"),
        ("i:0-3", "no MIG instances on GPU 0,2-3 on this node (GPUs with MIG instances: 1)"),
    ],
    ids=[
        "flex",
        "all gpus",
        "all instances",
        "range present",
        "instances present",
        "issue 15: past the last GPU",
        "several gaps",
        "issue 15: instances of a GPU without MIG",
        "gaps on both sides",
    ],
)
def test_missing_names_what_a_range_asks_for_and_the_node_lacks(spec, problem):
    assert missing(parse_devices(spec), ENTITIES) == problem


def test_missing_without_mig_anywhere():
    whole = tuple(e for e in ENTITIES if e.gpu == 0)
    expected = "no MIG instances on GPU 5 on this node (GPUs with MIG instances: none)"
    assert missing(parse_devices("i:5"), whole) == expected
