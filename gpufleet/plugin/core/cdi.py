"""The CDI specs the cdi-annotations and cdi-cri strategies need, built from discovery.

Allocate names devices `k8s.device-plugin.nvidia.com/gpu=<id>` (and `.../imex-channel=<id>`);
the container runtime resolves those names through CDI spec files, so a name without a spec
fails every container at creation. NVIDIA's plugin writes these specs at startup (nvidia-ctk's
library); so do we, from the devices discovered through NVML, in the public CDI format
(github.com/cncf-tags/container-device-interface, SPEC.md):

- `cdiVersion` 0.5.0: the first with `hostPath` on device nodes and with device names that
  start with a digit (deviceIDStrategy=index names devices `0` and `0:1`); mounts without
  a `type` and hooks need nothing newer;
- one device per physical GPU or MIG device, named by `allocate.visible_id` (so the names
  are exactly those Allocate returns), with its `allocate.device_nodes`;
- spec-wide edits, applied once any of its devices is requested: the control devices,
  `NVIDIA_VISIBLE_DEVICES=void` (so a legacy-mode nvidia-container-runtime injects nothing
  more itself), and the driver's user-space (`cdi_driver`: libraries, utilities, IPC
  sockets and firmware as bind mounts, read-only but for the sockets, and the
  create-symlinks and update-ldcache hooks), which make CUDA work in the container;
- host paths under the dev root (omitted when it is `/`: CDI then uses `path`); mounts
  always name their host path, under the driver root;
- GDS, MOFED and GDRCopy (nvidia-container-toolkit's gated modes): a spec of kind
  `k8s.device-plugin.nvidia.com/<mode>` with one device, `all`, holding the mode's device
  nodes found on the host (and GDS's udev and cufile.json mounts); none without nodes, as
  NVIDIA drops a spec with empty edits and then names no such device.

Without a driver in the driver root (the simulator) the spec has device nodes only, and
the nvidia-ctk hooks need nvidia-ctk (or nvidia-cdi-hook) at the hook path on the host.
A spec installed by the operator (nvidia-ctk's) is still always preferred to this one.
Pure: no I/O; `render` gives the file's bytes.
"""

import json
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.plugin.core.allocate import (
    CDI_IMEX_KIND,
    CDI_KIND,
    CDI_VENDOR,
    DeviceIdStrategy,
    device_nodes,
    imex_channel_node,
    visible_id,
)
from gpufleet.plugin.core.cdi_driver import NO_DRIVER_EDITS, DriverEdits, Mount
from gpufleet.plugin.core.devices import device_order
from gpufleet.plugin.core.model import AdvertisedDevice

CDI_VERSION = "0.5.0"
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
VOID_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES=void"

Spec = dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class CdiOptions:
    """How the specs name devices, and where their nodes and the driver are."""

    device_id_strategy: DeviceIdStrategy = DeviceIdStrategy.UUID
    dev_root: str = "/"  # the host's root for device nodes (flags.nvidiaDevRoot)
    control_devices: tuple[str, ...] = CONTROL_DEVICES
    # Where the driver's files are read (`host.driver_files`): the host's root
    # (flags.nvidiaDriverRoot) names mounts; this container's view of it is read.
    driver_root: str = "/"
    container_driver_root: str = "/driver-root"
    hook_path: str = "/usr/bin/nvidia-ctk"  # flags.plugin.nvidiaCTKPath


def gpu_spec(
    devices: Iterable[AdvertisedDevice],
    options: CdiOptions,
    *,
    driver: DriverEdits = NO_DRIVER_EDITS,
) -> Spec | None:
    """The `k8s.device-plugin.nvidia.com/gpu` spec for every physical device behind
    `devices` (replicas collapse), in GPU then MIG order, with `driver`'s mounts and hooks
    in the spec-wide edits; None without devices (a CDI spec must list at least one)."""
    physical: dict[str, AdvertisedDevice] = {}
    for device in sorted(devices, key=device_order):
        physical.setdefault(device.base_id, device)
    if not physical:
        return None
    return {
        "cdiVersion": CDI_VERSION,
        "kind": CDI_KIND,
        "devices": [
            {
                "name": visible_id(device, options.device_id_strategy),
                "containerEdits": {"deviceNodes": _nodes(device_nodes(device), options)},
            }
            for device in physical.values()
        ],
        "containerEdits": {
            "env": [VOID_VISIBLE_DEVICES],
            "deviceNodes": _nodes(options.control_devices, options),
            **_driver(driver),
        },
    }


def imex_spec(channels: Sequence[str], options: CdiOptions) -> Spec | None:
    """The `k8s.device-plugin.nvidia.com/imex-channel` spec, one device per channel ID;
    None without channels."""
    if not channels:
        return None
    return {
        "cdiVersion": CDI_VERSION,
        "kind": CDI_IMEX_KIND,
        "devices": [
            {
                "name": channel,
                "containerEdits": {"deviceNodes": _nodes([imex_channel_node(channel)], options)},
            }
            for channel in channels
        ],
    }


def gated_spec(
    mode: str, nodes: Sequence[str], mounts: Sequence[Mount], options: CdiOptions
) -> Spec | None:
    """The spec of a gated mode (`gds`, `mofed`, `gdrcopy`): device `all` with `nodes`
    (paths as the container sees them) and `mounts`; None without nodes."""
    if not nodes:
        return None
    edits: Spec = {"deviceNodes": _nodes(nodes, options)}
    edits |= _driver(DriverEdits(mounts=tuple(mounts)))
    return {
        "cdiVersion": CDI_VERSION,
        "kind": f"{CDI_VENDOR}/{mode}",
        "devices": [{"name": "all", "containerEdits": edits}],
    }


def render(spec: Spec) -> str:
    """The spec file's text: JSON, keys in the order built, two-space indent, final newline."""
    return json.dumps(spec, indent=2) + "\n"


def _driver(driver: DriverEdits) -> Spec:
    """The `mounts` and `hooks` of container edits; keys left out when empty."""
    edits: Spec = {}
    if driver.mounts:
        edits["mounts"] = [
            {"hostPath": m.host_path, "containerPath": m.container_path, "options": [*m.options]}
            for m in driver.mounts
        ]
    if driver.hooks:
        edits["hooks"] = [
            {"hookName": h.hook_name, "path": h.path, "args": [*h.args]} for h in driver.hooks
        ]
    return edits


def _nodes(paths: Iterable[str], options: CdiOptions) -> list[dict[str, str]]:
    nodes = []
    for path in paths:
        host = posixpath.normpath(posixpath.join(options.dev_root, path.lstrip("/")))
        nodes.append({"path": path} if host == path else {"path": path, "hostPath": host})
    return nodes
