"""`gpufleet plugin`: wiring of settings, config, NVML discovery, the per-resource gRPC
services, health watching, registration with the kubelet and self-metrics.

Startup validates everything before serving: a bad flag, env var or config file is one
line naming it and a non-zero exit. NVML failing to initialise exits non-zero when
failOnInitError is set (NVIDIA's default) and otherwise serves no devices. SIGTERM and
SIGINT shut down gracefully: streams end, sockets are removed. SIGHUP reloads the config
file in process; a bad one is logged and the running config keeps serving.

It must never advertise a device Healthy before its health is known: the services get the
health watcher's first report (or, if none comes in time, all Unhealthy) before the first
registration with the kubelet (NVIDIA #1641/#2037). Nor may it name a CDI device no spec
defines: with a CDI strategy the specs are in place (the operator's, or ours) before any
socket is served.
"""

import logging
import queue
import signal
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CollectorRegistry

from gpufleet.core.listen import parse_listen_address
from gpufleet.logs import setup_logging
from gpufleet.nvml.backend import NvmlBackend, NvmlStartError, start_backend
from gpufleet.plugin.cdi_setup import (
    StartupError,
    check_config,
    install_cdi_specs,
    install_gated_specs,
)
from gpufleet.plugin.core.allocate import CONTROL_DEVICES, AllocateOptions, allocate
from gpufleet.plugin.core.config import ConfigError, PluginConfig
from gpufleet.plugin.core.devices import (
    AdvertiseError,
    advertise,
    health_groups,
    mig_warnings,
)
from gpufleet.plugin.core.health import parse_health_policy
from gpufleet.plugin.core.model import AdvertisedDevice, Health, NodeGpus
from gpufleet.plugin.core.options import (
    allocate_options,
    allocation_policy,
    resource_options,
    uses_cdi,
)
from gpufleet.plugin.core.preferred import AllocationPolicy, preferred_allocation
from gpufleet.plugin.host.host_devices import (
    MIG_MINORS_PATH,
    ImexError,
    imex_channels,
    present_control_devices,
    read_mig_minors,
    with_cap_minors,
)
from gpufleet.plugin.host.mps_daemon import mps_daemon_problem
from gpufleet.plugin.kubelet.registration import PluginRunner
from gpufleet.plugin.kubelet.server import DevicePluginService, RpcStats, to_response
from gpufleet.plugin.labels import publish_labels
from gpufleet.plugin.metrics import MetricsServer, SelfMetrics
from gpufleet.plugin.nvml.discovery import discover
from gpufleet.plugin.nvml.health_watch import HealthWatcher
from gpufleet.plugin.settings import PluginSettings, resolve_config
from gpufleet.settings import settings_from_argv

if TYPE_CHECKING:  # loaded only with --web-config-file (YAML, bcrypt, TLS setup)
    from gpufleet.http.webconfig import WebConfig

log = logging.getLogger(__name__)

# How long startup waits for the health watcher's first report before registering anyway,
# with every device Unhealthy.
FIRST_HEALTH_TIMEOUT_SECONDS = 5.0

DESCRIPTION = """Advertise GPUs, MIG slices and time-sliced or MPS replicas to the kubelet
(device plugin API v1beta1): a drop-in for NVIDIA's k8s-device-plugin, reading the same
config file, flags and env vars. Unlike it, health recovers after a quiet period, every
replica and MIG slice of a failing GPU goes unhealthy together, and preferred allocation
never fails because a GPU is lost. SIGHUP rereads the config file (a bad one is one line
and the running config keeps serving); SIGTERM and SIGINT stop it."""


def _allocator(devices: Mapping[str, AdvertisedDevice], options: AllocateOptions):
    return lambda ids: to_response(allocate(ids, devices, options))


@dataclass(frozen=True, slots=True, kw_only=True)
class HostDevices:
    """What Allocate may name that NVML does not know: read from the host at startup."""

    imex_channels: tuple[str, ...] = ()  # IDs of the configured IMEX channels present
    control_devices: tuple[str, ...] = CONTROL_DEVICES  # those present on the host
    cdi_gated: tuple[str, ...] = ()  # gds/mofed/gdrcopy modes whose CDI spec is in place


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceSpec:
    """What a resource's service is built from: equal specs serve the same answers."""

    devices: tuple[AdvertisedDevice, ...]
    options: AllocateOptions
    policy: AllocationPolicy
    links: Mapping[tuple[int, int], int]


def mps_ready(service: DevicePluginService) -> str | None:
    """The runner's readiness check: a resource shared with MPS waits for its MPS control
    daemon to answer, as NVIDIA's plugin does; any other is ready."""
    spec = service.spec
    if not isinstance(spec, ServiceSpec) or spec.options.mps is None:
        return None
    problem = mps_daemon_problem(service.resource)
    return None if problem is None else f"its MPS control daemon answers ({problem})"


