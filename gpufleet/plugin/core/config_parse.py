"""NVIDIA k8s-device-plugin's config file (`version: v1`), parsed into `config`'s records.

It exists so that a config written for any NVIDIA plugin version works here unchanged. NVIDIA
reads the file as JSON (sigs.k8s.io/yaml), so keys match ignoring case (but inside the
sharing sections, which it reads through maps: exactly), unknown keys are ignored and a
whole float such as `4.0` is an integer; here the same holds, but each unknown or oddly
cased key is named in a warning with a did-you-mean, because NVIDIA's silence turns
`replica: 10` into no sharing at all. `config_load` reads the text.

Pure: the caller reads the file. No I/O, no logging; warnings are returned as strings. Never
guess a value: a wrong type or an unknown choice is an error, not a default. Errors quote
values cut short (`config.show`): a YAML alias bomb must not become a huge message.
"""

import re
from typing import Any

from gpufleet.core.messages import did_you_mean
from gpufleet.plugin.core.config import (
    ALLOCATION_POLICIES,
    DEVICE_DISCOVERY_STRATEGIES,
    DEVICE_ID_STRATEGIES,
    MAX_RESOURCE_NAME_LENGTH,
    MIG_STRATEGIES,
    RESOURCE_PREFIX,
    SHARED_SUFFIX,
    ConfigError,
    Flags,
    Imex,
    PluginConfig,
    PluginFlags,
    ReplicatedResource,
    Sharing,
    SharingKind,
    parse_device_list_strategy,
    parse_imex_channel_ids,
    show,
)
from gpufleet.plugin.core.config_load import load_document

VERSION = "v1"

# DNS-1123 subdomain: what Kubernetes requires of the part after the prefix.
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# NVIDIA's `devices` list entries: GPU index, MIG index "i:j", GPU or MIG UUID.
_DEVICE_REF = re.compile(
    r"\d+|\d+:\d+|GPU-[0-9a-fA-F-]{36}|MIG-[0-9a-fA-F-]{36}|MIG-GPU-[0-9a-fA-F-]{36}/\d+/\d+"
)


class _Reader:
    """Walks the loaded document; every error names the source and the key path."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.warnings: list[str] = []

    def fail(self, path: str, message: str) -> ConfigError:
        return ConfigError(
            f"{self.source}: {path}: {message}" if path else f"{self.source}: {message}"
        )

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(f"{self.source}: {path}: {message}")

    def mapping(
        self, value: Any, path: str, keys: tuple[str, ...], *, exact: bool = False
    ) -> dict[str, Any]:
        """The `keys` of a mapping, matched ignoring case as NVIDIA's JSON structs match
        them (the last of two spellings wins), or `exact`ly as its custom unmarshallers
        look them up in a map (the sharing sections, `replicas.go`); other keys are warned
        about and dropped. None (an empty YAML section) reads as empty, and so does a key
        whose value is null."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping, got {_describe(value)}")
        folded = {k.lower(): k for k in keys}
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = str(key)
            canonical = name if name in keys else folded.get(name.lower())
            if canonical is None:
                self.warn(_join(path, name), _unknown(name, keys))
                continue
            if canonical != name and exact:
                self.warn(
                    _join(path, name),
                    f"ignored: NVIDIA's plugin reads this key only as {canonical!r}",
                )
                continue
            if canonical != name:
                self.warn(
                    _join(path, name), f"read as {canonical!r} (NVIDIA matches keys ignoring case)"
                )
            out.pop(canonical, None)
            if item is not None:
                out[canonical] = item
        return out

    def boolean(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(path, f"expected a boolean (true or false), got {_describe(value)}")
        return value

    def string(self, value: Any, path: str, choices: tuple[str, ...] = ()) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"expected a string, got {_describe(value)}")
        if choices and value not in choices:
            raise self.fail(path, f"invalid value {show(value)} (valid: {', '.join(choices)})")
        return value

    def integer(self, value: Any, path: str) -> int:
        whole = _whole(value)
        if whole is None:
            raise self.fail(path, f"expected an integer, got {_describe(value)}")
        return whole

    def convert(self, path: str, parse: Any, value: Any) -> Any:
        """Runs a shared ValueError-raising parser and puts the path on its error."""
        try:
            return parse(value)
        except ValueError as exc:
            raise self.fail(path, str(exc)) from None


