"""Fleet specs: parse `8xH100`, `4xA100:mig=all-1g.10gb`, `6xH100+2xH100:mig=7x1g.10gb`,
`1xH100:mig=empty` (MIG mode on, no instances).

Pure: no I/O, no clock, no randomness. Identities (UUIDs, serials, PCI bus ids, GPU instance
ids) are derived from the seed and the GPU's index by hashing, so the same spec and seed
always describe the same machine. Bad specs raise ValueError quoting the bad part and
listing what is valid; nothing is ever silently dropped or guessed.
"""

import hashlib
import re
from dataclasses import dataclass

from gpufleet.lab.nvml.models import MODELS, GpuModel, MigProfile

MAX_GPUS = 64
# HGX H100 baseboard bus numbers; further GPUs move to the next PCI domain.
_HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
_PART = re.compile(r"^([0-9]{1,6})x([A-Za-z0-9]+)(?::(.*))?$")
_ITEM = re.compile(r"^(?:([0-9]{1,2})x)?([0-9]{1,2}g\.[0-9]{1,3}gb)$")
_MEMORY_SLICES = 8
_COMPUTE_SLICES = 7


@dataclass(frozen=True, slots=True, kw_only=True)
class MigDevice:
    """One MIG device: a GPU instance with its single full-size compute instance."""

    index: int  # index for nvmlDeviceGetMigDeviceHandleByIndex on the parent
    uuid: str  # "MIG-<uuid>"
    profile: str  # e.g. "1g.10gb"
    gi_id: int
    ci_id: int
    placement_start: int  # in memory slices


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuDevice:
    """One physical GPU of the simulated machine."""

    index: int  # NVML index
    uuid: str  # "GPU-<uuid>"
    model: str  # model key, e.g. "H100"
    name: str  # nvmlDeviceGetName
    serial: str
    pci_bus_id: str  # "00000000:18:00.0"
    pci_domain: int
    pci_bus: int
    minor: int  # /dev/nvidia<minor>
    numa_node: int
    mig_enabled: bool
    mig: tuple[MigDevice, ...] = ()


def parse_fleet(spec: str, *, seed: int = 0) -> tuple[GpuDevice, ...]:
    """Parse a fleet spec into GPUs, indexed in spec order across all `+` parts."""
    parts = [p.strip() for p in spec.split("+")]
    if not spec.strip() or any(not p for p in parts):
        raise ValueError(f"fleet spec {spec!r}: empty part; expected e.g. '8xH100+2xA100'")
    groups = [_parse_part(p) for p in parts]
    total = sum(count for count, _, _ in groups)
    if total > MAX_GPUS:
        raise ValueError(f"fleet spec {spec!r}: {total} GPUs, at most {MAX_GPUS} supported")
    gpus: list[GpuDevice] = []
    for count, model, layout in groups:
        for _ in range(count):
            gpus.append(_gpu(len(gpus), total, model, layout, seed))
    return tuple(gpus)


def _parse_part(part: str) -> tuple[int, GpuModel, tuple[tuple[MigProfile, int], ...] | None]:
    m = _PART.match(part)
    if not m:
        raise ValueError(
            f"bad fleet part {part!r}: expected '<count>x<model>[:mig=<layout>]', "
            f"e.g. '8xH100' or '4xA100:mig=all-1g.10gb'; models: {_model_list()}"
        )
    count, model_name, options = int(m[1]), m[2], m[3]
    model = next((v for k, v in MODELS.items() if k.lower() == model_name.lower()), None)
    if model is None:
        raise ValueError(
            f"unknown GPU model {model_name!r} in {part!r}; valid models: {_model_list()}"
        )
    if count < 1:
        raise ValueError(f"bad GPU count {count} in {part!r}: must be at least 1")
    if options is None:
        return count, model, None
    key, sep, value = options.partition("=")
    if key.strip() != "mig" or not sep:
        raise ValueError(f"unknown option {options!r} in {part!r}; valid options: mig=<layout>")
    return count, model, _parse_layout(value.strip(), model, part)


