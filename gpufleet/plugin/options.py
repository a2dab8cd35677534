"""From the plugin's configuration to the option records the pure core takes.

`config.PluginConfig` mirrors NVIDIA's file and flags; `devices`, `allocate` and
`preferred` take small records of just what they need. This module is the one place that
maps one onto the other. Pure: no I/O.
"""

from gpufleet.plugin.allocate import (
    AllocateOptions,
    DeviceIdStrategy,
    DeviceListStrategy,
    MpsOptions,
)
from gpufleet.plugin.config import PluginConfig
from gpufleet.plugin.config import SharingKind as ConfigSharing
from gpufleet.plugin.devices import MigStrategy, ResourceOptions, SharingKind, SharingOptions
from gpufleet.plugin.preferred import AllocationPolicy

_SHARING = {
    ConfigSharing.TIME_SLICING: SharingKind.TIME_SLICING,
    ConfigSharing.MPS: SharingKind.MPS,
}


def resource_options(config: PluginConfig) -> ResourceOptions:
    """MIG strategy and sharing, for `devices.advertise`."""
    sharing = config.sharing
    shared = None
    if sharing.kind in _SHARING:
        shared = SharingOptions(
            kind=_SHARING[sharing.kind],
            replicas={r.name: r.replicas for r in sharing.resources},
            rename_by_default=sharing.rename_by_default,
        )
    return ResourceOptions(mig_strategy=MigStrategy(config.flags.mig_strategy), sharing=shared)


def allocate_options(config: PluginConfig, resource: str) -> AllocateOptions:
    """How `allocate` answers for one advertised resource."""
    flags, plugin, sharing = config.flags, config.flags.plugin, config.sharing
    base = resource.removesuffix(".shared") if sharing.rename_by_default else resource
    replicas = {r.name: r.replicas for r in sharing.resources}
    shared = sharing.kind in _SHARING and base in replicas
    mps = None
    if shared and sharing.kind is ConfigSharing.MPS:
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
