"""`preferred_allocation`: topology-aligned whole GPUs, distributed/packed replicas, and a
valid answer whatever is lost or unknown (NVIDIA #2038)."""

import pytest
from helpers.plugin_node import gpu, gpu_uuid, islands, mig_uuid, node

from gpufleet.plugin.core.devices import ResourceOptions, SharingKind, SharingOptions, advertise
from gpufleet.plugin.core.model import AdvertisedDevice
from gpufleet.plugin.core.preferred import AllocationPolicy, preferred_allocation

DISTRIBUTED, PACKED = AllocationPolicy.DISTRIBUTED, AllocationPolicy.PACKED
# An HGX-like node split into two NVLink islands: 0-3 and 4-7.
TWO_ISLANDS = islands((0, 1, 2, 3), (4, 5, 6, 7))
EIGHT = {d.id: d for d in advertise(node(*map(gpu, range(8))), ResourceOptions())["nvidia.com/gpu"]}
SIXTEEN = {
    d.id: d for d in advertise(node(*map(gpu, range(16))), ResourceOptions())["nvidia.com/gpu"]
}
SIXTEEN_LINKS = islands(*(tuple(range(i, i + 4)) for i in range(0, 16, 4)))
REPLICAS = {
    d.id: d
    for d in advertise(
        node(gpu(0), gpu(1), gpu(2)),
        ResourceOptions(
            sharing=SharingOptions(kind=SharingKind.TIME_SLICING, replicas={"nvidia.com/gpu": 4})
        ),
    )["nvidia.com/gpu"]
}
MIGS = {
    d.id: d
    for d in advertise(
        node(gpu(1, profiles=("1g.10gb",) * 3), gpu(0, profiles=("1g.10gb",) * 3)),
        ResourceOptions(mig_strategy="single"),
    )["nvidia.com/gpu"]
}


def g(*indexes: int) -> list[str]:
    return [gpu_uuid(i) for i in indexes]


def r(*pairs: tuple[int, int]) -> list[str]:
    return [f"{gpu_uuid(i)}::{n}" for i, n in pairs]


def all_replicas(*except_: tuple[int, int]) -> list[str]:
    return [i for i in REPLICAS if i not in r(*except_)]


WHOLE_GPU_CASES = [
    pytest.param(g(*range(8)), [], 2, {}, g(0, 1), id="pair inside the first NVLink island"),
    pytest.param(g(2, 5, 6, 7), [], 2, {}, g(5, 6), id="pair inside the island that has two"),
    pytest.param(g(*range(8)), [], 4, {}, g(0, 1, 2, 3), id="four: a whole island"),
    pytest.param(
        g(0, 1, 4, 5, 6, 7), [], 4, {}, g(4, 5, 6, 7), id="four: the only complete island"
    ),
    pytest.param(g(*range(8)), g(5), 2, {}, g(5, 4), id="must_include joins its island"),
    pytest.param(
        g(0, 3, 5, 6, 7), g(0), 2, {}, g(0, 3), id="must_include pulls a partner from its island"
    ),
    pytest.param(
        g(*range(8)), g(0, 4), 3, {}, g(0, 4, 1), id="must_include across islands: lowest tie"
    ),
    pytest.param(g(*range(8)), [], 6, {}, g(0, 1, 2, 3, 4, 5), id="six: an island plus a pair"),
    pytest.param(g(*range(8)), [], 2, {"links": {}}, g(0, 1), id="no topology: lowest indexes"),
    pytest.param(g(*range(4)), [], 2, {"unhealthy": g(1)}, g(0, 2), id="unhealthy GPU avoided"),
    pytest.param(
        ["GPU-lost", *g(6, 7, 2)],
        [],
        2,
        {},
        g(6, 7),
        id="unknown (lost) GPU in available is skipped (#2038)",
    ),
    pytest.param(
        ["GPU-lost", *g(3), "GPU-gone"],
        [],
        2,
        {},
        [*g(3), "GPU-lost"],
        id="too few known GPUs: the rest from available, in order (#2038)",
    ),
    pytest.param(
        g(*range(4)), ["GPU-lost"], 2, {}, ["GPU-lost", *g(0)], id="unknown must_include kept"
    ),
    pytest.param(
        g(7, 1, 4), g(4), 3, {}, [*g(4), *g(7, 1)], id="size == available: shortcut (PR #460)"
    ),
]


