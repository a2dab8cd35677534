"""The shared NVML discovery: GPUs and MIG devices with NVIDIA's profile names, never names
derived from memory sizes; one failing MIG device costs only itself, a lost GPU raises."""

from collections.abc import Iterator

import pynvml
import pytest

from gpufleet.lab.nvml.api import SimulatedNvml
from gpufleet.nvml.discovery import (
    gpu_device,
    mig_devices,
    mig_enabled,
    mig_profile_name,
)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("MIG 1g.10gb", "1g.10gb"),
        ("MIG 1g.12gb", "1g.12gb"),  # H100 NVL: dcgm-exporter #544 derived 1g.11gb
        ("MIG 3g.40gb+me", "3g.40gb+me"),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "1g.10gb"),
        ("NVIDIA H100 80GB HBM3", None),
        ("MIG", None),
        ("NVIDIA H100NVLMIG 1g.12gb", None),
    ],
    ids=[
        "profile-info",
        "h100-nvl-issue-544",
        "media-extension",
        "device-name",
        "no-mig",
        "bare-word",
        "glued",
    ],
)
def test_mig_profile_name(name: str, expected: str | None) -> None:
    assert mig_profile_name(name) == expected


@pytest.fixture
def sim() -> Iterator[SimulatedNvml]:
    lib = SimulatedNvml("1xH100+1xH100:mig=3g.40gb,2g.20gb,1g.10gb", seed=3)
    lib.nvmlInit()
    yield lib
    lib.close()


def test_a_gpu_is_its_handle_uuid_and_name(sim: SimulatedNvml) -> None:
    gpu = gpu_device(sim, 0)
    assert (gpu.index, gpu.uuid, gpu.name) == (0, sim.devices[0].uuid, "NVIDIA H100 80GB HBM3")
    assert not mig_enabled(sim, gpu.handle)


def test_mig_devices_carry_nvml_profile_names_by_index(sim: SimulatedNvml) -> None:
    gpu = gpu_device(sim, 1)
    assert mig_enabled(sim, gpu.handle)
    found, failed = mig_devices(sim, gpu)
    assert failed == ()
    assert [m.profile for m in found] == ["3g.40gb", "2g.20gb", "1g.10gb"]
    assert [m.index for m in found] == [0, 1, 2]
    assert [m.uuid for m in found] == [m.uuid for m in sim.devices[1].mig]


def test_a_failing_mig_device_is_a_failure_and_costs_only_itself(sim: SimulatedNvml) -> None:
    gpu = gpu_device(sim, 1)
    sim.set_not_supported("nvmlDeviceGetComputeInstanceId", index=1)
    found, failed = mig_devices(sim, gpu)
    assert found == ()
    assert [f.index for f in failed] == [0, 1, 2]
    assert all(isinstance(f.error, pynvml.NVMLError_NotSupported) for f in failed)


def test_a_lost_gpu_raises(sim: SimulatedNvml) -> None:
    gpu = gpu_device(sim, 1)
    sim.fail_gpu(1)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        mig_devices(sim, gpu)
