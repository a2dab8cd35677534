"""What Allocate names from the host beyond NVML, end to end over real sockets: control
devices under passDeviceSpecs, and the GDS/MOFED/GDRCopy CDI specs (issue 16, §1.2-3)."""

import json
import os
from pathlib import Path

from helpers import wait_for

from gpufleet.plugin.core.allocate import CONTROL_DEVICES

GATED = """
version: v1
flags:
  gdsEnabled: true
  mofedEnabled: true
  gdrcopyEnabled: true
"""


def driver_root(tmp_path: Path, *nodes: str) -> Path:
    """A container driver root whose /dev has `nodes` (character devices: links to
    /dev/null)."""
    root = tmp_path / "driver-root"
    (root / "dev").mkdir(parents=True, exist_ok=True)
    for node in nodes:
        path = root / node.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink("/dev/null", path)
    return root


def allocate_one(node) -> object:
    wait_for(lambda: node.plugins.allocatable().get("nvidia.com/gpu"), what="GPUs")
    node.kubelet.admit(("default", "x", "uid-x"), "main", "nvidia.com/gpu", 1)
    return node.kubelet.allocation_response("default", "x", "main")


def test_pass_device_specs_leaves_out_control_devices_the_host_lacks(make_node, tmp_path):
    root = driver_root(tmp_path, "/dev/nvidiactl", "/dev/nvidia-uvm")
    node = make_node(pass_device_specs=True, container_driver_root=str(root))
    response = allocate_one(node)
    paths = [d.container_path for d in response.devices]
    assert [p for p in paths if p in CONTROL_DEVICES] == ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    assert len(paths) == 3  # and the GPU's own node


def test_gated_modes_name_only_the_cdi_specs_written_and_keep_their_env(make_node, tmp_path):
    root = driver_root(tmp_path, "/dev/nvidia-fs0", "/dev/nvidia-fs1", "/dev/gdrdrv")
    (root / "etc").mkdir()
    (root / "etc/cufile.json").write_text("{}")
    cdi = tmp_path / "cdi"
    node = make_node(
        GATED,
        device_list_strategy="cdi-cri",
        container_driver_root=str(root),
        cdi_spec_dirs=str(cdi),
    )
    response = allocate_one(node)
    names = {d.name for d in response.cdi_devices}
    assert {n for n in names if not n.startswith("k8s.device-plugin.nvidia.com/gpu=")} == {
        "k8s.device-plugin.nvidia.com/gds=all",
        "k8s.device-plugin.nvidia.com/gdrcopy=all",
    }
    assert {k: v for k, v in response.envs.items() if k != "NVIDIA_VISIBLE_DEVICES"} == {
        "NVIDIA_GDS": "enabled",
        "NVIDIA_MOFED": "enabled",
        "NVIDIA_GDRCOPY": "enabled",
    }
    gds = json.loads((cdi / "gpufleet-k8s.device-plugin.nvidia.com-gds.json").read_text())
    (device,) = gds["devices"]
    assert device["name"] == "all"
    assert [n["path"] for n in device["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia-fs0",
        "/dev/nvidia-fs1",
    ]
    assert [m["containerPath"] for m in device["containerEdits"]["mounts"]] == ["/etc/cufile.json"]
    assert not (cdi / "gpufleet-k8s.device-plugin.nvidia.com-mofed.json").exists()
