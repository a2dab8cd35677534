"""`devices.advertise` and `health_groups`: NVIDIA's resource names and device IDs."""

import pytest
from helpers.plugin_node import from_fleet, gpu, gpu_uuid, mig_uuid, node

from gpufleet.plugin.core.devices import (
    AdvertiseError,
    MigStrategy,
    ResourceOptions,
    SharingKind,
    SharingOptions,
    advertise,
    health_groups,
    mig_warnings,
)
from gpufleet.plugin.core.model import NodeGpus

MIXED_NODE = node(gpu(0), gpu(1, profiles=("1g.10gb", "1g.10gb", "3g.40gb")))
ALL_MIG_NODE = node(gpu(0, profiles=("1g.10gb", "1g.10gb")), gpu(1, profiles=("1g.10gb",)))


def ids(result: dict) -> dict[str, list[str]]:
    return {name: [d.id for d in devices] for name, devices in result.items()}


def time_slicing(replicas: dict[str, int], rename: bool = False) -> SharingOptions:
    return SharingOptions(
        kind=SharingKind.TIME_SLICING, replicas=replicas, rename_by_default=rename
    )


ADVERTISE_CASES = [
    pytest.param(
        node(gpu(1), gpu(0)),
        ResourceOptions(),
        {"nvidia.com/gpu": [gpu_uuid(0), gpu_uuid(1)]},
        id="none: whole GPUs sorted by index",
    ),
    pytest.param(
        MIXED_NODE,
        ResourceOptions(mig_strategy=MigStrategy.NONE),
        {"nvidia.com/gpu": [gpu_uuid(0), gpu_uuid(1)]},
        id="none: MIG-enabled GPU advertised whole",
    ),
    pytest.param(
        ALL_MIG_NODE,
        ResourceOptions(mig_strategy=MigStrategy.SINGLE),
        {"nvidia.com/gpu": [mig_uuid(0, 0), mig_uuid(0, 1), mig_uuid(1, 0)]},
        id="single: MIG devices become nvidia.com/gpu",
    ),
    pytest.param(
        node(gpu(0), gpu(1)),
        ResourceOptions(mig_strategy=MigStrategy.SINGLE),
        {"nvidia.com/gpu": [gpu_uuid(0), gpu_uuid(1)]},
        id="single: no MIG-enabled GPU advertises whole GPUs",
    ),
    pytest.param(
        MIXED_NODE,
        ResourceOptions(mig_strategy=MigStrategy.MIXED),
        {
            "nvidia.com/gpu": [gpu_uuid(0)],
            "nvidia.com/mig-1g.10gb": [mig_uuid(1, 0), mig_uuid(1, 1)],
            "nvidia.com/mig-3g.40gb": [mig_uuid(1, 2)],
        },
        id="mixed: one resource per profile, other GPUs stay nvidia.com/gpu",
    ),
    pytest.param(
        node(gpu(0, profiles=("1g.10gb+me", "1g.10gb"))),
        ResourceOptions(mig_strategy=MigStrategy.MIXED),
        {"nvidia.com/mig-1g.10gb": [mig_uuid(0, 1)], "nvidia.com/mig-1g.10gb.me": [mig_uuid(0, 0)]},
        id="mixed: + becomes . and suffixed profiles are their own resource (#1807)",
    ),
    pytest.param(
        node(gpu(0), gpu(1)),
        ResourceOptions(sharing=time_slicing({"nvidia.com/gpu": 2})),
        {
            "nvidia.com/gpu": [
                f"{gpu_uuid(0)}::0",
                f"{gpu_uuid(0)}::1",
                f"{gpu_uuid(1)}::0",
                f"{gpu_uuid(1)}::1",
            ]
        },
        id="time-slicing: replicas as <id>::<n>",
    ),
    pytest.param(
        node(gpu(0)),
        ResourceOptions(sharing=time_slicing({"nvidia.com/gpu": 3}, rename=True)),
        {"nvidia.com/gpu.shared": [f"{gpu_uuid(0)}::{n}" for n in range(3)]},
        id="time-slicing: renameByDefault advertises <name>.shared only",
    ),
    pytest.param(
        MIXED_NODE,
        ResourceOptions(
            mig_strategy=MigStrategy.MIXED,
            sharing=time_slicing({"nvidia.com/mig-3g.40gb": 2}, rename=True),
        ),
        {
            "nvidia.com/gpu": [gpu_uuid(0)],
            "nvidia.com/mig-1g.10gb": [mig_uuid(1, 0), mig_uuid(1, 1)],
            "nvidia.com/mig-3g.40gb.shared": [f"{mig_uuid(1, 2)}::0", f"{mig_uuid(1, 2)}::1"],
        },
        id="time-slicing: a mixed MIG resource shared alone",
    ),
    pytest.param(
        node(gpu(0)),
        ResourceOptions(sharing=time_slicing({"nvidia.com/mig-1g.10gb": 4})),
        {"nvidia.com/gpu": [gpu_uuid(0)]},
        id="time-slicing: a resource the node lacks is skipped",
    ),
    pytest.param(
        node(gpu(0)),
        ResourceOptions(
            sharing=SharingOptions(kind=SharingKind.MPS, replicas={"nvidia.com/gpu": 2})
        ),
        {"nvidia.com/gpu": [f"{gpu_uuid(0)}::0", f"{gpu_uuid(0)}::1"]},
        id="mps: replicas as <id>::<n>",
    ),
]