def _whole(value: Any) -> int | None:
    """An integer, or a float with no fractional part (NVIDIA reads YAML's `4.0` as JSON's
    `4`); None for anything else, booleans included."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _describe(value: Any) -> str:
    kind = {dict: "a mapping", list: "a list", bool: "a boolean", int: "an integer"}.get(
        type(value), f"a {type(value).__name__}"
    )
    return f"{kind} {show(value)}" if not isinstance(value, dict | list) else kind


def _unknown(key: str, keys: tuple[str, ...]) -> str:
    hint = did_you_mean(key, keys) or f" (expected one of: {', '.join(keys)})"
    return f"unknown key, ignored as NVIDIA's plugin does{hint}"


# Replicas per GPU (NVIDIA sets no bound): every replica is a device ID the plugin builds
# and the kubelet lists, and a ListAndWatch answer must fit gRPC's 4 MiB; far above any
# sharing that still gives each replica work to do.
MAX_REPLICAS = 1024
# file key -> (Flags attribute, bool or the allowed strings; () means any string)
FLAG_KEYS: dict[str, tuple[str, Any]] = {
    "migStrategy": ("mig_strategy", MIG_STRATEGIES),
    "failOnInitError": ("fail_on_init_error", bool),
    "mpsRoot": ("mps_root", ()),
    "nvidiaDriverRoot": ("nvidia_driver_root", ()),
    "nvidiaDevRoot": ("nvidia_dev_root", ()),
    "gdrcopyEnabled": ("gdrcopy_enabled", bool),
    "gdsEnabled": ("gds_enabled", bool),
    "mofedEnabled": ("mofed_enabled", bool),
    "deviceDiscoveryStrategy": ("device_discovery_strategy", DEVICE_DISCOVERY_STRATEGIES),
}
PLUGIN_KEYS: dict[str, tuple[str, Any]] = {
    "passDeviceSpecs": ("pass_device_specs", bool),
    "deviceIDStrategy": ("device_id_strategy", DEVICE_ID_STRATEGIES),
    "cdiAnnotationPrefix": ("cdi_annotation_prefix", ()),
    "nvidiaCTKPath": ("nvidia_ctk_path", ()),
    "containerDriverRoot": ("container_driver_root", ()),
    "kubeletSocket": ("kubelet_socket", ()),  # gpufleet's own: not in NVIDIA's flags.go
    "sharedDevicesAllocationPolicy": ("shared_devices_allocation_policy", ALLOCATION_POLICIES),
}
# Keys NVIDIA's v0.20.0 accepts that gpufleet has no use for: accepted, and warned about.
_IGNORED_FLAG_KEYS = {
    "restartOnDeviceUnhealthy": "gpufleet returns recovered devices to Healthy instead",
    "useNodeFeatureAPI": "a GPU feature discovery setting",
}


def _scalars(reader: _Reader, raw: dict, path: str, table: dict) -> dict[str, Any]:
    out = {}
    for key, (attr, kind) in table.items():
        if key in raw:
            sub = _join(path, key)
            value = raw[key]
            out[attr] = (
                reader.boolean(value, sub) if kind is bool else reader.string(value, sub, kind)
            )
    return out


def _flags(reader: _Reader, value: Any) -> Flags:
    keys = (*FLAG_KEYS, *_IGNORED_FLAG_KEYS, "plugin", "gfd")
    raw = reader.mapping(value, "flags", keys)
    for key, why in _IGNORED_FLAG_KEYS.items():
        if key in raw:
            reader.boolean(raw[key], f"flags.{key}")
            reader.warn(f"flags.{key}", f"ignored ({why})")
    # `gfd` configures GPU feature discovery, which reads the same file; it is GFD's to check.
    plugin_keys = (*PLUGIN_KEYS, "deviceListStrategy", "cdiFeatureFlags")
    plugin_raw = reader.mapping(raw.get("plugin"), "flags.plugin", plugin_keys)
    plugin = _scalars(reader, plugin_raw, "flags.plugin", PLUGIN_KEYS)
    if "deviceListStrategy" in plugin_raw:
        plugin["device_list_strategy"] = reader.convert(
            "flags.plugin.deviceListStrategy",
            lambda v: parse_device_list_strategy(v, split_commas=False),
            plugin_raw["deviceListStrategy"],
        )
    if "cdiFeatureFlags" in plugin_raw:
        reader.warn(
            "flags.plugin.cdiFeatureFlags",
            "ignored (gpufleet's CDI specs take no nvcdi feature flags)",
        )
    return Flags(**_scalars(reader, raw, "flags", FLAG_KEYS), plugin=PluginFlags(**plugin))


def _resource_name(reader: _Reader, value: Any, path: str) -> str:
    """NVIDIA's ResourceName: prefixed with nvidia.com/ when not already, <= 63 chars."""
    name = reader.string(value, path)
    full = name if name.startswith(RESOURCE_PREFIX + "/") else f"{RESOURCE_PREFIX}/{name}"
    if len(full) > MAX_RESOURCE_NAME_LENGTH:
        raise reader.fail(
            path, f"{show(full)} is longer than {MAX_RESOURCE_NAME_LENGTH} characters"
        )
    if not _DNS_SUBDOMAIN.fullmatch(full.split("/", 1)[1]):
        raise reader.fail(
            path,
            f"{show(full)}: the name after '{RESOURCE_PREFIX}/' must be lower-case letters, "
            "digits, '-' and '.', starting and ending with a letter or digit",
        )
    return full


