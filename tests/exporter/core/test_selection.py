"""The -d/--devices selector (dcgm-exporter's flex, GPU and instance modes)."""

import re

import pytest

from gpufleet.exporter.core.samples import Entity, EntitySample, MigInstance
from gpufleet.exporter.core.selection import (
    DeviceSelectorError,
    dcgm_instance_ids,
    missing,
    parse_devices,
    select_entities,
)


def sample(gpu: int, gi: int | None = None, dcgm: int | None = None) -> EntitySample:
    mig = None
    if gi is not None and dcgm is not None:
        mig = MigInstance(
            profile="1g.10gb", gi_id=gi, ci_id=0, uuid=f"MIG-{gpu}-{gi}", dcgm_id=dcgm
        )
    entity = Entity(gpu=gpu, uuid=f"GPU-{gpu}", pci_bus_id="0", model_name="m", mig=mig)
    return EntitySample(entity=entity, values={})


# dcgm-exporter's SpoofGPUDeviceInfo (internal/pkg/deviceinfo/device_info_test.go): GPU 0
# with a GPU instance of DCGM entity id 0, GPU 1 with one of NVML instance id 1 and DCGM
# entity id 14; plus GPU 2 whole. The reader reports MIG parents too.
NODE = (sample(0), sample(0, 0, 0), sample(1), sample(1, 1, 14), sample(2))


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("f", [(0, None), (0, 0), (1, None), (1, 1), (2, None)]),
        ("g", [(0, None), (1, None), (2, None)]),
        ("i", [(0, 0), (1, 1)]),
        ("g:1", [(1, None)]),
        ("g:0-1", [(0, None), (1, None)]),
        ("i:14", [(1, 1)]),
        ("i:0,14", [(0, 0), (1, 1)]),
        ("i:1", []),
    ],
    ids=[
        "flex keeps MIG parents, for their whole-GPU fields",
        "dcgm Major -1: all GPUs, MIG parents included",
        "dcgm Minor -1: all GPU instances",
        "gpu range",
        "span",
        "dcgm Minor 14: a DCGM GPU-instance entity id",
        "ids on two GPUs",
        "a range names DCGM entity ids, not GPU indexes nor NVML instance ids",
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


# The NODE above as discovered.
ENTITIES = tuple(s.entity for s in NODE)


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("f", None),
        ("g", None),
        ("i", None),
        ("g:0-1", None),
        ("i:0,14", None),
        (
            "g:0-99",
            "couldn't find requested GPU ID '3' (missing: 3-99; GPUs on this node: 0-2)",
        ),
        (
            "g:10",
            "couldn't find requested GPU ID '10' (missing: 10; GPUs on this node: 0-2)",
        ),
        (
            "i:10",
            "couldn't find requested GPU instance ID '10' "
            "(missing: 10; DCGM GPU instance IDs on this node: 0,14)",
        ),
        (
            "i:0-3,14",
            "couldn't find requested GPU instance ID '1' "
            "(missing: 1-3; DCGM GPU instance IDs on this node: 0,14)",
        ),
    ],
    ids=[
        "flex",
        "all gpus",
        "all instances",
        "range present",
        "dcgm TestVerifyDevicePresence: instances 0 and 14 exist",
        "issue 15: past the last GPU",
        "dcgm TestVerifyDevicePresence: GPU 10 does not exist",
        "dcgm TestVerifyDevicePresence: GPU instance 10 does not exist",
        "gaps inside a range",
    ],
)
def test_missing_names_what_a_range_asks_for_and_the_node_lacks(spec, problem):
    assert missing(parse_devices(spec), ENTITIES) == problem


def test_missing_without_mig_anywhere():
    whole = tuple(e for e in ENTITIES if e.mig is None)
    expected = (
        "couldn't find requested GPU instance ID '5' "
        "(missing: 5; DCGM GPU instance IDs on this node: none)"
    )
    assert missing(parse_devices("i:5"), whole) == expected


@pytest.mark.parametrize(
    ("gpu", "slots", "instances", "expected"),
    [
        (0, 7, [(0, 9), (0, 10)], {9: 0, 10: 1}),
        (1, 7, [(0, gi) for gi in range(13, 6, -1)], {gi: gi for gi in range(7, 14)}),
        (2, 7, [(2, 1), (0, 9), (0, 10)], {9: 14, 10: 15, 1: 16}),
        (1, 8, [(None, 3), (4, 0)], {0: 8, 3: 9}),
    ],
    ids=[
        "GPU 0 counts from 0",
        "GPU g counts from g times its MIG device count, in instance order",
        "profile by profile in NVML's table order first",
        "an instance of unknown profile last",
    ],
)
def test_dcgm_instance_ids(gpu, slots, instances, expected):
    assert dcgm_instance_ids(gpu, slots=slots, instances=instances) == expected