@pytest.mark.parametrize(("gpus", "options", "expected"), ADVERTISE_CASES)
def test_advertise(gpus: NodeGpus, options: ResourceOptions, expected: dict) -> None:
    result = advertise(gpus, options)
    assert ids(result) == expected
    for name, devices in result.items():
        assert all(d.resource == name for d in devices)


def test_single_accepts_a_compute_instance_smaller_than_its_gpu_instance() -> None:
    """Issue 16: NVIDIA's `single` pattern (`*`) takes `1c.2g.20gb`; only `mixed` has none."""
    result = advertise(
        node(gpu(0, profiles=("1c.2g.20gb", "1c.2g.20gb"))),
        ResourceOptions(mig_strategy=MigStrategy.SINGLE),
    )
    assert [d.mig.profile for d in result["nvidia.com/gpu"]] == ["1c.2g.20gb"] * 2


ERROR_CASES = [
    pytest.param(
        MIXED_NODE,
        ResourceOptions(mig_strategy=MigStrategy.SINGLE),
        "all devices on the node must be configured with the same migEnabled value; "
        "MIG disabled on GPU 0",
        id="single: MIG-enabled and disabled GPUs mixed",
    ),
    pytest.param(
        node(gpu(0, profiles=("1g.10gb", "2g.20gb"))),
        ResourceOptions(mig_strategy=MigStrategy.SINGLE),
        "more than one MIG device type present on node (1g.10gb, 2g.20gb)",
        id="single: non-uniform profiles",
    ),
    pytest.param(
        node(gpu(0, profiles=()), gpu(1, profiles=("1g.10gb",))),
        ResourceOptions(mig_strategy=MigStrategy.SINGLE),
        "invalid MIG configuration: at least one device with migEnabled=true was not "
        "configured correctly: device 0 (GPU-00000000-0000-0000-0000-000000000000) has no MIG "
        "devices configured",
        id="single: MIG enabled without MIG devices (NVIDIA's error)",
    ),
    pytest.param(
        node(gpu(0, profiles=("1c.2g.20gb",))),
        ResourceOptions(mig_strategy=MigStrategy.MIXED),
        "MIG profile '1c.2g.20gb' on GPU 0 does not match any resource patterns",
        id="mixed: compute instance smaller than its GPU instance",
    ),
    pytest.param(
        ALL_MIG_NODE,
        ResourceOptions(
            mig_strategy=MigStrategy.SINGLE,
            sharing=SharingOptions(kind=SharingKind.MPS, replicas={"nvidia.com/gpu": 2}),
        ),
        "nvidia.com/gpu: sharing using MPS is not supported for MIG devices",
        id="mps: MIG devices rejected",
    ),
    pytest.param(
        node(gpu(0, compute_capability=(7, 0))),
        ResourceOptions(
            sharing=SharingOptions(kind=SharingKind.MPS, replicas={"nvidia.com/gpu": 17})
        ),
        "replicas: 17 exceeds the 16 MPS clients GPU 0 (compute capability 7.0) supports",
        id="mps: replicas beyond the MPS client limit",
    ),
    pytest.param(
        node(gpu(0)),
        ResourceOptions(sharing=time_slicing({"nvidia.com/gpu": 0})),
        "sharing.timeSlicing.resources[nvidia.com/gpu].replicas: must be >= 1",
        id="time-slicing: zero replicas",
    ),
]


