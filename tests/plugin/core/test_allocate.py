"""`allocate`: what the container runtime gets under each strategy (NVIDIA's exact output)."""

import dataclasses

import pytest
from helpers.plugin_node import H100_MIB, gpu, gpu_uuid, mig_uuid, node

from gpufleet.plugin.core.allocate import (
    AllocateOptions,
    AllocationError,
    ContainerAllocation,
    DeviceIdStrategy,
    DeviceListStrategy,
    DeviceSpec,
    Mount,
    MpsOptions,
    allocate,
)
from gpufleet.plugin.core.devices import (
    MigStrategy,
    ResourceOptions,
    SharingKind,
    SharingOptions,
    advertise,
)
from gpufleet.plugin.core.model import AdvertisedDevice

G0, G1, G2 = gpu_uuid(0), gpu_uuid(1), gpu_uuid(2)
M20, M21 = mig_uuid(2, 0), mig_uuid(2, 1)
NODE = node(gpu(0), gpu(1), gpu(2, profiles=("1g.10gb", "1g.10gb")))
GPUS = {d.id: d for d in advertise(NODE, ResourceOptions())["nvidia.com/gpu"]}
MIGS = {
    d.id: d
    for d in advertise(NODE, ResourceOptions(mig_strategy=MigStrategy.MIXED))[
        "nvidia.com/mig-1g.10gb"
    ]
}
REPLICAS = {
    d.id: d
    for d in advertise(
        NODE,
        ResourceOptions(
            sharing=SharingOptions(kind=SharingKind.TIME_SLICING, replicas={"nvidia.com/gpu": 4})
        ),
    )["nvidia.com/gpu"]
}
# GPU 2's MIG devices with the capability minors the host lists (GI, then CI).
CAPPED_GPU2 = dataclasses.replace(
    NODE.gpus[2],
    migs=tuple(
        dataclasses.replace(m, cap_minors=(20 + 2 * j, 21 + 2 * j))
        for j, m in enumerate(NODE.gpus[2].migs)
    ),
)
CAPPED_MIGS = {
    d.id: d
    for d in advertise(
        node(NODE.gpus[0], NODE.gpus[1], CAPPED_GPU2),
        ResourceOptions(mig_strategy=MigStrategy.MIXED),
    )["nvidia.com/mig-1g.10gb"]
}
CDI = "k8s.device-plugin.nvidia.com"
S = DeviceListStrategy
IMEX_NODE = "/dev/nvidia-caps-imex-channels/channel0"


def options(**overrides: object) -> AllocateOptions:
    return AllocateOptions(resource="nvidia.com/gpu", **overrides)  # type: ignore[arg-type]


def null_mount(device_id: str) -> Mount:
    return Mount(f"/var/run/nvidia-container-devices/{device_id}", "/dev/null", False)


