"""NVIDIA k8s-device-plugin's config file (`version: v1`), parsed into `config`'s records.

It exists so that a config written for NVIDIA's plugin (v0.20.0) works here unchanged, and so
that a typo in one fails at startup with the file and the key path. NVIDIA's parser drops
unknown keys without a word, so `replica: 10` there silently means no sharing.

Pure: the caller reads the file. No I/O, no logging; warnings are returned as strings. Never
guess a value: a wrong type or an unknown choice is an error, not a default.
"""

import json
import re
from typing import Any

import yaml

from gpufleet.core.messages import did_you_mean
from gpufleet.plugin.core.config import (
    DEVICE_DISCOVERY_STRATEGIES,
    DEVICE_ID_STRATEGIES,
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
)

VERSION = "v1"
MAX_RESOURCE_NAME_LENGTH = 63

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

    def mapping(self, value: Any, path: str, keys: tuple[str, ...]) -> dict[str, Any]:
        """A mapping with only `keys`; None (an empty YAML section) reads as empty."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping, got {_describe(value)}")
        for key in value:
            if key not in keys:
                raise self.fail(_join(path, str(key)), _unknown(str(key), keys))
        return {k: v for k, v in value.items() if v is not None}

    def boolean(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(path, f"expected a boolean (true or false), got {_describe(value)}")
        return value

    def string(self, value: Any, path: str, choices: tuple[str, ...] = ()) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"expected a string, got {_describe(value)}")
        if choices and value not in choices:
            raise self.fail(path, f"invalid value {value!r} (valid: {', '.join(choices)})")
        return value

    def integer(self, value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected an integer, got {_describe(value)}")
        return value

    def convert(self, path: str, parse: Any, value: Any) -> Any:
        """Runs a shared ValueError-raising parser and puts the path on its error."""
        try:
            return parse(value)
        except ValueError as exc:
            raise self.fail(path, str(exc)) from None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _describe(value: Any) -> str:
    kind = {dict: "a mapping", list: "a list", bool: "a boolean", int: "an integer"}.get(
        type(value), f"a {type(value).__name__}"
    )
    return f"{kind} {value!r}" if not isinstance(value, dict | list) else kind


def _unknown(key: str, keys: tuple[str, ...]) -> str:
    hint = did_you_mean(key, keys) or f" (expected one of: {', '.join(keys)})"
    return f"unknown key{hint}"


# file key -> (Flags attribute, bool or the allowed strings; () means any string)
_FLAG_KEYS: dict[str, tuple[str, Any]] = {
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
_PLUGIN_KEYS: dict[str, tuple[str, Any]] = {
    "passDeviceSpecs": ("pass_device_specs", bool),
    "deviceIDStrategy": ("device_id_strategy", DEVICE_ID_STRATEGIES),
    "cdiAnnotationPrefix": ("cdi_annotation_prefix", ()),
    "nvidiaCTKPath": ("nvidia_ctk_path", ()),
    "containerDriverRoot": ("container_driver_root", ()),
    "kubeletSocket": ("kubelet_socket", ()),
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
    keys = (*_FLAG_KEYS, *_IGNORED_FLAG_KEYS, "plugin", "gfd")
    raw = reader.mapping(value, "flags", keys)
    for key, why in _IGNORED_FLAG_KEYS.items():
        if key in raw:
            reader.boolean(raw[key], f"flags.{key}")
            reader.warn(f"flags.{key}", f"ignored ({why})")
    # `gfd` configures GPU feature discovery, which reads the same file; it is GFD's to check.
    plugin_keys = (*_PLUGIN_KEYS, "deviceListStrategy", "cdiFeatureFlags")
    plugin_raw = reader.mapping(raw.get("plugin"), "flags.plugin", plugin_keys)
    plugin = _scalars(reader, plugin_raw, "flags.plugin", _PLUGIN_KEYS)
    if "deviceListStrategy" in plugin_raw:
        plugin["device_list_strategy"] = reader.convert(
            "flags.plugin.deviceListStrategy",
            parse_device_list_strategy,
            plugin_raw["deviceListStrategy"],
        )
    if "cdiFeatureFlags" in plugin_raw:
        reader.warn(
            "flags.plugin.cdiFeatureFlags",
            "ignored (gpufleet's CDI specs take no nvcdi feature flags)",
        )
    return Flags(**_scalars(reader, raw, "flags", _FLAG_KEYS), plugin=PluginFlags(**plugin))


def _resource_name(reader: _Reader, value: Any, path: str) -> str:
    """NVIDIA's ResourceName: prefixed with nvidia.com/ when not already, <= 63 chars."""
    name = reader.string(value, path)
    full = name if name.startswith(RESOURCE_PREFIX + "/") else f"{RESOURCE_PREFIX}/{name}"
    if len(full) > MAX_RESOURCE_NAME_LENGTH:
        raise reader.fail(path, f"{full!r} is longer than {MAX_RESOURCE_NAME_LENGTH} characters")
    if not _DNS_SUBDOMAIN.fullmatch(full.split("/", 1)[1]):
        raise reader.fail(
            path,
            f"{full!r}: the name after '{RESOURCE_PREFIX}/' must be lower-case letters, "
            "digits, '-' and '.', starting and ending with a letter or digit",
        )
    return full


