"""`cdi`: the CDI specs the plugin generates, as exact bytes, and their names agreeing with
what Allocate returns under each device ID strategy."""

import dataclasses
import json

import pytest
from helpers.plugin_node import gpu, gpu_uuid, mig_uuid, node

from gpufleet.plugin.core.allocate import (
    AllocateOptions,
    DeviceIdStrategy,
    DeviceListStrategy,
    allocate,
)
from gpufleet.plugin.core.cdi import CdiOptions, gpu_spec, imex_spec, render
from gpufleet.plugin.core.cdi_driver import DriverEdits, Hook, Mount
from gpufleet.plugin.core.devices import (
    MigStrategy,
    ResourceOptions,
    SharingKind,
    SharingOptions,
    advertise,
)

# GPU 1 is MIG-enabled with two 1g.10gb devices; the host lists the first one's caps only.
GPU1 = gpu(1, profiles=("1g.10gb", "1g.10gb"))
NODE = node(
    gpu(0),
    dataclasses.replace(
        GPU1, migs=(dataclasses.replace(GPU1.migs[0], cap_minors=(12, 13)), GPU1.migs[1])
    ),
)
MIXED = advertise(NODE, ResourceOptions(mig_strategy=MigStrategy.MIXED))
EVERY_DEVICE = [d for devices in MIXED.values() for d in devices]

EXPECTED_INDEX_SPEC = """\
{
  "cdiVersion": "0.5.0",
  "kind": "k8s.device-plugin.nvidia.com/gpu",
  "devices": [
    {
      "name": "0",
      "containerEdits": {
        "deviceNodes": [
          {
            "path": "/dev/nvidia0",
            "hostPath": "/run/nvidia/driver/dev/nvidia0"
          }
        ]
      }
    },
    {
      "name": "1:0",
      "containerEdits": {
        "deviceNodes": [
          {
            "path": "/dev/nvidia1",
            "hostPath": "/run/nvidia/driver/dev/nvidia1"
          },
          {
            "path": "/dev/nvidia-caps/nvidia-cap12",
            "hostPath": "/run/nvidia/driver/dev/nvidia-caps/nvidia-cap12"
          },
          {
            "path": "/dev/nvidia-caps/nvidia-cap13",
            "hostPath": "/run/nvidia/driver/dev/nvidia-caps/nvidia-cap13"
          }
        ]
      }
    },
    {
      "name": "1:1",
      "containerEdits": {
        "deviceNodes": [
          {
            "path": "/dev/nvidia1",
            "hostPath": "/run/nvidia/driver/dev/nvidia1"
          }
        ]
      }
    }
  ],
  "containerEdits": {
    "env": [
      "NVIDIA_VISIBLE_DEVICES=void"
    ],
    "deviceNodes": [
      {
        "path": "/dev/nvidiactl",
        "hostPath": "/run/nvidia/driver/dev/nvidiactl"
      }
    ]
  }
}
"""


def test_gpu_spec_bytes_with_index_names_mig_caps_and_a_dev_root() -> None:
    options = CdiOptions(
        device_id_strategy=DeviceIdStrategy.INDEX,
        dev_root="/run/nvidia/driver",
        control_devices=("/dev/nvidiactl",),
    )
    assert render(gpu_spec(EVERY_DEVICE, options)) == EXPECTED_INDEX_SPEC


def test_gpu_spec_with_uuid_names_omits_host_paths_under_slash() -> None:
    spec = gpu_spec(EVERY_DEVICE, CdiOptions())
    assert [d["name"] for d in spec["devices"]] == [gpu_uuid(0), mig_uuid(1, 0), mig_uuid(1, 1)]
    assert spec["devices"][0]["containerEdits"] == {"deviceNodes": [{"path": "/dev/nvidia0"}]}
    assert spec["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidiactl"},
        {"path": "/dev/nvidia-uvm"},
        {"path": "/dev/nvidia-uvm-tools"},
    ]


def test_driver_mounts_and_hooks_are_spec_wide_edits() -> None:
    lib = "/usr/lib64/libcuda.so.550.54.15"
    driver = DriverEdits(
        mounts=(Mount(host_path="/run/nvidia/driver" + lib, container_path=lib),),
        hooks=(
            Hook(
                hook_name="createContainer",
                path="/usr/bin/nvidia-ctk",
                args=("nvidia-ctk", "hook", "update-ldcache", "--folder", "/usr/lib64"),
            ),
        ),
    )
    spec = json.loads(render(gpu_spec(EVERY_DEVICE, CdiOptions(), driver=driver)))
    assert spec["cdiVersion"] == "0.5.0"  # mounts and hooks are older than 0.5.0
    assert spec["containerEdits"]["mounts"] == [
        {
            "hostPath": "/run/nvidia/driver/usr/lib64/libcuda.so.550.54.15",
            "containerPath": lib,
            "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"],
        }
    ]
    assert spec["containerEdits"]["hooks"] == [
        {
            "hookName": "createContainer",
            "path": "/usr/bin/nvidia-ctk",
            "args": ["nvidia-ctk", "hook", "update-ldcache", "--folder", "/usr/lib64"],
        }
    ]
    assert all("mounts" not in d["containerEdits"] for d in spec["devices"])


def test_replicas_collapse_to_one_cdi_device_per_gpu() -> None:
    shared = advertise(
        node(gpu(0), gpu(1)),
        ResourceOptions(
            sharing=SharingOptions(kind=SharingKind.TIME_SLICING, replicas={"nvidia.com/gpu": 3})
        ),
    )["nvidia.com/gpu"]
    spec = gpu_spec(shared, CdiOptions())
    assert [d["name"] for d in spec["devices"]] == [gpu_uuid(0), gpu_uuid(1)]


@pytest.mark.parametrize("strategy", list(DeviceIdStrategy), ids=str)
def test_every_name_allocate_returns_is_defined_by_the_spec(strategy) -> None:
    spec = gpu_spec(EVERY_DEVICE, CdiOptions(device_id_strategy=strategy))
    defined = {f"{spec['kind']}={d['name']}" for d in spec["devices"]}
    for resource, devices in MIXED.items():
        by_id = {d.id: d for d in devices}
        options = AllocateOptions(
            resource=resource,
            device_list_strategies=(DeviceListStrategy.CDI_CRI,),
            device_id_strategy=strategy,
        )
        for device_id in by_id:
            (name,) = allocate([device_id], by_id, options).cdi_devices
            assert name in defined


def test_no_devices_no_spec() -> None:
    assert gpu_spec([], CdiOptions()) is None
    assert imex_spec([], CdiOptions()) is None


def test_imex_spec_names_channels_by_id() -> None:
    spec = json.loads(render(imex_spec(["0"], CdiOptions(dev_root="/host"))))
    assert spec == {
        "cdiVersion": "0.5.0",
        "kind": "k8s.device-plugin.nvidia.com/imex-channel",
        "devices": [
            {
                "name": "0",
                "containerEdits": {
                    "deviceNodes": [
                        {
                            "path": "/dev/nvidia-caps-imex-channels/channel0",
                            "hostPath": "/host/dev/nvidia-caps-imex-channels/channel0",
                        }
                    ]
                },
            }
        ],
    }
