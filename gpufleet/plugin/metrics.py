"""The plugin's own metrics (`gpufleet_plugin_*`), read from the running parts at scrape
time: counters and small maps, never NVML or the kubelet."""

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gpufleet.plugin.core.model import Health
from gpufleet.plugin.kubelet.registration import PluginRunner
from gpufleet.plugin.kubelet.server import DevicePluginService, RpcStats
from gpufleet.plugin.nvml.health_watch import HealthWatcher


class Running(Protocol):
    """The running parts the metrics read (the daemon's `Plugin`); a config reload swaps
    its services and health watcher, so they are read at each scrape."""

    services: Sequence[DevicePluginService]
    runner: PluginRunner
    health: HealthWatcher
    stats: RpcStats
    discovery_errors: Mapping[str, int]


class SelfMetrics:
    """Prometheus collector of the plugin's own state (`gpufleet_plugin_*`)."""

    def __init__(self, plugin: Running) -> None:
        self._plugin = plugin

    def collect(self):
        state = self._plugin.runner.state
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
        for service in self._plugin.services:
            counts = Counter(h.value for h in service.health.values())
            for health in Health:
                devices.add_metric([service.resource, health.value], counts.get(health.value, 0))
        yield devices
        yield CounterMetricFamily(
            "gpufleet_plugin_allocations",
            "Containers allocated devices.",
            value=self._plugin.stats.allocations,
        )
        yield CounterMetricFamily(
            "gpufleet_plugin_preferred_allocation_fallbacks",
            "Preferred allocations answered unaligned after an error.",
            value=self._plugin.stats.preferred_fallbacks,
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
        for method, count in sorted(self._plugin.stats.calls.items()):
            calls.add_metric([method], count)
            seconds.add_metric([method], self._plugin.stats.seconds.get(method, 0.0))
            errors.add_metric([method], self._plugin.stats.errors.get(method, 0))
        yield from (calls, seconds, errors)
        yield self._errors()

    def _errors(self) -> CounterMetricFamily:
        # Kinds are prefixed by where they happen: the watcher's `registration` (XID
        # events) is not the kubelet's.
        kinds = {f"discovery_{k}": n for k, n in self._plugin.discovery_errors.items()}
        kinds |= {f"health_{k}": n for k, n in self._plugin.health.errors.items()}
        kinds["kubelet_registration"] = self._plugin.runner.state.failures
        family = CounterMetricFamily(
            "gpufleet_plugin_errors",
            "Failures by kind: NVML discovery, health watching, kubelet registration.",
            labels=["kind"],
        )
        for kind, count in sorted(kinds.items()):
            family.add_metric([kind], count)
        return family
