"""DRA: ResourceSlice devices and the join of pod-resources claims with them (issue 15 §2)."""

import pytest

from gpufleet.exporter.core.dra import (
    ClaimDevice,
    SliceDevice,
    resolve_claims,
    slice_devices,
)

GPU = "GPU-00000000-0000-0000-0000-000000000001"
MIG = "MIG-00000000-0000-0000-0000-000000000002"


def _slice(*devices: dict, driver: str = "gpu.nvidia.com", v1beta1: bool = False) -> dict:
    if v1beta1:
        devices = tuple(
            {"name": d["name"], "basic": {"attributes": d["attributes"]}} for d in devices
        )
    return {"spec": {"driver": driver, "pool": {"name": "node-a"}, "devices": list(devices)}}


def _device(name: str, **attrs: str) -> dict:
    return {"name": name, "attributes": {k: {"string": v} for k, v in attrs.items()}}


GPU_DEVICE = _device("gpu-0", type="gpu", uuid=GPU)
MIG_DEVICE = _device("gpu-1-mig-3", type="mig", uuid=MIG, parentUUID=GPU, profile="1g.10gb")


@pytest.mark.parametrize("v1beta1", [False, True], ids=["v1", "v1beta1"])
def test_slice_devices(v1beta1: bool) -> None:
    assert slice_devices(_slice(GPU_DEVICE, MIG_DEVICE, v1beta1=v1beta1)) == (
        SliceDevice(pool="node-a", name="gpu-0", type="gpu", uuid=GPU),
        SliceDevice(
            pool="node-a",
            name="gpu-1-mig-3",
            type="mig",
            uuid=MIG,
            parent_uuid=GPU,
            profile="1g.10gb",
        ),
    )


@pytest.mark.parametrize(
    "resource_slice",
    [
        pytest.param(_slice(GPU_DEVICE, driver="other.example.com"), id="other-driver"),
        pytest.param(_slice(_device("x", type="vfio", uuid=GPU)), id="unknown-type"),
        pytest.param(_slice({"attributes": {}}, "junk", {"name": "n", "attributes": 3}), id="junk"),
        pytest.param({"spec": None}, id="no-spec"),
    ],
)
def test_slice_devices_skips_what_is_not_an_nvidia_gpu(resource_slice: dict) -> None:
    assert slice_devices(resource_slice) == ()


def _claim(device: str, *, driver: str = "gpu.nvidia.com") -> ClaimDevice:
    return ClaimDevice(
        namespace="ml",
        pod="p",
        container="c",
        claim_name="p-gpu",
        claim_namespace="ml",
        driver=driver,
        pool="node-a",
        device=device,
    )


DEVICES = {(d.pool, d.name): d for d in slice_devices(_slice(GPU_DEVICE, MIG_DEVICE))}
DRA = (
    ("dra_claim_name", "p-gpu"),
    ("dra_claim_namespace", "ml"),
)


@pytest.mark.parametrize(
    ("claim", "device_id", "attributes", "unknown"),
    [
        pytest.param(
            _claim("gpu-0"),
            GPU,
            (
                *DRA,
                ("dra_device_name", "gpu-0"),
                ("dra_driver_name", "gpu.nvidia.com"),
                ("dra_pool_name", "node-a"),
            ),
            0,
            id="gpu",
        ),
        pytest.param(
            _claim("gpu-1-mig-3"),
            MIG,
            (
                *DRA,
                ("dra_device_name", "gpu-1-mig-3"),
                ("dra_driver_name", "gpu.nvidia.com"),
                ("dra_mig_device_uuid", MIG),
                ("dra_mig_profile", "1g.10gb"),
                ("dra_pool_name", "node-a"),
            ),
            0,
            id="mig",
        ),
        pytest.param(_claim("gpu-9"), None, None, 1, id="not-in-any-slice"),
        pytest.param(_claim("gpu-0", driver="nic.example.com"), None, None, 0, id="other-driver"),
    ],
)
def test_resolve_claims(claim, device_id, attributes, unknown) -> None:
    holdings, missing = resolve_claims([claim], DEVICES)
    assert missing == unknown
    if device_id is None:
        assert holdings == ()
    else:
        (held,) = holdings
        assert (held.namespace, held.pod, held.container) == ("ml", "p", "c")
        assert held.device_id == device_id
        assert held.attributes == attributes
