"""From the plugin's configuration to the option records the pure core takes.

`config.PluginConfig` mirrors NVIDIA's file and flags; `devices`, `allocate` and
`preferred` take small records of just what they need. This module is the one place that
maps one onto the other, and the one place that says which parsed settings cannot work as
given: those are refused at startup, never silently dropped. Pure: no I/O, no logging.
"""

from collections.abc import Sequence

from gpufleet.plugin.core.allocate import (
    CDI_STRATEGIES,
    CONTROL_DEVICES,
    AllocateOptions,
    DeviceIdStrategy,
    DeviceListStrategy,
    MpsOptions,
)
from gpufleet.plugin.core.cdi import CdiOptions
from gpufleet.plugin.core.config import SHARED_SUFFIX, ConfigError, PluginConfig, SharingKind
from gpufleet.plugin.core.devices import MigStrategy, ResourceOptions, SharingOptions
from gpufleet.plugin.core.preferred import AllocationPolicy


def resource_options(config: PluginConfig) -> ResourceOptions:
    """MIG strategy and sharing, for `devices.advertise`."""
    sharing = config.sharing
    shared = None
    if sharing.kind is not SharingKind.NONE:
        shared = SharingOptions(
            kind=sharing.kind,
            replicas={r.name: r.replicas for r in sharing.resources},
            rename_by_default=sharing.rename_by_default,
        )
    return ResourceOptions(mig_strategy=MigStrategy(config.flags.mig_strategy), sharing=shared)


def allocate_options(
    config: PluginConfig,
    resource: str,
    *,
    imex_channels: Sequence[str] = (),
    control_devices: Sequence[str] = CONTROL_DEVICES,
    cdi_gated: Sequence[str] = (),
) -> AllocateOptions:
    """How `allocate` answers for one advertised resource; `imex_channels` are the IDs of
    the configured channels present on the host, `control_devices` the control devices
    present, `cdi_gated` the `gated_modes` whose CDI spec is in place."""
    flags, plugin, sharing = config.flags, config.flags.plugin, config.sharing
    base = resource.removesuffix(SHARED_SUFFIX) if sharing.rename_by_default else resource
    replicas = {r.name: r.replicas for r in sharing.resources}
    shared = sharing.kind is not SharingKind.NONE and base in replicas
    mps = None
    if shared and sharing.kind is SharingKind.MPS:
        mps = MpsOptions(root=flags.mps_root, replicas=replicas[base])
    return AllocateOptions(
        resource=resource,
        device_list_strategies=tuple(DeviceListStrategy(s) for s in plugin.device_list_strategy),
        device_id_strategy=DeviceIdStrategy(plugin.device_id_strategy),
        pass_device_specs=plugin.pass_device_specs,
        dev_root=flags.dev_root,
        cdi_annotation_prefix=plugin.cdi_annotation_prefix,
        fail_requests_greater_than_one=shared and sharing.fail_requests_greater_than_one,
        mps=mps,
        gds_enabled=flags.gds_enabled,
        mofed_enabled=flags.mofed_enabled,
        gdrcopy_enabled=flags.gdrcopy_enabled,
        imex_channels=tuple(imex_channels),
        control_devices=tuple(control_devices),
        cdi_gated=tuple(cdi_gated),
    )


def gated_modes(config: PluginConfig) -> tuple[str, ...]:
    """The enabled GDRCopy, GDS and MOFED modes (NVIDIA's order), by CDI class name."""
    flags = config.flags
    enabled = (
        ("gdrcopy", flags.gdrcopy_enabled),
        ("gds", flags.gds_enabled),
        ("mofed", flags.mofed_enabled),
    )
    return tuple(mode for mode, on in enabled if on)


def uses_cdi(config: PluginConfig) -> bool:
    """Whether a device list strategy names CDI devices (and so needs CDI specs)."""
    return any(s in CDI_STRATEGIES for s in config.flags.plugin.device_list_strategy)


def cdi_options(config: PluginConfig) -> CdiOptions:
    """How the generated CDI specs name devices, and where their nodes and the driver are."""
    flags, plugin = config.flags, config.flags.plugin
    return CdiOptions(
        device_id_strategy=DeviceIdStrategy(plugin.device_id_strategy),
        dev_root=flags.dev_root,
        driver_root=flags.nvidia_driver_root,
        container_driver_root=plugin.container_driver_root,
        hook_path=plugin.nvidia_ctk_path,
    )


def allocation_policy(config: PluginConfig) -> AllocationPolicy:
    return AllocationPolicy(config.flags.plugin.shared_devices_allocation_policy)


def refuse_unsupported(config: PluginConfig, *, where: str, spec_dirs: Sequence[str]) -> None:
    """Raise ConfigError for a device list strategy that cannot work as configured.

    The CDI strategies name devices (`k8s.device-plugin.nvidia.com/gpu=<id>`) that exist only
    where a CDI spec of that kind is installed; the plugin writes one into the first of
    `spec_dirs` unless the operator installed one, so there must be a directory. `where`
    names the origin of flags.plugin.deviceListStrategy."""
    for strategy in config.flags.plugin.device_list_strategy:
        if strategy in CDI_STRATEGIES and not spec_dirs:
            raise ConfigError(
                f"{where}: {strategy} needs CDI specs, and --cdi-spec-dirs "
                "(GPUFLEET_CDI_SPEC_DIRS) names no directory to find or write them in"
            )