def _devices(reader: _Reader, value: Any, path: str) -> bool:
    """Validates `devices` as NVIDIA does ("all", a count > 0, or a list of indexes and
    UUIDs); returns whether it is "all"."""
    if value == "all":
        return True
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise reader.fail(path, f"a count of devices must be > 0, got {value}")
        return False
    if isinstance(value, list):
        for i, ref in enumerate(value):
            ok = (isinstance(ref, int) and not isinstance(ref, bool) and ref >= 0) or (
                isinstance(ref, str) and _DEVICE_REF.fullmatch(ref)
            )
            if not ok:
                raise reader.fail(
                    f"{path}[{i}]",
                    f"expected a GPU index, a MIG index 'i:j' or a UUID, got {ref!r}",
                )
        return False
    raise reader.fail(path, f"expected 'all', a count or a list of devices, got {value!r}")


def _replicated(reader: _Reader, value: Any, path: str, kind: SharingKind) -> Sharing:
    keys = ("renameByDefault", "failRequestsGreaterThanOne", "resources")
    raw = reader.mapping(value, path, keys)
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
    raw = reader.mapping(item, path, ("name", "rename", "devices", "replicas"))
    for required in ("name", "replicas"):
        if required not in raw:
            raise reader.fail(_join(path, required), "required")
    name = _resource_name(reader, raw["name"], _join(path, "name"))
    replicas = reader.integer(raw["replicas"], _join(path, "replicas"))
    if replicas < 2:
        raise reader.fail(
            _join(path, "replicas"), f"number of replicas must be >= 2, got {replicas}"
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
    if "timeSlicing" in raw and "mps" in raw:
        raise reader.fail("sharing", "timeSlicing and mps are mutually exclusive; set one")
    if "mps" in raw:
        return _replicated(reader, raw["mps"], "sharing.mps", SharingKind.MPS)
    if "timeSlicing" in raw:
        return _replicated(
            reader, raw["timeSlicing"], "sharing.timeSlicing", SharingKind.TIME_SLICING
        )
    return Sharing()


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
    return Imex(
        channel_ids=reader.convert("imex.channelIDs", parse_imex_channel_ids, ids),
        required=reader.boolean(raw.get("required", False), "imex.required"),
    )


def _load(text: str, reader: _Reader) -> Any:
    # JSON first when it looks like JSON: PyYAML (YAML 1.1) rejects some valid JSON, e.g.
    # tab indentation.
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except ValueError:
            pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise reader.fail("", f"{where}not valid YAML or JSON: {problem}") from None


def parse_config(text: str, *, source: str) -> tuple[PluginConfig, tuple[str, ...]]:
    """Parses NVIDIA's config file (YAML or JSON) as read from `source` (named in errors).

    An empty file is the default config. A missing version means v1; any other version,
    unknown key, wrong type or invalid value raises ConfigError naming the key path.
    Returns the config and the warnings (keys accepted but disabled or ignored)."""
    reader = _Reader(source)
    doc = reader.mapping(
        _load(text, reader), "", ("version", "flags", "resources", "sharing", "imex")
    )
    version = doc.get("version", VERSION)
    if version != VERSION:
        raise reader.fail("version", f"unknown version {version!r} (only {VERSION!r} is supported)")
    flags = _flags(reader, doc.get("flags"))
    _resources(reader, doc.get("resources"))
    config = PluginConfig(
        flags=flags,
        sharing=_sharing(reader, doc.get("sharing")),
        imex=_imex(reader, doc.get("imex")),
    )
    return config, tuple(reader.warnings)
