"""The device plugin's settings: NVIDIA k8s-device-plugin's flags and env vars, plus gpufleet's.

Every flag and env var of NVIDIA's plugin (v0.20.0, `cmd/nvidia-device-plugin/main.go`) is
accepted with its name, aliases and default, so a DaemonSet's flags and env vars work
unchanged (NVIDIA's chart itself also runs the image as root and names its config-manager:
the README's "Compatible with NVIDIA's k8s-device-plugin" says what it takes).
`resolve_config` reads `--config-file` and lays only the flags and env vars actually given
over it: flag > env var > file > default, NVIDIA's precedence. It must never let a default
override a value from the file.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, field_validator

from gpufleet.core.listen import parse_listen_address
from gpufleet.plugin.core.config import (
    DEFAULT_KUBELET_SOCKET,
    OVERRIDABLE,
    ConfigError,
    PluginConfig,
    merge,
    parse_device_list_strategy,
    parse_imex_channel_ids,
)
from gpufleet.plugin.core.config_parse import parse_config
from gpufleet.plugin.host.nfd_features import DEFAULT_FEATURES_FILE
from gpufleet.settings import CommandSettings, setting
from gpufleet.shared_settings import (
    debug_setting,
    kube_url_setting,
    kubeconfig_setting,
    log_format_setting,
    sim_fleet_setting,
)

NVIDIA = "k8s-device-plugin compatible"
GPUFLEET = "gpufleet"
HEALTH = "health checks (env only)"
LABELS = "node labels, as GPU Feature Discovery's"


class PluginSettings(CommandSettings):
    """All device plugin settings. Field descriptions are the --help text."""

    mig_strategy: Literal["none", "single", "mixed"] = setting(
        "none",
        "MIG_STRATEGY",
        "--mig-strategy",
        group=NVIDIA,
        help="How MIG devices are exposed: none (whole GPUs), single (MIG devices as "
        "nvidia.com/gpu) or mixed (nvidia.com/mig-<profile> per profile). [file: "
        "flags.migStrategy]",
    )
    fail_on_init_error: bool = setting(
        True,
        "FAIL_ON_INIT_ERROR",
        "--fail-on-init-error",
        group=NVIDIA,
        help="Exit when NVML or discovery fails at startup; false waits without devices. "
        "[file: flags.failOnInitError]",
    )
    nvidia_driver_root: str = setting(
        "/",
        "NVIDIA_DRIVER_ROOT",
        "--driver-root",
        "--nvidia-driver-root",
        group=NVIDIA,
        help="Root of the driver installation on the host ('/' or '/run/nvidia/driver'). "
        "[file: flags.nvidiaDriverRoot]",
    )
    nvidia_dev_root: str = setting(
        "",
        "NVIDIA_DEV_ROOT",
        "--nvidia-dev-root",
        "--dev-root",
        group=NVIDIA,
        help="Root of the device nodes on the host; empty means the driver root. "
        "[file: flags.nvidiaDevRoot]",
    )
    pass_device_specs: bool = setting(
        False,
        "PASS_DEVICE_SPECS",
        "--pass-device-specs",
        group=NVIDIA,
        help="Return DeviceSpecs for /dev/nvidia* from Allocate. [file: "
        "flags.plugin.passDeviceSpecs]",
    )
    device_list_strategy: str = setting(
        "envvar",
        "DEVICE_LIST_STRATEGY",
        "--device-list-strategy",
        group=NVIDIA,
        repeat=True,
        help="How devices reach the runtime, comma separated or the flag repeated: envvar, "
        "volume-mounts, cdi-annotations, cdi-cri. [file: flags.plugin.deviceListStrategy]",
    )
    device_id_strategy: Literal["uuid", "index"] = setting(
        "uuid",
        "DEVICE_ID_STRATEGY",
        "--device-id-strategy",
        group=NVIDIA,
        help="IDs passed to the runtime: uuid or index (advertised IDs stay UUIDs). "
        "[file: flags.plugin.deviceIDStrategy]",
    )
    gdrcopy_enabled: bool = setting(
        False,
        "GDRCOPY_ENABLED",
        "--gdrcopy-enabled",
        group=NVIDIA,
        help="Start GPU containers with NVIDIA_GDRCOPY=enabled. [file: flags.gdrcopyEnabled]",
    )
    gds_enabled: bool = setting(
        False,
        "GDS_ENABLED",
        "--gds-enabled",
        group=NVIDIA,
        help="Start GPU containers with NVIDIA_GDS=enabled. [file: flags.gdsEnabled]",
    )
    mofed_enabled: bool = setting(
        False,
        "MOFED_ENABLED",
        "--mofed-enabled",
        group=NVIDIA,
        help="Start GPU containers with NVIDIA_MOFED=enabled. [file: flags.mofedEnabled]",
    )
    cdi_annotation_prefix: str = setting(
        "cdi.k8s.io/",
        "CDI_ANNOTATION_PREFIX",
        "--cdi-annotation-prefix",
        group=NVIDIA,
        help="Prefix of CDI annotation keys (cdi-annotations strategy). [file: "
        "flags.plugin.cdiAnnotationPrefix]",
    )
    nvidia_ctk_path: str = setting(
        "/usr/bin/nvidia-ctk",
        AliasChoices("NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH"),
        "--nvidia-ctk-path",
        "--nvidia-cdi-hook-path",
        group=NVIDIA,
        help="Path of the NVIDIA CDI hook in CDI specs. [file: flags.plugin.nvidiaCTKPath]",
    )
    container_driver_root: str = setting(
        "/driver-root",
        AliasChoices("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"),
        "--container-driver-root",
        "--driver-root-ctr-path",
        group=NVIDIA,
        help="Where the driver root is mounted in this container. "
        "[file: flags.plugin.containerDriverRoot]",
    )
    mps_root: str = setting(
        "",
        "MPS_ROOT",
        "--mps-root",
        group=NVIDIA,
        help="Host directory of the MPS control daemons' pipes and shm; required with "
        "sharing.mps. [file: flags.mpsRoot]",
    )
    shared_devices_allocation_policy: Literal["distributed", "packed"] = setting(
        "distributed",
        "SHARED_DEVICES_ALLOCATION_POLICY",
        "--shared-devices-allocation-policy",
        group=NVIDIA,
        help="Preferred allocation of shared replicas: distributed (fewest used replicas "
        "per GPU first) or packed (fill a GPU first). [file: "
        "flags.plugin.sharedDevicesAllocationPolicy]",
    )
    device_discovery_strategy: Literal["auto", "nvml", "tegra"] = setting(
        "auto",
        "DEVICE_DISCOVERY_STRATEGY",
        "--device-discovery-strategy",
        group=NVIDIA,
        help="Device discovery: auto, nvml or tegra (gpufleet discovers through NVML "
        "either way). [file: flags.deviceDiscoveryStrategy]",
    )
    imex_channel_ids: str = setting(
        "",
        "IMEX_CHANNEL_IDS",
        "--imex-channel-ids",
        group=NVIDIA,
        empty_env_unset=True,  # NVIDIA's is an int slice: an empty value keeps the file's
        help="IMEX channels to inject, comma separated: empty or 0. [file: imex.channelIDs]",
    )
    imex_required: bool = setting(
        False,
        "IMEX_REQUIRED",
        "--imex-required",
        group=NVIDIA,
        help="Fail when an IMEX channel device is missing. [file: imex.required]",
    )
    kubelet_socket: str = setting(
        DEFAULT_KUBELET_SOCKET,
        "KUBELET_SOCKET",
        "--kubelet-socket",
        group=NVIDIA,
        help="The kubelet's registration socket; the plugin sockets go in its directory. "
        "Empty: serve without registering (tests). The file key is gpufleet's own: NVIDIA's "
        "plugin has none. [file: flags.plugin.kubeletSocket]",
    )
    config_file: str = setting(
        "",
        "CONFIG_FILE",
        "--config-file",
        group=NVIDIA,
        help="NVIDIA's config file (YAML or JSON, version v1); flags and env vars given "
        "explicitly override it.",
    )
    cdi_feature_flags: str = setting(
        "",
        "CDI_FEATURE_FLAGS",
        "--cdi-feature-flags",
        group=NVIDIA,
        repeat=True,
        help="nvidia-ctk's CDI generation feature flags (NVIDIA's chart's cdi.featureFlags). "
        "Accepted "
        "and ignored with a warning: gpufleet's CDI specs have no optional features.",
    )
    cdi_disable_hooks: str = setting(
        "",
        "CDI_DISABLE_HOOKS",
        "--cdi-disable-hooks",
        group=NVIDIA,
        repeat=True,
        help="Hooks left out of the generated CDI specs, comma separated or the flag "
        "repeated (create-symlinks, update-ldcache, ...); 'all' leaves out every hook.",
    )
    cdi_spec_dirs: str = setting(
        "/var/run/cdi,/etc/cdi",
        "GPUFLEET_CDI_SPEC_DIRS",
        "--cdi-spec-dirs",
        group=GPUFLEET,
        help="CDI spec directories (comma separated; CDI's standard ones). With a cdi-* "
        "device list strategy the plugin writes its specs (kind "
        "k8s.device-plugin.nvidia.com/gpu) into the first, unless one of that kind is "
        "installed in any of them: /var/run/cdi, where NVIDIA's plugin writes and its "
        "chart mounts the host's.",
    )
    node_labels_file: str = setting(
        DEFAULT_FEATURES_FILE,
        "GPUFLEET_NODE_LABELS_FILE",
        "--node-labels-file",
        group=LABELS,
        help="Where to write GPU Feature Discovery's labels (nvidia.com/gpu.product, ...) "
        "for Node Feature Discovery, whose features.d must exist; empty: no file. Next to "
        "GFD's own file (features.d/gfd), so both can run while moving off GFD.",
    )
    node_labels_api: bool = setting(
        False,
        "GPUFLEET_NODE_LABELS_API",
        "--node-labels-api",
        group=LABELS,
        help="Also set GFD's labels directly on the Node (--node-name) through the "
        "Kubernetes API, for clusters without Node Feature Discovery; needs RBAC to get and "
        "patch nodes. Labels the plugin set before and no longer computes are removed.",
    )
    node_name: str = setting(
        "",
        "NODE_NAME",
        "--node-name",
        group=LABELS,
        help="This node's name, for --node-labels-api (the downward API's spec.nodeName).",
    )
    machine_type_file: str = setting(
        "/sys/class/dmi/id/product_name",
        "GFD_MACHINE_TYPE_FILE",
        "--machine-type-file",
        group=LABELS,
        help="The DMI (SMBIOS) product name behind nvidia.com/gpu.machine, GFD's flag and "
        "default; unreadable or empty: 'unknown'.",
    )
    kube_url: str = kube_url_setting(group=LABELS)
    kubeconfig: str = kubeconfig_setting(group=LABELS)
    sim_fleet: str = sim_fleet_setting(group=GPUFLEET)
    metrics_address: str = setting(
        ":9401",
        "GPUFLEET_PLUGIN_METRICS_ADDRESS",
        "--metrics-address",
        group=GPUFLEET,
        help="[host]:port of the self-metrics (/metrics, /health; any other path is 404); "
        "empty disables them. 9401, next to the exporter's 9400, so both fit on one host "
        "network.",
    )
    web_config_file: Path | None = setting(
        None,
        "GPUFLEET_PLUGIN_WEB_CONFIG_FILE",
        "--web-config-file",
        group=GPUFLEET,
        help="Prometheus exporter-toolkit web config (TLS, basic auth) for the self-metrics "
        "port, as the exporter's --web-config-file.",
    )
    debug: bool = debug_setting(group=GPUFLEET)
    log_format: Literal["text", "json"] = log_format_setting(group=GPUFLEET)
    health_recovery_seconds: float = setting(
        60.0,
        "GPUFLEET_HEALTH_RECOVERY",
        "--health-recovery-seconds",
        group=GPUFLEET,
        help="An unhealthy device returns to Healthy after NVML reports it usable, with no "
        "new critical XID, for this many seconds; 0 never (NVIDIA's behaviour). 60 s outlasts "
        "an XID burst, so allocatable does not flap and pods are not placed on a GPU that "
        "fails again at once.",
        ge=0,
    )
    dp_disable_healthchecks: str = setting(
        "",
        "DP_DISABLE_HEALTHCHECKS",
        group=HEALTH,
        help="'all' or 'xids' turns health checks off; a comma list of XIDs adds to "
        "the ignored ones (13, 31, 43, 45, 68, 109). Other items are skipped with a warning.",
    )
    dp_enable_healthchecks: str = setting(
        "",
        "DP_ENABLE_HEALTHCHECKS",
        group=HEALTH,
        help="'all' (or 'xids', as NVIDIA reads it) or a comma list of XIDs that count as "
        "critical even when ignored. Other items are skipped with a warning.",
    )

    # Comma-separated strings, not lists: pydantic-settings would read a list-typed env var
    # as JSON, and NVIDIA's is "envvar,volume-mounts". Checked here so that a bad value names
    # its flag or env var; `resolve_config` converts.
    @field_validator("device_list_strategy")
    @classmethod
    def _device_list(cls, value: str) -> str:
        return ",".join(parse_device_list_strategy(value))

    @field_validator("imex_channel_ids")
    @classmethod
    def _imex_ids(cls, value: str) -> str:
        return ",".join(str(i) for i in _channel_ids(value))

    @field_validator("metrics_address")
    @classmethod
    def _listen_address(cls, value: str) -> str:
        if value:
            parse_listen_address(value)
        return value


def _channel_ids(value: str) -> tuple[int, ...]:
    try:
        ids = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated integers, got {value!r}") from None
    return parse_imex_channel_ids(ids)


# Settings fields whose config value has another type than the flag's string.
_CONVERT: dict[str, Callable[[str], object]] = {
    "device_list_strategy": parse_device_list_strategy,
    "imex_channel_ids": _channel_ids,
}


def resolve_config(
    settings: PluginSettings, *, read_file: Callable[[Path], str] = Path.read_text
) -> tuple[PluginConfig, tuple[str, ...]]:
    """The effective config: the config file (if any) with given flags and env vars on top.

    Only fields in `settings.model_fields_set` (given as a flag or env var) override the
    file. Raises ConfigError naming the file: missing, unreadable or invalid.
    Returns the config and the file's warnings."""
    source = settings.config_file or "flags"
    if settings.node_labels_api and not settings.node_name:
        raise ConfigError(
            "--node-labels-api (GPUFLEET_NODE_LABELS_API) needs --node-name (NODE_NAME)"
        )
    if settings.config_file:
        path = Path(settings.config_file)
        try:
            text = read_file(path)
        except FileNotFoundError:
            raise ConfigError(f"{path}: config file not found (--config-file)") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read the config file: {exc}") from None
        file_config, warnings = parse_config(text, source=str(path))
    else:
        file_config, warnings = PluginConfig(), ()
    given = {
        name: _CONVERT.get(name, _same)(getattr(settings, name))
        for name in settings.model_fields_set
        if name in OVERRIDABLE
    }
    if settings.cdi_feature_flags.strip(","):
        warnings += (
            f"--cdi-feature-flags (CDI_FEATURE_FLAGS) {settings.cdi_feature_flags!r}: ignored "
            "(gpufleet's CDI specs take no nvcdi feature flags)",
        )
    return merge(file_config, given, source=source), warnings


def _same(value: object) -> object:
    return value


def disabled_hooks(settings: PluginSettings) -> frozenset[str]:
    """--cdi-disable-hooks as a set of hook names ("all" among them means every hook)."""
    return frozenset(h.strip() for h in settings.cdi_disable_hooks.split(",") if h.strip())