def build_services(
    node: NodeGpus,
    config: PluginConfig,
    *,
    stats: RpcStats,
    host: HostDevices = HostDevices(),
) -> list[DevicePluginService]:
    """One DevicePlugin service per advertised resource. Raises AdvertiseError."""
    services: dict[str, DevicePluginService] = {}
    policy = allocation_policy(config)
    for resource, devices in advertise(node, resource_options(config)).items():
        by_id = {d.id: d for d in devices}

        def preferrer(available, must, size, *, by_id=by_id, resource=resource):
            health = services[resource].health
            unhealthy = {i for i, h in health.items() if h is not Health.HEALTHY}
            return preferred_allocation(
                available, must, size, by_id, node.links, policy=policy, unhealthy=unhealthy
            )

        options = allocate_options(
            config,
            resource,
            imex_channels=host.imex_channels,
            control_devices=host.control_devices,
            cdi_gated=host.cdi_gated,
        )
        services[resource] = DevicePluginService(
            resource,
            devices,
            allocator=_allocator(by_id, options),
            preferrer=preferrer,
            stats=stats,
            spec=ServiceSpec(devices=devices, options=options, policy=policy, links=node.links),
        )
    return list(services.values())


@dataclass(slots=True)
class Plugin:
    """The running parts."""

    services: list[DevicePluginService]
    runner: PluginRunner
    health: HealthWatcher
    stats: RpcStats
    # kind -> count, over every discovery (the start's and each reload's): a counter
    discovery_errors: Counter[str] = field(default_factory=Counter)

    def stop(self) -> None:
        self.health.stop()
        self.runner.stop()


@dataclass(frozen=True, slots=True, kw_only=True)
class _Built:
    """What discovery and the config give: the node and one service per resource."""

    node: NodeGpus
    services: list[DevicePluginService]


def _build(
    settings: PluginSettings,
    config: PluginConfig,
    lib: Any,
    *,
    stats: RpcStats,
    mig_minors_path: Path,
    errors: Counter[str],
) -> _Built:
    """Discover the node and build its services, with the CDI specs their names need in
    place; discovery's failures are counted in `errors`. Raises StartupError, having
    served nothing."""
    node = discover(lib, errors=errors)
    node = with_cap_minors(node, read_mig_minors(mig_minors_path))
    for warning in mig_warnings(node, resource_options(config)):
        log.warning("%s", warning)
    container_root = Path(config.flags.plugin.container_driver_root)
    try:
        channels = imex_channels(
            config.imex.channel_ids,
            required=config.imex.required,
            container_driver_root=container_root,
        )
        host = HostDevices(
            imex_channels=channels,
            control_devices=present_control_devices(
                CONTROL_DEVICES, container_driver_root=container_root
            ),
            cdi_gated=install_gated_specs(settings, config) if uses_cdi(config) else (),
        )
        services = build_services(node, config, stats=stats, host=host)
    except (AdvertiseError, ImexError) as exc:
        raise StartupError(str(exc)) from None
    if uses_cdi(config):
        install_cdi_specs(settings, config, services, channels, driver_version=node.driver_version)
    return _Built(node=node, services=services)


class _FirstReport:
    """Publishes health maps to `services`, and waits for the first: if none comes in
    time, the `unknown` services (those never reported on) turn Unhealthy until it does."""

    def __init__(
        self,
        services: Sequence[DevicePluginService],
        *,
        unknown: Sequence[DevicePluginService],
    ) -> None:
        self._services = services
        self._unknown = unknown
        self._reported = threading.Event()
        self._publishing = threading.Lock()  # a late first report must not be overwritten

    def publish(self, health: Mapping[str, Health]) -> None:
        with self._publishing:
            for service in self._services:
                service.set_health(health)
            self._reported.set()

    def wait(self, timeout_seconds: float) -> None:
        if self._reported.wait(timeout_seconds):
            return
        with self._publishing:
            if not self._reported.is_set():
                log.error(
                    "no health report within %.1f s: advertising every device Unhealthy "
                    "until the health watcher reports",
                    timeout_seconds,
                )
                for service in self._unknown:
                    service.set_health(dict.fromkeys(service.health, Health.UNHEALTHY))


def _groups(services: Sequence[DevicePluginService]) -> dict[str, tuple[str, ...]]:
    return health_groups(d for s in services for d in s.devices)