def _devices(reader: _Reader, value: Any, path: str) -> bool:
    """Validates `devices` as NVIDIA does ("all", a count > 0, or a list of indexes and
    UUIDs); returns whether it is "all"."""
    if value == "all":
        return True
    count = _whole(value)
    if count is not None:
        if count <= 0:
            raise reader.fail(path, f"a count of devices must be > 0, got {count}")
        return False
    if isinstance(value, list):
        for i, ref in enumerate(value):
            index = _whole(ref)
            ok = (index is not None and index >= 0) or (
                isinstance(ref, str) and _DEVICE_REF.fullmatch(ref)
            )
            if not ok:
                raise reader.fail(
                    f"{path}[{i}]",
                    f"expected a GPU index, a MIG index 'i:j' or a UUID, got {show(ref)}",
                )
        return False
    raise reader.fail(path, f"expected 'all', a count or a list of devices, got {show(value)}")


def _replicated(reader: _Reader, value: Any, path: str, kind: SharingKind) -> Sharing:
    keys = ("renameByDefault", "failRequestsGreaterThanOne", "resources")
    raw = reader.mapping(value, path, keys, exact=True)
    rename_by_default = reader.boolean(raw.get("renameByDefault", False), _join(path, keys[0]))
    # MPS fails requests for more than one replica unless the file says otherwise (v0.20.0).
    fail_default = kind is SharingKind.MPS
    fail_gt_one = reader.boolean(
        raw.get("failRequestsGreaterThanOne", fail_default), _join(path, keys[1])
    )
    items = raw.get("resources")
    res_path = _join(path, "resources")
    if not items:
        raise reader.fail(res_path, "no resources specified")
    if not isinstance(items, list):
        raise reader.fail(res_path, f"expected a list, got {_describe(items)}")
    resources: list[ReplicatedResource] = []
    for i, item in enumerate(items):
        resources.append(_resource(reader, item, f"{res_path}[{i}]", rename_by_default))
        first = next(j for j, r in enumerate(resources) if r.name == resources[-1].name)
        if first != i:
            raise reader.fail(
                f"{res_path}[{i}].name", f"{resources[-1].name!r} is already in resources[{first}]"
            )
    return Sharing(
        kind=kind,
        rename_by_default=rename_by_default,
        fail_requests_greater_than_one=fail_gt_one,
        resources=tuple(resources),
    )


def _resource(reader: _Reader, item: Any, path: str, rename_by_default: bool) -> ReplicatedResource:
    raw = reader.mapping(item, path, ("name", "rename", "devices", "replicas"), exact=True)
    for required in ("name", "replicas"):
        if required not in raw:
            raise reader.fail(_join(path, required), "required")
    name = _resource_name(reader, raw["name"], _join(path, "name"))
    replicas = reader.integer(raw["replicas"], _join(path, "replicas"))
    if replicas < 2:
        raise reader.fail(
            _join(path, "replicas"), f"number of replicas must be >= 2, got {replicas}"
        )
    if replicas > MAX_REPLICAS:
        raise reader.fail(
            _join(path, "replicas"),
            f"number of replicas must be <= {MAX_REPLICAS}, got {replicas}",
        )
    if "rename" in raw:
        rename = _resource_name(reader, raw["rename"], _join(path, "rename"))
        if rename != (name + SHARED_SUFFIX if rename_by_default else name):
            reader.warn(
                _join(path, "rename"),
                "custom names are disabled, as in NVIDIA's plugin; ignored"
                + (" (renameByDefault advertises <name>.shared)" if rename_by_default else ""),
            )
    if "devices" in raw and not _devices(reader, raw["devices"], _join(path, "devices")):
        reader.warn(
            _join(path, "devices"),
            "selecting devices is disabled, as in NVIDIA's plugin; all devices are shared",
        )
    return ReplicatedResource(name=name, replicas=replicas)


