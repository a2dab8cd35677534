"""Device nodes the driver creates outside NVML's view: MIG capability devices, IMEX
channels, and which control devices (`/dev/nvidiactl`, `/dev/nvidia-uvm`, ...) exist.

NVML names a MIG device's GPU and compute instance but not the `/dev/nvidia-caps` nodes a
container needs to open them; the driver lists their minors in
`/proc/driver/nvidia-caps/mig-minors` (`gpu<minor>/gi<gi>/access <cap minor>`,
`gpu<minor>/gi<gi>/ci<ci>/access <cap minor>`, the GPU numbered by its device minor).
IMEX channels are plain device nodes, `/dev/nvidia-caps-imex-channels/channel<id>`,
created by the IMEX driver. Both are read once at startup, as NVIDIA's plugin does.

Partial results: an unreadable or malformed mig-minors file means no capability devices
(logged; Allocate then passes only the parent GPU's node), never a failed startup. A missing
IMEX channel is skipped with a warning, or is a startup error under `imex.required`. An
absent control device is left out of device specs, as NVIDIA's passDeviceSpecs does: a spec
naming a missing node fails container creation.
"""

import dataclasses
import logging
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpufleet.plugin.core.allocate import imex_channel_node
from gpufleet.plugin.core.model import NodeGpus

log = logging.getLogger(__name__)

MIG_MINORS_PATH = Path("/proc/driver/nvidia-caps/mig-minors")

# (GPU device minor, GPU instance id, compute instance id or None for the GI itself)
CapKey = tuple[int, int, int | None]

# Numbers of at most 9 digits: a longer one is no minor, and int() refuses thousands.
_GI_ACCESS = re.compile(r"^gpu(\d{1,9})/gi(\d{1,9})/access\s+(\d{1,9})$")
_CI_ACCESS = re.compile(r"^gpu(\d{1,9})/gi(\d{1,9})/ci(\d{1,9})/access\s+(\d{1,9})$")


class ImexError(Exception):
    """A required IMEX channel does not exist (a startup error)."""


def parse_mig_minors(text: str) -> dict[CapKey, int]:
    """The access-capability minors in a mig-minors file; other lines (`config`, `monitor`)
    are ignored."""
    minors: dict[CapKey, int] = {}
    for line in text.splitlines():
        line = line.strip()
        if match := _CI_ACCESS.match(line):
            gpu, gi, ci, minor = map(int, match.groups())
            minors[(gpu, gi, ci)] = minor
        elif match := _GI_ACCESS.match(line):
            gpu, gi, minor = map(int, match.groups())
            minors[(gpu, gi, None)] = minor
    return minors


def read_mig_minors(path: Path = MIG_MINORS_PATH) -> dict[CapKey, int]:
    """`parse_mig_minors` of the file; {} when it is absent (no MIG-capable driver) or
    unreadable (logged)."""
    try:
        return parse_mig_minors(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("cannot read %s, MIG capability devices unknown: %s", path, exc)
        return {}


def with_cap_minors(node: NodeGpus, minors: Mapping[CapKey, int]) -> NodeGpus:
    """`node` with each MIG device's (GI, CI) capability minors filled in where both are
    listed; a MIG device with either missing keeps `cap_minors=()`. Pure."""
    gpus = []
    for gpu in node.gpus:
        migs = []
        for mig in gpu.migs:
            gi = minors.get((gpu.minor, mig.gi_id, None))
            ci = minors.get((gpu.minor, mig.gi_id, mig.ci_id))
            caps = (gi, ci) if gi is not None and ci is not None else ()
            migs.append(dataclasses.replace(mig, cap_minors=caps))
        gpus.append(dataclasses.replace(gpu, migs=tuple(migs)))
    return dataclasses.replace(node, gpus=tuple(gpus))


def imex_channels(
    channel_ids: Sequence[int], *, required: bool, container_driver_root: Path
) -> tuple[str, ...]:
    """The configured IMEX channels (as IDs, "0") whose device node exists, NVIDIA's way.

    A channel exists if a character device is at its path under the container driver root
    (when that root has a /dev, as with the GPU operator's driver container) or at its own
    path. Raises ImexError naming the channel if one is missing and `required`."""
    found = []
    for channel_id in channel_ids:
        channel = str(channel_id)
        path = imex_channel_node(channel)
        candidates = _candidates(path, container_driver_root)
        if any(_is_char_device(p) for p in candidates):
            found.append(channel)
            continue
        where = " or ".join(str(p) for p in candidates)
        if required:
            raise ImexError(
                f"imex.required: requested IMEX channel channel{channel} does not exist "
                f"(no character device at {where})"
            )
        log.warning("ignoring requested IMEX channel channel%s: no device at %s", channel, where)
    return tuple(found)


def present_control_devices(
    paths: Sequence[str], *, container_driver_root: Path
) -> tuple[str, ...]:
    """The control devices in `paths` that exist (NVIDIA stats each one), looked up as
    `imex_channels` looks up channels; order kept."""
    return tuple(p for p in paths if any(c.exists() for c in _candidates(p, container_driver_root)))


def _candidates(path: str, container_driver_root: Path) -> list[Path]:
    """Where this process sees a host device node: under the container driver root when it
    has a /dev (the GPU operator's driver container), and at its own path."""
    root = container_driver_root if (container_driver_root / "dev").is_dir() else Path("/")
    return list(dict.fromkeys((root / path.lstrip("/"), Path(path))))


def _is_char_device(path: Path) -> bool:
    try:
        return stat.S_ISCHR(path.stat().st_mode)
    except OSError:
        return False
