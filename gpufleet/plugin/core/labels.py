"""GPU Feature Discovery's node labels, from the plugin's own discovery.

Pods select GPU nodes by GFD's labels (`nvidia.com/gpu.product`, `nvidia.com/gpu.memory`,
`nvidia.com/mig.strategy`, ...), which NVIDIA computes in a separate daemon
(`internal/lm` of k8s-device-plugin v0.20). The plugin already knows everything those labels
say, so it publishes the same names with the same values, computed here; adapters write them
to NFD's features.d and/or onto the Node.

GFD's rules kept: the `nvidia.com/gpu.*` labels describe one GPU model (GFD overwrites per
model in map order; here the model of the lowest-indexed MIG-disabled GPU wins, else of the
lowest MIG-enabled one), a shared resource's product gets `-SHARED` unless renamed, a
MIG-enabled GPU is labelled without sharing, and under `single`/`mixed` the MIG labels
override; a MIG type's attributes are NVML's, or, when NVML did not answer, its memory and
the slices its profile name states; `gpu.mode` is the GPUs' common PCI class. Not published:
`gfd.timestamp` (optional in GFD),
`gpu.clique` and the IMEX labels.

Pure: no I/O.
"""

import re
from collections.abc import Mapping, Sequence

from gpufleet.core.label_values import LABEL_VALUE_MAX
from gpufleet.plugin.core.config import PluginConfig, Sharing, SharingKind
from gpufleet.plugin.core.devices import mig_resource
from gpufleet.plugin.core.model import GpuInfo, MigInfo, NodeGpus

GPU_RESOURCE = "nvidia.com/gpu"
MACHINE_UNKNOWN = "unknown"
_UNSAFE = re.compile(r"[^A-Za-z0-9\-_. ]")
# A MIG profile's slices: "[<c>c.]<g>g.<memory>gb[+...]".
_SLICES = re.compile(r"(?:(\d+)c\.)?(\d+)g\.")
_STRATEGY = {SharingKind.TIME_SLICING: "time-slicing", SharingKind.MPS: "mps"}


def gfd_labels(
    node: NodeGpus,
    config: PluginConfig,
    *,
    machine: str = MACHINE_UNKNOWN,
    pci_classes: Sequence[int] = (),
) -> dict[str, str]:
    """GFD's labels for `node` under `config`, sorted by name; empty with no GPU.
    `machine` is the DMI product name (GFD's machine type file), "unknown" when unread;
    `pci_classes` the GPUs' PCI classes, () when unread."""
    if not node.gpus:
        return {}
    labels = {
        "nvidia.com/gpu.machine": _sanitise(machine),
        "nvidia.com/gpu.mode": gpu_mode(pci_classes),
        **_versions(node.driver_version, node.cuda_driver_version),
        "nvidia.com/mig.capable": _bool(any(g.mig_capable for g in node.gpus)),
        "nvidia.com/mps.capable": _bool(
            config.sharing.kind is SharingKind.MPS and not any(g.mig_enabled for g in node.gpus)
        ),
        **_full_gpus(node.gpus, config),
    }
    strategy = config.flags.mig_strategy
    if strategy != "none":
        labels["nvidia.com/mig.strategy"] = strategy
        labels.update(_migs(node.gpus, config, single=strategy == "single"))
    return dict(sorted(labels.items()))


def gpu_mode(pci_classes: Sequence[int]) -> str:
    """GFD's: "compute" when every GPU is a 3D controller (0x030200), "graphics" when every
    one is a VGA controller (0x030000), else "unknown"."""
    if len(set(pci_classes)) != 1:
        return "unknown"
    return {0x030200: "compute", 0x030000: "graphics"}.get(pci_classes[0], "unknown")


def render_features(labels: Mapping[str, str]) -> str:
    """NFD's features.d format: one `name=value` line per label."""
    return "".join(f"{name}={value}\n" for name, value in labels.items())