def _sharing(reader: _Reader, value: Any) -> Sharing:
    raw = reader.mapping(value, "sharing", ("timeSlicing", "mps"))
    # An empty `timeSlicing:` is an error in NVIDIA's (its struct still unmarshals the
    # null); an empty `mps:` is no sharing (a nil pointer there).
    if (
        isinstance(value, dict)
        and "timeSlicing" not in raw
        and any(str(k).lower() == "timeslicing" and v is None for k, v in value.items())
    ):
        raise reader.fail("sharing.timeSlicing.resources", "no resources specified")
    time_slicing = None
    if "timeSlicing" in raw:  # read even beside mps: NVIDIA's refuses a bad one either way
        time_slicing = _replicated(
            reader, raw["timeSlicing"], "sharing.timeSlicing", SharingKind.TIME_SLICING
        )
    if "mps" in raw:
        if time_slicing is not None:
            reader.warn("sharing.timeSlicing", "ignored: mps is set, and wins (sharing.go)")
        return _replicated(reader, raw["mps"], "sharing.mps", SharingKind.MPS)
    return time_slicing or Sharing()


def _resources(reader: _Reader, value: Any) -> None:
    """`resources` is parsed for shape, then ignored: NVIDIA disables it."""
    raw = reader.mapping(value, "resources", ("gpus", "mig"))
    for key, items in raw.items():
        path = f"resources.{key}"
        if not isinstance(items, list):
            raise reader.fail(path, f"expected a list, got {_describe(items)}")
        for i, item in enumerate(items):
            entry = reader.mapping(item, f"{path}[{i}]", ("pattern", "name"))
            for required in ("pattern", "name"):
                if required not in entry:
                    raise reader.fail(f"{path}[{i}].{required}", "required")
            reader.string(entry["pattern"], f"{path}[{i}].pattern")
            _resource_name(reader, entry["name"], f"{path}[{i}].name")
    if any(raw.values()):
        reader.warn(
            "resources", "custom resource names are disabled, as in NVIDIA's plugin; ignored"
        )


def _imex(reader: _Reader, value: Any) -> Imex:
    raw = reader.mapping(value, "imex", ("channelIDs", "required"))
    ids = raw.get("channelIDs", [])
    if not isinstance(ids, list):
        raise reader.fail("imex.channelIDs", f"expected a list, got {_describe(ids)}")
    ids = [_whole(i) if _whole(i) is not None else i for i in ids]
    return Imex(
        channel_ids=reader.convert("imex.channelIDs", parse_imex_channel_ids, ids),
        required=reader.boolean(raw.get("required", False), "imex.required"),
    )


def parse_config(text: str, *, source: str) -> tuple[PluginConfig, tuple[str, ...]]:
    """Parses NVIDIA's config file (YAML or JSON) as read from `source` (named in errors).

    An empty file is the default config. A missing version means v1; any other version,
    wrong type or invalid value raises ConfigError naming the key path. Returns the config
    and the warnings (unknown keys, and keys accepted but disabled or ignored)."""
    reader = _Reader(source)
    try:
        loaded = load_document(text)
    except ValueError as exc:
        raise reader.fail("", str(exc)) from None
    doc = reader.mapping(loaded, "", ("version", "flags", "resources", "sharing", "imex"))
    version = doc.get("version", VERSION)
    if version != VERSION:
        raise reader.fail(
            "version", f"unknown version {show(version)} (only {VERSION!r} is supported)"
        )
    flags = _flags(reader, doc.get("flags"))
    _resources(reader, doc.get("resources"))
    config = PluginConfig(
        flags=flags,
        sharing=_sharing(reader, doc.get("sharing")),
        imex=_imex(reader, doc.get("imex")),
    )
    return config, tuple(reader.warnings)