@pytest.mark.parametrize(("available", "must", "size", "extra", "expected"), WHOLE_GPU_CASES)
def test_whole_gpus(
    available: list[str], must: list[str], size: int, extra: dict, expected: list[str]
) -> None:
    extra = {"links": TWO_ISLANDS} | extra
    links = extra.pop("links")
    for policy in AllocationPolicy:
        chosen = preferred_allocation(available, must, size, EIGHT, links, policy=policy, **extra)
        assert list(chosen) == expected


@pytest.mark.parametrize(
    ("must", "expected"),
    [
        pytest.param([], g(*range(8)), id="two whole islands"),
        pytest.param(g(8), [*g(8), *g(0, 1, 2, 3, 9, 10, 11)], id="must_include's island first"),
    ],
)
def test_sixteen_gpus_use_the_bounded_search(must: list[str], expected: list[str]) -> None:
    chosen = preferred_allocation(
        g(*range(16)), must, 8, SIXTEEN, SIXTEEN_LINKS, policy=DISTRIBUTED
    )
    assert list(chosen) == expected


REPLICA_CASES = [
    pytest.param(list(REPLICAS), [], 2, DISTRIBUTED, r((0, 0), (1, 0)), id="distributed: spread"),
    pytest.param(list(REPLICAS), [], 2, PACKED, r((0, 0), (0, 1)), id="packed: fill one GPU"),
    pytest.param(
        list(REPLICAS),
        [],
        5,
        PACKED,
        r((0, 0), (0, 1), (0, 2), (0, 3), (1, 0)),
        id="packed: then the next GPU",
    ),
    pytest.param(
        all_replicas((0, 0), (0, 1), (1, 0)),
        [],
        2,
        DISTRIBUTED,
        r((2, 0), (1, 1)),
        id="distributed: least-used GPUs first, counting other pods",
    ),
    pytest.param(
        all_replicas((0, 0), (1, 0), (1, 1)),
        [],
        3,
        PACKED,
        r((1, 2), (1, 3), (0, 1)),
        id="packed: most-used GPU first, counting other pods",
    ),
    pytest.param(
        list(REPLICAS),
        r((1, 0)),
        3,
        DISTRIBUTED,
        r((1, 0), (0, 0), (2, 0)),
        id="distributed: must_include counts as used",
    ),
    pytest.param(
        list(REPLICAS),
        r((2, 3)),
        2,
        PACKED,
        r((2, 3), (2, 0)),
        id="packed: must_include's GPU filled first",
    ),
]


@pytest.mark.parametrize(("available", "must", "size", "policy", "expected"), REPLICA_CASES)
def test_replicas(
    available: list[str],
    must: list[str],
    size: int,
    policy: AllocationPolicy,
    expected: list[str],
) -> None:
    chosen = preferred_allocation(available, must, size, REPLICAS, TWO_ISLANDS, policy=policy)
    assert list(chosen) == expected


def test_replicas_of_an_unhealthy_gpu_are_avoided() -> None:
    lost = r(*((0, n) for n in range(4)))
    chosen = preferred_allocation(
        list(REPLICAS), [], 2, REPLICAS, {}, policy=PACKED, unhealthy=lost
    )
    assert list(chosen) == r((1, 0), (1, 1))


