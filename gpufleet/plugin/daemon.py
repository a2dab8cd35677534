"""`gpufleet plugin`: wiring of settings, config, NVML discovery, the per-resource gRPC
services, health watching, registration with the kubelet and self-metrics.

Startup validates everything before serving: a bad flag, env var or config file is one
line naming it and a non-zero exit. NVML failing to initialise exits non-zero when
failOnInitError is set (NVIDIA's default) and otherwise serves no devices. SIGTERM and
SIGINT shut down gracefully: streams end, sockets are removed.
"""

import logging
import signal
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml
from prometheus_client import start_http_server
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily

from gpufleet.exporter.server import parse_listen_address
from gpufleet.kubelet.api import deviceplugin_v1beta1_pb2 as pb
from gpufleet.logs import setup_logging
from gpufleet.nvml.backend import NvmlBackend, open_backend
from gpufleet.plugin import nvml as plugin_nvml
from gpufleet.plugin.allocate import AllocateOptions, ContainerAllocation, allocate
from gpufleet.plugin.config import ConfigError, PluginConfig
from gpufleet.plugin.devices import AdvertiseError, advertise, health_groups
from gpufleet.plugin.health import parse_health_policy
from gpufleet.plugin.health_watch import HealthWatcher
from gpufleet.plugin.model import AdvertisedDevice, Health, NodeGpus
from gpufleet.plugin.options import allocate_options, allocation_policy, resource_options
from gpufleet.plugin.preferred import preferred_allocation
from gpufleet.plugin.registration import PluginRunner
from gpufleet.plugin.server import DevicePluginService, RpcStats
from gpufleet.plugin.settings import PluginSettings, resolve_config
from gpufleet.settings import SettingsError, build_parser, exit_on_settings_error, load_settings

log = logging.getLogger(__name__)

DESCRIPTION = """Advertise GPUs, MIG slices and time-sliced or MPS replicas to the kubelet
(device plugin API v1beta1): a drop-in for NVIDIA's k8s-device-plugin, reading the same
config file, flags and env vars. Unlike it, health recovers after a quiet period, every
replica and MIG slice of a failing GPU goes unhealthy together, and preferred allocation
never fails because a GPU is lost."""


class StartupError(Exception):
    """A startup problem; the message names the flag, env var or file."""


def to_response(allocation: ContainerAllocation) -> pb.ContainerAllocateResponse:
    """The protobuf form of a pure `ContainerAllocation`."""
    return pb.ContainerAllocateResponse(
        envs=allocation.envs,
        mounts=[
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in allocation.mounts
        ],
        devices=[
            pb.DeviceSpec(
                container_path=d.container_path, host_path=d.host_path, permissions=d.permissions
            )
            for d in allocation.device_specs
        ],
        annotations=allocation.annotations,
        cdi_devices=[pb.CDIDevice(name=n) for n in allocation.cdi_devices],
    )


def _allocator(devices: Mapping[str, AdvertisedDevice], options: AllocateOptions):
    return lambda ids: to_response(allocate(ids, devices, options))


def build_services(
    node: NodeGpus, config: PluginConfig, *, stats: RpcStats
) -> list[DevicePluginService]:
    """One DevicePlugin service per advertised resource. Raises AdvertiseError."""
    services = []
    policy = allocation_policy(config)
    for resource, devices in advertise(node, resource_options(config)).items():
        by_id = {d.id: d for d in devices}

        def preferrer(available, must, size, *, by_id=by_id):
            return preferred_allocation(available, must, size, by_id, node.links, policy=policy)

        services.append(
            DevicePluginService(
                resource,
                devices,
                allocator=_allocator(by_id, allocate_options(config, resource)),
                preferrer=preferrer,
                stats=stats,
            )
        )
    return services