def _watch_health(
    settings: PluginSettings,
    lib: Any,
    services: Sequence[DevicePluginService],
    *,
    first_health_timeout_seconds: float,
) -> HealthWatcher:
    """Start a health watcher publishing to `services`, and wait for its first report."""
    first = _FirstReport(services, unknown=services)
    policy = parse_health_policy(settings.dp_disable_healthchecks, settings.dp_enable_healthchecks)
    for warning in policy.warnings:
        log.warning("%s", warning)
    watcher = HealthWatcher(
        lib,
        _groups(services),
        policy=policy,
        on_change=first.publish,
        recovery_seconds=settings.health_recovery_seconds or None,
    )
    watcher.start()
    first.wait(first_health_timeout_seconds)
    return watcher


def _retarget_health(
    watcher: HealthWatcher,
    services: Sequence[DevicePluginService],
    *,
    unknown: Sequence[DevicePluginService],
    first_health_timeout_seconds: float,
) -> None:
    """Point the running watcher at `services` (it keeps every GPU's state), and wait for
    its first report to them."""
    first = _FirstReport(services, unknown=unknown)
    watcher.retarget(_groups(services), first.publish)
    first.wait(first_health_timeout_seconds)


def _publish_labels(settings: PluginSettings, config: PluginConfig, node: NodeGpus) -> None:
    if not settings.node_labels_file and not settings.node_labels_api:
        return  # published nowhere: not computed (reading sysfs would only warn)
    publish_labels(
        node,
        config,
        features_file=settings.node_labels_file,
        node_name=settings.node_name if settings.node_labels_api else "",
        machine_type_file=settings.machine_type_file,
        kube_url=settings.kube_url,
        kubeconfig=settings.kubeconfig,
    )


def start_plugin(
    settings: PluginSettings,
    config: PluginConfig,
    lib: Any,
    *,
    plugin_dir: Path,
    first_health_timeout_seconds: float = FIRST_HEALTH_TIMEOUT_SECONDS,
    mig_minors_path: Path = MIG_MINORS_PATH,
) -> Plugin:
    """Discover, build and start everything (NVML must be initialised).

    Registers only once the health watcher has reported (or `first_health_timeout_seconds`
    passed, and then every device is advertised Unhealthy until it does)."""
    stats, errors = RpcStats(), Counter[str]()
    built = _build(
        settings, config, lib, stats=stats, mig_minors_path=mig_minors_path, errors=errors
    )
    services = built.services
    kubelet = config.flags.plugin.kubelet_socket
    if not plugin_dir.is_dir():  # said here, before gRPC logs its own lines about it
        raise StartupError(
            f"cannot serve the plugin sockets in {plugin_dir}: no such directory "
            f"(the --kubelet-socket's, {kubelet or 'unset'})"
        )
    try:
        runner = PluginRunner(
            services,
            plugin_dir=plugin_dir,
            kubelet_socket=Path(kubelet) if kubelet else None,
            ready=mps_ready,
        )
    except ValueError as exc:  # a socket path too long to bind
        raise StartupError(f"cannot serve the plugin sockets in {plugin_dir}: {exc}") from None
    watcher = _watch_health(
        settings, lib, services, first_health_timeout_seconds=first_health_timeout_seconds
    )
    try:
        runner.start()
    except (RuntimeError, OSError) as exc:
        watcher.stop()
        raise StartupError(f"cannot serve the plugin sockets in {plugin_dir}: {exc}") from None
    _publish_labels(settings, config, built.node)
    log.info(
        "plugin started",
        extra={"fields": {"resources": {s.resource: len(s.health) for s in services}}},
    )
    return Plugin(
        services=services,
        runner=runner,
        health=watcher,
        stats=stats,
        discovery_errors=errors,
    )


def reload_plugin(
    plugin: Plugin,
    settings: PluginSettings,
    config: PluginConfig,
    lib: Any,
    *,
    first_health_timeout_seconds: float = FIRST_HEALTH_TIMEOUT_SECONDS,
    mig_minors_path: Path = MIG_MINORS_PATH,
) -> None:
    """Apply `config` in process (SIGHUP): rediscover, keep serving every resource whose
    service would be built the same (no re-registration, its pods' streams untouched), and
    replace the others. The health watcher keeps running, so no GPU's health is forgotten.
    Raises StartupError with the running plugin left as it was."""
    # Counted on from the running totals, into a copy swapped in whole: the metrics
    # thread reads the counter while a reload runs.
    errors = Counter(plugin.discovery_errors)
    try:
        built = _build(
            settings,
            config,
            lib,
            stats=plugin.stats,
            mig_minors_path=mig_minors_path,
            errors=errors,
        )
    finally:
        plugin.discovery_errors = errors
    running = {s.resource: s for s in plugin.services}
    services = [
        running[s.resource] if s.resource in running and running[s.resource].spec == s.spec else s
        for s in built.services
    ]
    changed = [s for s in services if s is not running.get(s.resource)]
    timeout = first_health_timeout_seconds
    _retarget_health(plugin.health, services, unknown=changed, first_health_timeout_seconds=timeout)
    try:
        plugin.runner.replace(services)
    except ValueError as exc:  # a socket path too long to bind: nothing was replaced
        _retarget_health(
            plugin.health, plugin.services, unknown=(), first_health_timeout_seconds=timeout
        )
        raise StartupError(f"cannot serve the new resources' sockets: {exc}") from None
    plugin.services = services
    _publish_labels(settings, config, built.node)
    kept = sorted(r for r, s in running.items() if s in services)
    log.info(
        "config reloaded: %s re-registered, %s kept, %s removed",
        ", ".join(s.resource for s in changed) or "none",
        ", ".join(kept) or "none",
        ", ".join(sorted(set(running) - {s.resource for s in services})) or "none",
    )