def test_mig_devices_in_gpu_then_mig_order() -> None:
    available = list(reversed(MIGS))
    chosen = preferred_allocation(available, [], 4, MIGS, {}, policy=DISTRIBUTED)
    assert list(chosen) == [mig_uuid(0, 0), mig_uuid(0, 1), mig_uuid(0, 2), mig_uuid(1, 0)]


def test_answer_is_always_a_valid_choice() -> None:
    """Whatever the mix of known, unknown and unhealthy IDs, the answer is `size` distinct
    available IDs containing must_include (#2038: never an error)."""
    devices: dict[str, AdvertisedDevice] = dict(EIGHT)
    available = ["GPU-lost-a", *g(0, 3, 5), "GPU-lost-b", *g(6)]
    for size in range(2, len(available) + 1):
        chosen = preferred_allocation(
            available, g(5), size, devices, TWO_ISLANDS, policy=DISTRIBUTED, unhealthy=g(3)
        )
        assert len(chosen) == len(set(chosen)) == size
        assert set(chosen) <= set(available) and gpu_uuid(5) in chosen


def _shared(gpus: int, replicas: int) -> dict[str, AdvertisedDevice]:
    options = ResourceOptions(
        sharing=SharingOptions(kind=SharingKind.TIME_SLICING, replicas={"nvidia.com/gpu": replicas})
    )
    devices = advertise(node(*map(gpu, range(gpus))), options)["nvidia.com/gpu"]
    return {d.id: d for d in devices}


# NVIDIA v0.20's internal/rm/allocate_test.go, as facts: (GPUs, replicas each, available as
# (gpu, replica) pairs or None for all, size, policy) -> replicas taken per GPU index.
NVIDIA_ALLOC_CASES = [
    pytest.param(
        2,
        2,
        [(0, 0), (0, 1), (1, 1)],
        2,
        DISTRIBUTED,
        {0: 1, 1: 1},
        id="TestDistributedAlloc_PartiallyAllocated_DistributesAcrossDistinctGPUs (issue 16)",
    ),
    pytest.param(2, 4, None, 2, DISTRIBUTED, {0: 1, 1: 1}, id="distributed: 2x4, allocate 2"),
    pytest.param(3, 2, None, 3, DISTRIBUTED, {0: 1, 1: 1, 2: 1}, id="distributed: 3x2, allocate 3"),
    pytest.param(2, 4, None, 4, DISTRIBUTED, {0: 2, 1: 2}, id="distributed: 2x4, allocate 4"),
    pytest.param(1, 4, None, 1, DISTRIBUTED, {0: 1}, id="distributed: one GPU, allocate 1"),
    pytest.param(
        3, 4, None, 3, DISTRIBUTED, {0: 1, 1: 1, 2: 1}, id="TestDistributedAllocIsDefault"
    ),
    pytest.param(2, 4, None, 2, PACKED, {0: 2}, id="packed: 2x4, allocate 2 on one GPU"),
    pytest.param(3, 2, None, 3, PACKED, {0: 2, 1: 1}, id="packed: 3x2, allocate 3 fills one first"),
    pytest.param(2, 4, None, 4, PACKED, {0: 4}, id="packed: 2x4, allocate 4 on one GPU"),
    pytest.param(2, 4, None, 5, PACKED, {0: 4, 1: 1}, id="packed: 2x4, allocate 5 overflows"),
]


@pytest.mark.parametrize(
    ("gpus", "replicas", "available", "size", "policy", "per_gpu"), NVIDIA_ALLOC_CASES
)
def test_nvidia_allocation_tables(gpus, replicas, available, size, policy, per_gpu) -> None:
    devices = _shared(gpus, replicas)
    offered = list(devices) if available is None else r(*available)
    chosen = preferred_allocation(offered, [], size, devices, {}, policy=policy)
    counts: dict[int, int] = {}
    for device_id in chosen:
        index = devices[device_id].gpu.index
        counts[index] = counts.get(index, 0) + 1
    assert len(chosen) == size
    assert counts == per_gpu