@pytest.mark.parametrize(("gpus", "options", "message"), ERROR_CASES)
def test_advertise_rejects(gpus: NodeGpus, options: ResourceOptions, message: str) -> None:
    with pytest.raises(AdvertiseError) as error:
        advertise(gpus, options)
    assert message in str(error.value)


def test_resource_name_longer_than_63_characters_is_rejected() -> None:
    profile = "1g.10gb+" + "x" * 50
    with pytest.raises(AdvertiseError, match="must be 63 characters or less"):
        advertise(
            node(gpu(0, profiles=(profile,))), ResourceOptions(mig_strategy=MigStrategy.MIXED)
        )


def test_health_group_holds_every_replica_and_mig_device_of_a_gpu() -> None:
    """NVIDIA #1929: a failing GPU must take all IDs that share it down together."""
    options = ResourceOptions(
        mig_strategy=MigStrategy.MIXED,
        sharing=time_slicing({"nvidia.com/mig-1g.10gb": 2, "nvidia.com/gpu": 2}),
    )
    advertised = advertise(MIXED_NODE, options)
    groups = health_groups(d for devices in advertised.values() for d in devices)
    assert groups == {
        gpu_uuid(0): (f"{gpu_uuid(0)}::0", f"{gpu_uuid(0)}::1"),
        gpu_uuid(1): (
            f"{mig_uuid(1, 0)}::0",
            f"{mig_uuid(1, 0)}::1",
            f"{mig_uuid(1, 1)}::0",
            f"{mig_uuid(1, 1)}::1",
            mig_uuid(1, 2),
        ),
    }


def test_simulated_fleet_under_mixed() -> None:
    fleet = from_fleet("6xH100+2xH100:mig=7x1g.10gb")
    result = advertise(fleet, ResourceOptions(mig_strategy=MigStrategy.MIXED))
    assert {name: len(devices) for name, devices in result.items()} == {
        "nvidia.com/gpu": 6,
        "nvidia.com/mig-1g.10gb": 14,
    }
    assert [d.id for d in result["nvidia.com/gpu"]] == [g.uuid for g in fleet.gpus[:6]]


@pytest.mark.parametrize(
    ("strategy", "advertised", "warnings"),
    [
        (
            MigStrategy.MIXED,
            {"nvidia.com/gpu": [gpu_uuid(0)], "nvidia.com/mig-1g.10gb": [mig_uuid(2, 0)]},
            [
                "device 1 (GPU-00000000-0000-0000-0000-000000000001) has no MIG devices "
                "configured: it is not advertised"
            ],
        ),
        (MigStrategy.NONE, {"nvidia.com/gpu": [gpu_uuid(0), gpu_uuid(1), gpu_uuid(2)]}, []),
    ],
    ids=["mixed: the GPU is skipped with a warning", "none: advertised whole, no warning"],
)
def test_a_mig_enabled_gpu_without_mig_devices(strategy, advertised, warnings) -> None:
    """Issue 16 §1.4: under `mixed` it stopped startup; NVIDIA's `assertAllMigDevicesAreValid`
    warns and serves the other GPUs."""
    gpus = node(gpu(0), gpu(1, profiles=()), gpu(2, profiles=("1g.10gb",)))
    options = ResourceOptions(mig_strategy=strategy)
    assert ids(advertise(gpus, options)) == advertised
    assert list(mig_warnings(gpus, options)) == warnings
