"""The device plugin's configuration as frozen records, and `merge`, which lays flags over them.

The records mirror NVIDIA k8s-device-plugin's config file (`version: v1`, v0.20.0), which
`config_parse.parse_config` reads into them. `merge` lays the explicitly given flags and env
vars over the file. Flag beats env in the settings, so here there is one override per key, and
the order is override > file > default. The small value parsers here are shared by the file
parser and the settings, so a flag and its file key accept the same values.

Pure: no I/O, no logging. Never guess a value: a wrong type or an unknown choice is an error,
not a default.
"""

import dataclasses
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

MIG_STRATEGIES = ("none", "single", "mixed")
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
DEVICE_ID_STRATEGIES = ("uuid", "index")
DEVICE_DISCOVERY_STRATEGIES = ("auto", "nvml", "tegra")
ALLOCATION_POLICIES = ("distributed", "packed")
RESOURCE_PREFIX = "nvidia.com"
MAX_RESOURCE_NAME_LENGTH = 63  # NVIDIA's limit on the fully-qualified resource name
SHARED_SUFFIX = ".shared"
DEFAULT_KUBELET_SOCKET = "/var/lib/kubelet/device-plugins/kubelet.sock"


class ConfigError(ValueError):
    """The config is invalid; the message names the file and the key path."""


class SharingKind(StrEnum):
    """Which sharing section is in force; both at once is an error."""

    NONE = "none"
    TIME_SLICING = "timeSlicing"
    MPS = "mps"


@dataclass(frozen=True, slots=True, kw_only=True)
class PluginFlags:
    """`flags.plugin`; defaults are NVIDIA's flag defaults."""

    pass_device_specs: bool = False
    device_list_strategy: tuple[str, ...] = ("envvar",)
    device_id_strategy: str = "uuid"
    cdi_annotation_prefix: str = "cdi.k8s.io/"
    nvidia_ctk_path: str = "/usr/bin/nvidia-ctk"
    container_driver_root: str = "/driver-root"
    kubelet_socket: str = DEFAULT_KUBELET_SOCKET  # "": serve without registering
    shared_devices_allocation_policy: str = "distributed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Flags:
    """`flags`; defaults are NVIDIA's flag defaults."""

    mig_strategy: str = "none"
    fail_on_init_error: bool = True
    mps_root: str = ""
    nvidia_driver_root: str = "/"
    nvidia_dev_root: str = ""  # "": the driver root, as NVIDIA resolves it
    gdrcopy_enabled: bool = False
    gds_enabled: bool = False
    mofed_enabled: bool = False
    device_discovery_strategy: str = "auto"
    plugin: PluginFlags = field(default_factory=PluginFlags)

    @property
    def dev_root(self) -> str:
        """Where the device nodes are on the host: nvidiaDevRoot, else the driver root."""
        return self.nvidia_dev_root or self.nvidia_driver_root


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicatedResource:
    """One `sharing.*.resources` entry: advertise each device of `name` `replicas` times.

    The MPS per-GPU maximum (48 from compute capability 7.5, else 16) depends on the GPU and
    is checked at discovery, not here."""

    name: str  # fully qualified, e.g. "nvidia.com/gpu" ("gpu" in the file is prefixed)
    replicas: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Sharing:
    """`sharing.timeSlicing` or `sharing.mps`, whichever is set."""

    kind: SharingKind = SharingKind.NONE
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    resources: tuple[ReplicatedResource, ...] = ()

    def advertised_name(self, name: str) -> str:
        """The resource name a shared resource is advertised under (`<name>.shared`)."""
        return name + SHARED_SUFFIX if self.rename_by_default else name


@dataclass(frozen=True, slots=True, kw_only=True)
class Imex:
    """`imex`: IMEX channels injected into containers that get a GPU."""

    channel_ids: tuple[int, ...] = ()
    required: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class PluginConfig:
    """The whole configuration after parsing (and, from `merge`, after overrides)."""

    flags: Flags = field(default_factory=Flags)
    sharing: Sharing = field(default_factory=Sharing)
    imex: Imex = field(default_factory=Imex)


