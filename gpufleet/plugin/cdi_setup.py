"""The CDI specs the plugin's Allocate answers name, put in place before anything is
served: the GPUs' (and IMEX channels') spec, and those of GDS, MOFED and GDRCopy where their
device nodes exist; and the check that a CDI strategy can work at all.

Wiring: reads settings, writes through `host.cdi_dirs`; an unwritable file is a
StartupError naming it, a missing driver a warning.
"""

import logging
from collections.abc import Sequence
from pathlib import Path

from gpufleet.plugin.core.allocate import CDI_KIND
from gpufleet.plugin.core.cdi import gated_spec, gpu_spec, imex_spec
from gpufleet.plugin.core.cdi_driver import without_hooks
from gpufleet.plugin.core.config import PluginConfig
from gpufleet.plugin.core.options import cdi_options, gated_modes, refuse_unsupported
from gpufleet.plugin.host.cdi_dirs import CdiError, install
from gpufleet.plugin.host.driver_files import read_driver_edits, visible_root
from gpufleet.plugin.host.gated_files import gated_mounts, gated_nodes
from gpufleet.plugin.kubelet.server import DevicePluginService
from gpufleet.plugin.settings import PluginSettings, disabled_hooks

log = logging.getLogger(__name__)


class StartupError(Exception):
    """A startup problem; the message names the flag, env var or file."""


def check_config(settings: PluginSettings, config: PluginConfig) -> None:
    """Refuse an effective config that cannot work on this node; the error names where the
    value came from (flag or env var, else the config file). Raises ConfigError."""
    if "device_list_strategy" in settings.model_fields_set:
        where = "--device-list-strategy (DEVICE_LIST_STRATEGY)"
    else:
        where = f"{settings.config_file}: flags.plugin.deviceListStrategy"
    refuse_unsupported(config, where=where, spec_dirs=spec_dirs(settings))


def spec_dirs(settings: PluginSettings) -> list[Path]:
    """--cdi-spec-dirs, in order."""
    return [Path(d.strip()) for d in settings.cdi_spec_dirs.split(",") if d.strip()]


def install_cdi_specs(
    settings: PluginSettings,
    config: PluginConfig,
    services: Sequence[DevicePluginService],
    channels: Sequence[str],
    *,
    driver_version: str = "",
) -> None:
    """Put the CDI specs Allocate's names need in place (the operator's win); raises
    StartupError naming a file that cannot be written. `driver_version` is NVML's; ""
    takes the one in libcuda's file name. No driver files is a warning, never an error."""
    options = cdi_options(config)
    driver = read_driver_edits(
        visible_root(
            container_driver_root=options.container_driver_root, driver_root=options.driver_root
        ),
        nvml_version=driver_version,
        host_driver_root=options.driver_root,
        hook_path=options.hook_path,
    )
    driver = without_hooks(driver, disabled_hooks(settings))
    specs = [
        spec
        for spec in (
            gpu_spec((d for s in services for d in s.devices), options, driver=driver),
            imex_spec(channels, options),
        )
        if spec is not None
    ]
    try:
        installed = install(specs, spec_dirs(settings))
    except CdiError as exc:
        raise StartupError(str(exc)) from None
    for spec in installed:
        origin = "generated" if spec.generated else "installed by the operator, kept"
        log.info("CDI spec for %s: %s (%s)", spec.kind, spec.path, origin)
        if spec.generated and spec.kind == CDI_KIND and driver.gap:
            log.warning(
                "CDI spec %s has device nodes only (%s: %s): CUDA containers need the "
                "driver's libraries, from the spec `nvidia-ctk cdi generate` writes",
                spec.path,
                driver.gap,
                driver.message,
            )


def install_gated_specs(settings: PluginSettings, config: PluginConfig) -> tuple[str, ...]:
    """Put in place the CDI specs of the enabled GDS/MOFED/GDRCopy modes whose device nodes
    exist, and return the modes that have a spec (ours or the operator's): Allocate names
    only those, as NVIDIA does. Raises StartupError naming a file it cannot write."""
    options = cdi_options(config)
    container_root = Path(options.container_driver_root)
    visible = visible_root(
        container_driver_root=options.container_driver_root, driver_root=options.driver_root
    )
    specs = {}
    for mode in gated_modes(config):
        nodes = gated_nodes(mode, container_driver_root=container_root)
        mounts = gated_mounts(mode, visible_root=visible, host_driver_root=options.driver_root)
        spec = gated_spec(mode, nodes, mounts, options)
        if spec is None:
            log.warning(
                "%s is enabled but no %s device exists: containers get no CDI %s "
                "device, only NVIDIA_%s=enabled",
                mode,
                mode,
                mode,
                mode.upper(),
            )
            continue
        specs[mode] = spec
    try:
        installed = install(list(specs.values()), spec_dirs(settings))
    except CdiError as exc:
        raise StartupError(str(exc)) from None
    for spec in installed:
        origin = "generated" if spec.generated else "installed by the operator, kept"
        log.info("CDI spec for %s: %s (%s)", spec.kind, spec.path, origin)
    return tuple(specs)
