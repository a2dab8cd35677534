"""The lab's DRA driver: NVIDIA's `gpu.nvidia.com` ResourceSlice for a simulated node.

The real driver (k8s-dra-driver-gpu) publishes one pool per node, named for the node, with a
device per whole GPU (attributes `type: gpu`, `uuid`) and per MIG device (`type: mig`,
`uuid`, `parentUUID`, `profile`), among others the exporter does not read. The lab
publishes the same shape to the fake API server, so the exporter's DRA join runs against
what a cluster serves. Device names are the lab's own (`gpu-0`, `gpu-6-mig-1`): the
exporter must only ever look them up, never parse them.
"""

from typing import Any

from gpufleet.lab.nvml.api import SimulatedNvml

DRIVER = "gpu.nvidia.com"


def gpu_device_name(index: int) -> str:
    return f"gpu-{index}"


def mig_device_name(index: int, gi_id: int) -> str:
    return f"gpu-{index}-mig-{gi_id}"


def device_names(sim: SimulatedNvml) -> dict[str, str]:
    """UUID (GPU or MIG) -> the device name the slice gives it."""
    names = {}
    for gpu in sim.devices:
        names[gpu.uuid] = gpu_device_name(gpu.index)
        for mig in gpu.mig if gpu.mig_enabled else ():
            names[mig.uuid] = mig_device_name(gpu.index, mig.gi_id)
    return names


def resource_slice(sim: SimulatedNvml, node_name: str) -> dict[str, Any]:
    """The node's ResourceSlice (resource.k8s.io/v1): whole GPUs not in MIG mode, and MIG
    devices, as the driver advertises what can be allocated."""
    devices = []
    for gpu in sim.devices:
        if not gpu.mig_enabled:
            devices.append(_device(gpu_device_name(gpu.index), type="gpu", uuid=gpu.uuid))
            continue
        for mig in gpu.mig:
            devices.append(
                _device(
                    mig_device_name(gpu.index, mig.gi_id),
                    type="mig",
                    uuid=mig.uuid,
                    parentUUID=gpu.uuid,
                    profile=mig.profile,
                )
            )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _device(name: str, **attributes: str) -> dict[str, Any]:
    return {"name": name, "attributes": {k: {"string": v} for k, v in attributes.items()}}
