"""From the plugin's configuration to the option records the pure core takes.

`config.PluginConfig` mirrors NVIDIA's file and flags; `devices`, `allocate` and
`preferred` take small records of just what they need. This module is the one place that
maps one onto the other, and the one place that says which parsed settings gpufleet cannot
honour yet: those are refused or warned about at startup, never silently dropped. Pure: no
I/O, no logging.
"""

from collections.abc import Collection

from gpufleet.plugin.allocate import (
    CDI_KIND,
    CDI_STRATEGIES,
    AllocateOptions,
    DeviceIdStrategy,
    DeviceListStrategy,
    MpsOptions,
)
from gpufleet.plugin.config import SHARED_SUFFIX, ConfigError, PluginConfig, SharingKind
from gpufleet.plugin.devices import MigStrategy, ResourceOptions, SharingOptions
from gpufleet.plugin.preferred import AllocationPolicy


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


def allocate_options(config: PluginConfig, resource: str) -> AllocateOptions:
    """How `allocate` answers for one advertised resource."""
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
    )


def allocation_policy(config: PluginConfig) -> AllocationPolicy:
    return AllocationPolicy(config.flags.plugin.shared_devices_allocation_policy)


def refuse_unsupported(
    config: PluginConfig, *, where: str, cdi_kinds: Collection[str], searched: str
) -> None:
    """Raise ConfigError for a device list strategy that cannot work on this node.

    The CDI strategies name devices (`k8s.device-plugin.nvidia.com/gpu=<id>`) that exist
    only where a CDI spec of that kind is installed; gpufleet does not generate one, so
    without it every container would fail at creation. `where` names the origin of
    flags.plugin.deviceListStrategy; `cdi_kinds` are the kinds of the specs found in
    `searched`."""
    for strategy in config.flags.plugin.device_list_strategy:
        if strategy in CDI_STRATEGIES and CDI_KIND not in cdi_kinds:
            raise ConfigError(
                f"{where}: {strategy} needs CDI specs of kind {CDI_KIND}, and none is in "
                f"{searched}; generate one with `nvidia-ctk cdi generate --vendor "
                f"{CDI_KIND.split('/')[0]} --class gpu --output "
                f"/var/run/cdi/{CDI_KIND.replace('/', '-')}.yaml`, or use envvar or "
                "volume-mounts"
            )


def unapplied(config: PluginConfig) -> tuple[str, ...]:
    """Warnings for configured settings that are accepted but not applied yet."""
    imex = config.imex
    if not imex.channel_ids and not imex.required:
        return ()
    return (
        f"imex (channelIDs {list(imex.channel_ids)}, required {str(imex.required).lower()}) "
        "is not applied yet: NVIDIA_IMEX_CHANNELS is not set and imex.required is not "
        "enforced",
    )