class SelfMetrics:
    """Prometheus collector of the plugin's own state (`gpufleet_plugin_*`)."""

    def __init__(
        self, services: Sequence[DevicePluginService], runner: PluginRunner, stats: RpcStats
    ) -> None:
        self._services, self._runner, self._stats = services, runner, stats

    def collect(self):
        state = self._runner.state
        yield GaugeMetricFamily(
            "gpufleet_plugin_registered",
            "1 when every resource is registered with the kubelet.",
            value=int(state.registered),
        )
        yield CounterMetricFamily(
            "gpufleet_plugin_registrations",
            "Successful registrations with the kubelet.",
            value=state.registrations,
        )
        yield CounterMetricFamily(
            "gpufleet_plugin_registration_failures",
            "Failed registration attempts.",
            value=state.failures,
        )
        devices = GaugeMetricFamily(
            "gpufleet_plugin_devices",
            "Advertised devices by resource and health.",
            labels=["resource", "health"],
        )
        for service in self._services:
            counts = Counter(h.value for h in service.health.values())
            for health in Health:
                devices.add_metric([service.resource, health.value], counts.get(health.value, 0))
        yield devices
        yield CounterMetricFamily(
            "gpufleet_plugin_allocations",
            "Containers allocated devices.",
            value=self._stats.allocations,
        )
        yield CounterMetricFamily(
            "gpufleet_plugin_preferred_allocation_fallbacks",
            "Preferred allocations answered unaligned after an error.",
            value=self._stats.preferred_fallbacks,
        )
        calls = CounterMetricFamily(
            "gpufleet_plugin_rpc_requests", "RPCs served, by method.", labels=["method"]
        )
        seconds = CounterMetricFamily(
            "gpufleet_plugin_rpc_seconds", "Time spent in RPCs, by method.", labels=["method"]
        )
        errors = CounterMetricFamily(
            "gpufleet_plugin_rpc_errors", "RPCs answered with an error.", labels=["method"]
        )
        for method, count in sorted(self._stats.calls.items()):
            calls.add_metric([method], count)
            seconds.add_metric([method], self._stats.seconds.get(method, 0.0))
            errors.add_metric([method], self._stats.errors.get(method, 0))
        yield from (calls, seconds, errors)


@dataclass(slots=True)
class Plugin:
    """The running parts."""

    services: list[DevicePluginService]
    runner: PluginRunner
    health: HealthWatcher
    stats: RpcStats

    def stop(self) -> None:
        self.health.stop()
        self.runner.stop()


def start_plugin(
    settings: PluginSettings, config: PluginConfig, lib: Any, *, plugin_dir: Path
) -> Plugin:
    """Discover, build and start everything (NVML must be initialised)."""
    errors: Counter[str] = Counter()
    node = plugin_nvml.discover(lib, errors=errors)
    stats = RpcStats()
    try:
        services = build_services(node, config, stats=stats)
    except AdvertiseError as exc:
        raise StartupError(str(exc)) from None
    groups = health_groups(d for s in services for d in s.devices)

    def publish(health: Mapping[str, Health]) -> None:
        for service in services:
            service.set_health(health)

    try:
        policy = parse_health_policy(
            settings.dp_disable_healthchecks, settings.dp_enable_healthchecks
        )
    except ValueError as exc:
        raise StartupError(str(exc)) from None
    watcher = HealthWatcher(
        lib,
        groups,
        policy=policy,
        on_change=publish,
        recovery_seconds=settings.health_recovery_seconds or None,
    )
    kubelet = config.flags.plugin.kubelet_socket
    runner = PluginRunner(
        services, plugin_dir=plugin_dir, kubelet_socket=Path(kubelet) if kubelet else None
    )
    watcher.start()
    runner.start()
    log.info(
        "plugin started",
        extra={"fields": {"resources": {s.resource: len(s.health) for s in services}}},
    )
    return Plugin(services=services, runner=runner, health=watcher, stats=stats)


def _open(settings: PluginSettings, config: PluginConfig) -> NvmlBackend:
    try:
        backend = open_backend(settings.sim_fleet or None)
    except ValueError as exc:
        raise StartupError(f"--sim-fleet: {exc}") from None
    try:
        backend.lib.nvmlInit()
    except pynvml.NVMLError as exc:
        backend.close()
        raise StartupError(
            f"cannot initialise NVML: {exc}. Is the NVIDIA driver visible to the plugin? "
            "To try gpufleet without a GPU, use --sim-fleet 8xH100."
        ) from None
    return backend


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(PluginSettings, prog="gpufleet plugin", description=DESCRIPTION)
    try:
        settings = load_settings(PluginSettings, parser, argv)
    except SettingsError as exc:
        exit_on_settings_error(parser.prog, exc)
    setup_logging(debug=False, json_format=False)
    try:
        config, warnings = resolve_config(settings)
        for warning in warnings:
            log.warning("%s", warning)
        metrics = (
            parse_listen_address(settings.metrics_address) if settings.metrics_address else None
        )
    except (ConfigError, ValueError) as exc:
        log.error("%s", exc)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        backend = _open(settings, config)
    except StartupError as exc:
        log.error("%s", exc)
        if config.flags.fail_on_init_error:
            return 1
        # NVIDIA's failOnInitError=false: stay up advertising nothing.
        log.warning("failOnInitError is false: serving no devices")
        stop.wait()
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
        registry.register(SelfMetrics(plugin.services, plugin.runner, plugin.stats))
        host, port = metrics
        server, _thread = start_http_server(port, addr=host or "0.0.0.0", registry=registry)
    stop.wait()
    log.info("shutting down")
    if server:
        server.shutdown()
    plugin.stop()
    backend.close()
    return 0