def show(value: Any) -> str:
    """`repr` cut short: a YAML alias bomb of a few hundred bytes expands to gigabytes of
    repr, and an error message must stay one readable line."""
    short = reprlib.Repr()
    short.maxlevel, short.maxlist, short.maxdict = 1, 4, 4
    short.maxstring = short.maxother = 80
    return short.repr(value)


def parse_device_list_strategy(
    value: str | list | tuple, *, split_commas: bool = True
) -> tuple[str, ...]:
    """NVIDIA's deviceListStrategy: one string or a list of them.

    Flags and env vars split on commas (urfave/cli's string slices do); the config file
    does not: NVIDIA reads `"envvar,volume-mounts"` there as one, invalid, strategy.
    Returns the strategies in order, without duplicates. Raises ValueError (no path: the
    caller knows where the value came from)."""
    if isinstance(value, str):
        items = [value]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        items = [None]
    if not all(isinstance(i, str) for i in items):
        raise ValueError(f"expected a string or a list of strings, got {show(value)}")
    pieces = [p for item in items for p in (item.split(",") if split_commas else [item])]
    names = [n.strip() for n in pieces if n.strip()]
    if not names:
        raise ValueError(
            "no device list strategy given; at least one of "
            f"{', '.join(DEVICE_LIST_STRATEGIES)} is required"
        )
    for name in names:
        if name not in DEVICE_LIST_STRATEGIES:
            raise ValueError(
                f"invalid strategy {show(name)} (valid: {', '.join(DEVICE_LIST_STRATEGIES)})"
            )
    return tuple(dict.fromkeys(names))


def parse_imex_channel_ids(value: list | tuple) -> tuple[int, ...]:
    """IMEX channel IDs: NVIDIA accepts only [] or [0]. Raises ValueError."""
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise ValueError(f"expected a list of integers, got {show(value)}")
    if list(value) not in ([], [0]):
        raise ValueError(f"channelIDs must be [] or [0], got {show(list(value))}")
    return tuple(value)


_FLAGS_FIELDS = frozenset(f.name for f in dataclasses.fields(Flags)) - {"plugin"}
_PLUGIN_FIELDS = frozenset(f.name for f in dataclasses.fields(PluginFlags))
_IMEX_FIELDS = {"imex_channel_ids": "channel_ids", "imex_required": "required"}
OVERRIDABLE = _FLAGS_FIELDS | _PLUGIN_FIELDS | frozenset(_IMEX_FIELDS)


def merge(
    file_config: PluginConfig, overrides: Mapping[str, Any], *, source: str = "config"
) -> PluginConfig:
    """Lays explicitly given flag/env values over the file's config.

    `overrides` maps a `Flags`, `PluginFlags` or `imex_*` attribute name (see OVERRIDABLE)
    to an already validated value; only given values belong in it, so the file wins over
    defaults. Then checks NVIDIA's cross-field rules (MPS needs --mps-root and no mixed MIG)
    and raises ConfigError prefixed with `source`."""
    unknown = set(overrides) - OVERRIDABLE
    if unknown:
        raise ValueError(f"not overridable: {sorted(unknown)}")
    flags, plugin = file_config.flags, file_config.flags.plugin
    plugin = dataclasses.replace(
        plugin, **{k: v for k, v in overrides.items() if k in _PLUGIN_FIELDS}
    )
    flags = dataclasses.replace(
        flags, plugin=plugin, **{k: v for k, v in overrides.items() if k in _FLAGS_FIELDS}
    )
    imex = dataclasses.replace(
        file_config.imex, **{_IMEX_FIELDS[k]: v for k, v in overrides.items() if k in _IMEX_FIELDS}
    )
    config = dataclasses.replace(file_config, flags=flags, imex=imex)
    if config.sharing.kind is SharingKind.MPS:
        if flags.mig_strategy == "mixed":
            raise ConfigError(
                f"{source}: sharing.mps: using --mig-strategy=mixed is not supported with MPS"
            )
        if not flags.mps_root:
            raise ConfigError(
                f"{source}: sharing.mps: using MPS requires --mps-root (MPS_ROOT, "
                "flags.mpsRoot) to be specified"
            )
    return config