def _versions(driver: str, cuda: int) -> dict[str, str]:
    """`cuda.driver*` from "X.Y[.Z]" and `cuda.runtime*` from NVML's CUDA version (12040 is
    12.4); either is left out when unknown or malformed."""
    labels: dict[str, str] = {}
    parts = driver.split(".")
    if driver and 2 <= len(parts) <= 3:
        major, minor, rev = parts[0], parts[1], parts[2] if len(parts) == 3 else ""
        labels |= {
            "nvidia.com/cuda.driver.major": major,
            "nvidia.com/cuda.driver.minor": minor,
            "nvidia.com/cuda.driver.rev": rev,
            "nvidia.com/cuda.driver-version.major": major,
            "nvidia.com/cuda.driver-version.minor": minor,
            "nvidia.com/cuda.driver-version.revision": rev,
            "nvidia.com/cuda.driver-version.full": driver,
        }
    if cuda > 0:
        major, minor = str(cuda // 1000), str(cuda % 1000 // 10)
        labels |= {
            "nvidia.com/cuda.runtime.major": major,
            "nvidia.com/cuda.runtime.minor": minor,
            "nvidia.com/cuda.runtime-version.major": major,
            "nvidia.com/cuda.runtime-version.minor": minor,
            "nvidia.com/cuda.runtime-version.full": f"{major}.{minor}",
        }
    return labels


def _full_gpus(gpus: tuple[GpuInfo, ...], config: PluginConfig) -> dict[str, str]:
    """`nvidia.com/gpu.*` for one model; `count` counts every GPU of that model."""
    full = [g for g in gpus if not g.mig_enabled]
    first = min(full or gpus, key=lambda g: g.index)
    count = sum(1 for g in gpus if g.name == first.name)
    labels = _base(GPU_RESOURCE, config.sharing if full else None, count, first.name)
    if first.memory_mib:
        labels[f"{GPU_RESOURCE}.memory"] = str(first.memory_mib)
    major, minor = first.compute_capability
    if major:
        labels |= {
            f"{GPU_RESOURCE}.family": _family(major, minor),
            f"{GPU_RESOURCE}.compute.major": str(major),
            f"{GPU_RESOURCE}.compute.minor": str(minor),
        }
    return labels


def _migs(gpus: tuple[GpuInfo, ...], config: PluginConfig, *, single: bool) -> dict[str, str]:
    """Per MIG profile: `nvidia.com/gpu.*` under single (one profile: `devices.advertise`
    refuses other layouts first), `nvidia.com/mig-<profile>.*` under mixed."""
    by_profile: dict[str, list[tuple[GpuInfo, MigInfo]]] = {}
    for gpu in sorted(gpus, key=lambda g: g.index):
        for mig in gpu.migs if gpu.mig_enabled else ():
            by_profile.setdefault(mig.profile, []).append((gpu, mig))
    labels: dict[str, str] = {}
    for profile, members in sorted(by_profile.items()):
        resource = GPU_RESOURCE if single else mig_resource(profile)
        parent, mig = members[0]
        labels |= _base(resource, config.sharing, len(members), parent.name, "MIG", profile)
        labels |= {f"{resource}.{k}": str(v) for k, v in _attributes(mig).items()}
    return labels


def _attributes(mig: MigInfo) -> dict[str, int]:
    """GFD's MIG attribute labels (suffix -> value)."""
    a = mig.attributes
    if a is not None:
        return {
            "memory": a.memory_mb,
            "multiprocessors": a.multiprocessors,
            "slices.gi": a.gi_slices,
            "slices.ci": a.ci_slices,
            "engines.copy": a.copy_engines,
            "engines.decoder": a.decoders,
            "engines.encoder": a.encoders,
            "engines.jpeg": a.jpegs,
            "engines.ofa": a.ofas,
        }
    out = {"memory": mig.memory_mib}
    slices = _SLICES.match(mig.profile)
    if slices:
        gi = int(slices.group(2))
        out |= {"slices.gi": gi, "slices.ci": int(slices.group(1) or gi)}
    return out


def _base(resource: str, sharing: Sharing | None, count: int, *parts: str) -> dict[str, str]:
    """GFD's product, count, replicas and sharing-strategy for `resource`; `sharing` None is
    GFD's "without sharing" (replicas 0)."""
    replicas = 0 if sharing is None else _replicas(sharing, resource)
    product, strategy = [_sanitise(p) for p in parts if p], "none"
    if sharing is not None and replicas > 1:
        product += [] if sharing.rename_by_default else ["SHARED"]
        strategy = _STRATEGY[sharing.kind]
    return {
        f"{resource}.product": product_value(product),
        f"{resource}.count": str(count),
        f"{resource}.replicas": str(replicas),
        f"{resource}.sharing-strategy": strategy,
    }


def product_value(parts: list[str]) -> str:
    """The product label's value from its parts (model, then MIG and profile, SHARED),
    within a label value's 63 characters: only the model is cut, and any separator it then
    ends with, since the parts after it tell resources apart. NVIDIA's fix for the same
    (k8s-device-plugin issue #1876, PR #1880): a 67-character product had no label at
    all under NFD, and failed the whole Node patch under nodeLabels=api."""
    full = "-".join(parts)
    if len(full) <= LABEL_VALUE_MAX:
        return full
    suffix = "-".join(parts[1:])
    room = LABEL_VALUE_MAX - len(suffix) - 1
    if not suffix or room <= 0:
        return full[:LABEL_VALUE_MAX].rstrip("-._")
    return f"{parts[0][:room].rstrip('-._')}-{suffix}"


def _replicas(sharing: Sharing, resource: str) -> int:
    return next((r.replicas for r in sharing.resources if r.name == resource), 1)


def _sanitise(part: str) -> str:
    """GFD's: drop characters other than letters, digits, '-', '_', '.' and spaces, then
    join the words with '-' ("NVIDIA H100 80GB HBM3" -> "NVIDIA-H100-80GB-HBM3")."""
    return "-".join(_UNSAFE.sub("", part).split())


def _family(major: int, minor: int) -> str:
    """GFD's architecture family for a compute capability."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    return {
        1: "tesla",
        2: "fermi",
        3: "kepler",
        5: "maxwell",
        6: "pascal",
        9: "hopper",
        10: "blackwell",
        12: "blackwell",
        13: "rubin",
    }.get(major, "undefined")


def _bool(value: bool) -> str:
    return "true" if value else "false"