def _open(settings: PluginSettings) -> NvmlBackend:
    try:
        return start_backend(settings.sim_fleet or None)
    except NvmlStartError as exc:
        raise StartupError(str(exc)) from None


def _web_config(settings: PluginSettings) -> "WebConfig | None":
    """The metrics port's --web-config-file, validated (certificates included); the
    modules load only when one is given. Raises StartupError naming the file and key."""
    if settings.web_config_file is None:
        return None
    from gpufleet.http.webconfig import WebConfigError, load_web_config

    try:
        return load_web_config(settings.web_config_file)
    except (WebConfigError, OSError) as exc:
        raise StartupError(str(exc)) from None


def _reload(settings: PluginSettings, plugin: Plugin, lib: Any) -> None:
    """SIGHUP, as NVIDIA's plugin takes it (the config manager sends it when the node's
    config label changes): re-read the config file and apply it. A bad config or a node
    it cannot serve is one line, and the running config goes on serving."""
    log.info("SIGHUP: reloading the config")
    try:
        config, warnings = resolve_config(settings)
        for warning in warnings:
            log.warning("%s", warning)
        check_config(settings, config)
        reload_plugin(plugin, settings, config, lib)
    except (ConfigError, StartupError) as exc:
        log.error("config reload failed, still serving the previous config: %s", exc)
    except Exception as exc:  # NVML failing mid-discovery, say: the running config serves on
        log.error(
            "config reload failed, still serving the previous config: %s: %s",
            type(exc).__name__,
            exc,
        )
        log.debug("config reload failure", exc_info=True)


def main(argv: Sequence[str] | None = None) -> int:
    settings = settings_from_argv(
        PluginSettings, prog="gpufleet plugin", description=DESCRIPTION, argv=argv
    )
    setup_logging(debug=settings.debug, json_format=settings.log_format == "json")
    try:
        config, warnings = resolve_config(settings)
        for warning in warnings:
            log.warning("%s", warning)
        check_config(settings, config)
        metrics = (
            parse_listen_address(settings.metrics_address) if settings.metrics_address else None
        )
    except (ConfigError, ValueError) as exc:
        log.error("%s", exc)
        return 1
    try:
        web_config = _web_config(settings)
    except StartupError as exc:
        log.error("%s", exc)
        return 1
    # SimpleQueue.put is safe in a signal handler; the main thread waits on get().
    signals: queue.SimpleQueue[int] = queue.SimpleQueue()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: signals.put(signum))
    try:
        backend = _open(settings)
    except StartupError as exc:
        log.error("%s", exc)
        if config.flags.fail_on_init_error:
            return 1
        # NVIDIA's failOnInitError=false: stay up advertising nothing.
        log.warning("failOnInitError is false: serving no devices")
        while signals.get() == signal.SIGHUP:
            log.warning("SIGHUP: no config to reload while NVML is unavailable")
        return 0
    kubelet = config.flags.plugin.kubelet_socket
    plugin_dir = Path(kubelet).parent if kubelet else Path("/var/lib/kubelet/device-plugins")
    try:
        plugin = start_plugin(settings, config, backend.lib, plugin_dir=plugin_dir)
    except StartupError as exc:
        log.error("%s", exc)
        backend.close()
        return 1
    server = None
    if metrics:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(SelfMetrics(plugin))
        host, port = metrics
        server = MetricsServer(registry, host=host, port=port, web_config=web_config)
        try:
            server.start()
        except OSError as exc:
            # The kubelet is served already, and NVIDIA's plugin opens no port at all:
            # a taken one (hostNetwork) costs the metrics, not the node's GPUs.
            log.error(
                "--metrics-address: %s; serving the kubelet without metrics", exc.strerror or exc
            )
            server = None
    while signals.get() == signal.SIGHUP:
        _reload(settings, plugin, backend.lib)
    log.info("shutting down")
    if server:
        server.stop()
    plugin.stop()
    backend.close()
    return 0