ALLOCATE_CASES = [
    pytest.param(
        [G1, G0],
        GPUS,
        options(),
        ContainerAllocation(envs={"NVIDIA_VISIBLE_DEVICES": f"{G1},{G0}"}),
        id="envvar: UUIDs in the kubelet's request order (issue 16)",
    ),
    pytest.param(
        [G1, G0, G1],
        GPUS,
        options(),
        ContainerAllocation(envs={"NVIDIA_VISIBLE_DEVICES": f"{G1},{G0}"}),
        id="envvar: [foo, bar, foo] gives foo,bar (NVIDIA's server_test)",
    ),
    pytest.param(
        [G1, G0],
        GPUS,
        options(device_id_strategy=DeviceIdStrategy.INDEX),
        ContainerAllocation(envs={"NVIDIA_VISIBLE_DEVICES": "1,0"}),
        id="envvar: indexes",
    ),
    pytest.param(
        [M21, M20],
        MIGS,
        options(device_id_strategy=DeviceIdStrategy.INDEX),
        ContainerAllocation(envs={"NVIDIA_VISIBLE_DEVICES": "2:1,2:0"}),
        id="envvar: MIG indexes are i:j",
    ),
    pytest.param(
        [f"{G0}::3", f"{G0}::1", f"{G1}::0"],
        REPLICAS,
        options(),
        ContainerAllocation(envs={"NVIDIA_VISIBLE_DEVICES": f"{G0},{G1}"}),
        id="envvar: replica suffixes stripped and de-duplicated",
    ),
    pytest.param(
        [G0, G1],
        GPUS,
        options(device_list_strategies=(S.VOLUME_MOUNTS,)),
        ContainerAllocation(
            envs={"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"},
            mounts=(null_mount(G0), null_mount(G1)),
        ),
        id="volume-mounts: /dev/null per device",
    ),
    pytest.param(
        [G0],
        GPUS,
        options(device_list_strategies=(S.ENVVAR, S.VOLUME_MOUNTS)),
        ContainerAllocation(
            envs={"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"},
            mounts=(null_mount(G0),),
        ),
        id="envvar+volume-mounts: volume-mounts wins the env var",
    ),
    pytest.param(
        [G1, G0],
        GPUS,
        options(device_list_strategies=(S.CDI_CRI,)),
        ContainerAllocation(cdi_devices=(f"{CDI}/gpu={G1}", f"{CDI}/gpu={G0}")),
        id="cdi-cri: names in cdi_devices, in request order, no env var",
    ),
    pytest.param(
        [M20],
        MIGS,
        options(device_list_strategies=(S.CDI_CRI,), device_id_strategy=DeviceIdStrategy.INDEX),
        ContainerAllocation(cdi_devices=(f"{CDI}/gpu=2:0",)),
        id="cdi-cri: MIG index names",
    ),
    pytest.param(
        [G0],
        GPUS,
        options(
            device_list_strategies=(S.CDI_CRI, S.ENVVAR),
            gds_enabled=True,
            mofed_enabled=True,
            cdi_gated=("gds", "mofed"),
        ),
        ContainerAllocation(
            envs={"NVIDIA_VISIBLE_DEVICES": G0, "NVIDIA_GDS": "enabled", "NVIDIA_MOFED": "enabled"},
            cdi_devices=(f"{CDI}/gpu={G0}", f"{CDI}/gds=all", f"{CDI}/mofed=all"),
        ),
        id="gds/mofed: envs with envvar, CDI devices with CDI",
    ),
    pytest.param(
        [G0],
        GPUS,
        options(
            device_list_strategies=(S.CDI_CRI,),
            gds_enabled=True,
            mofed_enabled=True,
            gdrcopy_enabled=True,
            cdi_gated=("gdrcopy",),
        ),
        ContainerAllocation(
            envs={"NVIDIA_GDRCOPY": "enabled", "NVIDIA_GDS": "enabled", "NVIDIA_MOFED": "enabled"},
            cdi_devices=(f"{CDI}/gpu={G0}", f"{CDI}/gdrcopy=all"),
        ),
        id="issue 16: CDI only: envs kept, CDI names only for the specs that exist",
    ),
    pytest.param(
        [G0],
        GPUS,
        options(gdrcopy_enabled=True),
        ContainerAllocation(envs={"NVIDIA_VISIBLE_DEVICES": G0, "NVIDIA_GDRCOPY": "enabled"}),
        id="gdrcopy: env var",
    ),
    pytest.param(
        [M20],
        MIGS,
        options(pass_device_specs=True, dev_root="/run/nvidia/driver"),
        ContainerAllocation(
            envs={"NVIDIA_VISIBLE_DEVICES": M20},
            device_specs=tuple(
                DeviceSpec(p, "/run/nvidia/driver" + p, "rw")
                for p in (
                    "/dev/nvidiactl",
                    "/dev/nvidia-uvm",
                    "/dev/nvidia-uvm-tools",
                    "/dev/nvidia-modeset",
                    "/dev/nvidia2",
                )
            ),
        ),
        id="passDeviceSpecs: control devices then the parent GPU, under the dev root",
    ),
    pytest.param(
        [f"{G0}::0", f"{G0}::1", f"{G1}::2"],
        REPLICAS,
        options(pass_device_specs=True, control_devices=("/dev/nvidiactl",)),
        ContainerAllocation(
            envs={"NVIDIA_VISIBLE_DEVICES": f"{G0},{G1}"},
            device_specs=(
                DeviceSpec("/dev/nvidiactl", "/dev/nvidiactl", "rw"),
                DeviceSpec("/dev/nvidia0", "/dev/nvidia0", "rw"),
                DeviceSpec("/dev/nvidia1", "/dev/nvidia1", "rw"),
            ),
        ),
        id="passDeviceSpecs: one spec per physical GPU, absent control devices left out",
    ),
    pytest.param(
        [M20, M21],
        CAPPED_MIGS,
        options(pass_device_specs=True, control_devices=("/dev/nvidiactl",)),
        ContainerAllocation(
            envs={"NVIDIA_VISIBLE_DEVICES": f"{M20},{M21}"},
            device_specs=tuple(
                DeviceSpec(p, p, "rw")
                for p in (
                    "/dev/nvidiactl",
                    "/dev/nvidia2",
                    "/dev/nvidia-caps/nvidia-cap20",
                    "/dev/nvidia-caps/nvidia-cap21",
                    "/dev/nvidia-caps/nvidia-cap22",
                    "/dev/nvidia-caps/nvidia-cap23",
                )
            ),
        ),
        id="passDeviceSpecs: MIG GPU- and compute-instance capability devices, parent once",
    ),
    pytest.param(
        [G0],
        GPUS,
        options(imex_channels=("0",)),
        ContainerAllocation(envs={"NVIDIA_VISIBLE_DEVICES": G0, "NVIDIA_IMEX_CHANNELS": "0"}),
        id="imex: NVIDIA_IMEX_CHANNELS with envvar",
    ),
    pytest.param(
        [G0],
        GPUS,
        options(device_list_strategies=(S.VOLUME_MOUNTS,), imex_channels=("0",)),
        ContainerAllocation(
            envs={"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"},
            mounts=(null_mount(G0), null_mount("imex/0")),
        ),
        id="imex: a /dev/null mount per channel with volume-mounts",
    ),
    pytest.param(
        [G0],
        GPUS,
        options(device_list_strategies=(S.CDI_CRI,), imex_channels=("0",)),
        ContainerAllocation(cdi_devices=(f"{CDI}/gpu={G0}", f"{CDI}/imex-channel=0")),
        id="imex: an imex-channel CDI device with CDI, no env var",
    ),
    pytest.param(
        [G0],
        GPUS,
        options(
            pass_device_specs=True,
            control_devices=(),
            dev_root="/run/nvidia/driver",
            imex_channels=("0",),
        ),
        ContainerAllocation(
            envs={"NVIDIA_VISIBLE_DEVICES": G0, "NVIDIA_IMEX_CHANNELS": "0"},
            device_specs=(
                DeviceSpec("/dev/nvidia0", "/run/nvidia/driver/dev/nvidia0", "rw"),
                DeviceSpec(IMEX_NODE, "/run/nvidia/driver" + IMEX_NODE, "rw"),
            ),
        ),
        id="imex: the channel's device spec under passDeviceSpecs, under the dev root",
    ),
    pytest.param(
        [f"{G0}::0", f"{G1}::3"],
        REPLICAS,
        options(mps=MpsOptions(root="/run/nvidia/mps", replicas=4)),
        ContainerAllocation(
            envs={
                "NVIDIA_VISIBLE_DEVICES": f"{G0},{G1}",
                "CUDA_MPS_PIPE_DIRECTORY": "/mps/nvidia.com/gpu/pipe",
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={H100_MIB // 4}M,1={H100_MIB // 4}M",
            },
            mounts=(
                Mount("/mps/nvidia.com/gpu/pipe", "/run/nvidia/mps/nvidia.com/gpu/pipe", False),
                Mount("/dev/shm", "/run/nvidia/mps/shm", False),
            ),
        ),
        id="mps: pipe dir, shm and per-client limits",
    ),
]


@pytest.mark.parametrize(("request_ids", "devices", "opts", "expected"), ALLOCATE_CASES)
def test_allocate(
    request_ids: list[str],
    devices: dict[str, AdvertisedDevice],
    opts: AllocateOptions,
    expected: ContainerAllocation,
) -> None:
    assert allocate(request_ids, devices, opts) == expected


def test_cdi_annotations_key_is_deterministic_and_prefixed() -> None:
    opts = options(device_list_strategies=(S.CDI_ANNOTATIONS,), cdi_annotation_prefix="x.io/")
    first = allocate([G0, G1], GPUS, opts)
    assert first.annotations.keys() == allocate([G1, G0], GPUS, opts).annotations.keys()
    ((key, value),) = first.annotations.items()
    assert key.startswith("x.io/nvidia-device-plugin_")
    # CDI limits the name after the prefix to 63 characters.
    assert len(key.removeprefix("x.io/")) <= 63
    assert value == f"{CDI}/gpu={G0},{CDI}/gpu={G1}"
    assert first.envs == {} and first.cdi_devices == ()
    assert allocate([G0], GPUS, opts).annotations.keys() != first.annotations.keys()


ERROR_CASES = [
    pytest.param(
        ["GPU-gone"],
        GPUS,
        options(),
        'invalid allocation request for "nvidia.com/gpu": invalid request: unknown device: '
        "GPU-gone",
        id="one unknown ID (v0.20 text)",
    ),
    pytest.param(
        [G0, "GPU-a", "GPU-b::1"],
        GPUS,
        options(),
        'invalid allocation request for "nvidia.com/gpu": invalid request: unknown device: GPU-a',
        id="several unknown IDs: the first is named, as in v0.20",
    ),
    pytest.param(
        ["GPU-" + "x" * 10_000],
        GPUS,
        options(),
        'invalid allocation request for "nvidia.com/gpu": invalid request: unknown device: GPU-'
        + "x" * 252
        + "...",
        id="a huge unknown ID is cut short",
    ),
    pytest.param(
        [f"{G0}::0", f"{G1}::0"],
        REPLICAS,
        options(fail_requests_greater_than_one=True),
        'invalid allocation request for "nvidia.com/gpu": invalid request: maximum request size '
        "for shared resources is 1; found 2",
        id="failRequestsGreaterThanOne: two replicas",
    ),
    pytest.param(
        [f"{G0}::0", "GPU-gone::1"],
        REPLICAS,
        options(fail_requests_greater_than_one=True),
        'invalid allocation request for "nvidia.com/gpu": invalid request: unknown device: '
        "GPU-gone::1",
        id="unknown devices are checked before the replica count (v0.20)",
    ),
]


@pytest.mark.parametrize(("request_ids", "devices", "opts", "message"), ERROR_CASES)
def test_allocate_rejects(
    request_ids: list[str], devices: dict, opts: AllocateOptions, message: str
) -> None:
    with pytest.raises(AllocationError) as error:
        allocate(request_ids, devices, opts)
    assert str(error.value) == message


@pytest.mark.parametrize(
    ("request_ids", "devices"),
    [
        pytest.param([f"{G0}::0"], REPLICAS, id="one replica"),
        pytest.param([G0, G1], GPUS, id="whole GPUs"),
    ],
)
def test_fail_requests_greater_than_one_allows(request_ids: list[str], devices: dict) -> None:
    allocate(request_ids, devices, options(fail_requests_greater_than_one=True))


def test_mps_sets_no_memory_limit_for_a_gpu_whose_memory_nvml_did_not_say() -> None:
    """Its memory read as 0 (NVML could not tell): "0=0M" pinned the client to no memory.
    NVIDIA's MPS daemon skips such a device's limit; so does the allocation."""
    unread = node(gpu(0), gpu(1, memory_mib=0))
    sharing = SharingOptions(kind=SharingKind.MPS, replicas={"nvidia.com/gpu": 4})
    devices = {
        d.id: d for d in advertise(unread, ResourceOptions(sharing=sharing))["nvidia.com/gpu"]
    }
    mps = options(mps=MpsOptions(root="/run/nvidia/mps", replicas=4))
    both = allocate([f"{G0}::0", f"{G1}::0"], devices, mps).envs
    assert both["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={H100_MIB // 4}M"
    alone = allocate([f"{G1}::0"], devices, mps).envs
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in alone