def _parse_layout(layout: str, model: GpuModel, part: str) -> tuple[tuple[MigProfile, int], ...]:
    """Resolve a MIG layout to (profile, placement start) pairs that fit one GPU."""
    if not model.mig_profiles:
        raise ValueError(f"{model.key} does not support MIG (in {part!r})")
    names: list[str] = []
    if layout == "empty":  # MIG mode on, no instances created yet (`nvidia-smi -mig 1`)
        return ()
    if layout.startswith("all-"):
        profile = _profile(model, layout[4:], part)
        names = [profile.name] * profile.max_count
    else:
        for item in layout.split(","):
            m = _ITEM.match(item.strip())
            if not m:
                raise ValueError(
                    f"bad MIG layout item {item!r} in {part!r}: expected '<profile>', "
                    f"'<n>x<profile>' or 'all-<profile>'; profiles: {_profile_list(model)}"
                )
            profile = _profile(model, m[2], part)
            names += [profile.name] * int(m[1] or 1)
    if not names:
        raise ValueError(f"empty MIG layout in {part!r}")
    return _place(model, names, part)


def _place(model: GpuModel, names: list[str], part: str) -> tuple[tuple[MigProfile, int], ...]:
    # Largest first, each at its lowest free start: how an operator packs a GPU by hand.
    profiles = sorted(
        (p for n in names if (p := model.mig_profile(n)) is not None),
        key=lambda p: -p.memory_slices,
    )
    if sum(p.slices for p in profiles) > _COMPUTE_SLICES:
        raise ValueError(
            f"MIG layout in {part!r} needs {sum(p.slices for p in profiles)} compute slices; "
            f"one {model.key} has {_COMPUTE_SLICES}"
        )
    used = [False] * _MEMORY_SLICES
    placed: list[tuple[MigProfile, int]] = []
    for p in profiles:
        start = next((s for s in p.starts if not any(used[s : s + p.memory_slices])), None)
        if start is None:
            raise ValueError(
                f"MIG layout in {part!r} does not fit one {model.key}: no free placement "
                f"for {p.name} (at most {p.max_count} of it on an empty GPU)"
            )
        used[start : start + p.memory_slices] = [True] * p.memory_slices
        placed.append((p, start))
    return tuple(sorted(placed, key=lambda ps: gi_id_for(ps[0], ps[1])))


def gi_id_for(profile: MigProfile, start: int) -> int:
    """NVML's GPU instance id for a placement (its "swizzle id" in the slice tree)."""
    size = profile.memory_slices
    return {8: 0, 4: 1, 2: 3, 1: 7}[size] + start // size


def _profile(model: GpuModel, name: str, part: str) -> MigProfile:
    profile = model.mig_profile(name)
    if profile is None:
        raise ValueError(
            f"unknown MIG profile {name!r} for {model.key} in {part!r}; "
            f"valid profiles: {_profile_list(model)}"
        )
    return profile


def _gpu(
    index: int,
    total: int,
    model: GpuModel,
    layout: tuple[tuple[MigProfile, int], ...] | None,
    seed: int,
) -> GpuDevice:
    domain, bus = index // len(_HGX_BUSES), _HGX_BUSES[index % len(_HGX_BUSES)]
    migs = tuple(
        MigDevice(
            index=i,
            uuid="MIG-" + _uuid(f"{seed}:mig:{index}:{gi_id_for(p, start)}"),
            profile=p.name,
            gi_id=gi_id_for(p, start),
            ci_id=0,
            placement_start=start,
        )
        for i, (p, start) in enumerate(layout or ())
    )
    return GpuDevice(
        index=index,
        uuid="GPU-" + _uuid(f"{seed}:gpu:{index}"),
        model=model.key,
        name=model.name,
        serial="165" + str(int(_digest(f"{seed}:serial:{index}")[:12], 16) % 10**10).zfill(10),
        pci_bus_id=f"{domain:08X}:{bus:02X}:00.0",
        pci_domain=domain,
        pci_bus=bus,
        minor=index,
        numa_node=0 if index < (total + 1) // 2 else 1,
        mig_enabled=layout is not None,
        mig=migs,
    )


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _uuid(key: str) -> str:
    h = _digest(key)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _model_list() -> str:
    return ", ".join(sorted(MODELS))


def _profile_list(model: GpuModel) -> str:
    return ", ".join(p.name for p in model.mig_profiles) or "none"
