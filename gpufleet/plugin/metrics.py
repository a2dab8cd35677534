"""The plugin's own metrics (`gpufleet_plugin_*`), read from the running parts at scrape
time (counters and small maps, never NVML or the kubelet), and the port that serves them."""

import asyncio
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily

from gpufleet.core.server_stats import ServerStats
from gpufleet.http.metrics import exposition, http_families
from gpufleet.http.server import Response, RunningServer, new_app, plain, start_server
from gpufleet.http.wire import Request
from gpufleet.logs import throttle_accept_errors
from gpufleet.plugin.core.model import Health
from gpufleet.plugin.kubelet.registration import PluginRunner
from gpufleet.plugin.kubelet.server import DevicePluginService, RpcStats
from gpufleet.plugin.nvml.health_watch import HealthWatcher

if TYPE_CHECKING:  # loaded only with --web-config-file (YAML, bcrypt, TLS setup)
    from gpufleet.http.webconfig import WebConfig

# dcgm-exporter's read timeout, as the exporter's port: an idle connection is closed after it.
READ_TIMEOUT_SECONDS = 10.0


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


class _HttpMetrics:
    """The metrics port's own counters, `gpufleet_plugin_http_*`."""

    def __init__(self, stats: ServerStats) -> None:
        self._stats = stats

    def collect(self):
        yield from http_families("gpufleet_plugin_", self._stats)


class MetricsServer:
    """The self-metrics port: `/metrics` and `/health` on the server the exporter uses
    (`gpufleet.http`: web config, 10 s read and write timeouts, 404 elsewhere), run on an
    event loop thread of its own since the rest of the plugin is threads, not asyncio.

    A scrape renders the registry: the plugin's numbers are a few dozen counters read
    from memory, never NVML or the kubelet."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        host: str | None,
        port: int,
        web_config: "WebConfig | None" = None,
        read_timeout_seconds: float = READ_TIMEOUT_SECONDS,
    ) -> None:
        self._registry = registry
        self._stats = ServerStats()
        registry.register(_HttpMetrics(self._stats))
        self._host, self._port = host, port
        self._web_config = web_config
        self._read_timeout_seconds = read_timeout_seconds
        self._loop = asyncio.new_event_loop()
        throttle_accept_errors(self._loop)
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="plugin-metrics", daemon=True
        )
        self._server: RunningServer | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.port

    def start(self) -> None:
        """Listen; raises OSError naming the address when it cannot."""
        self._thread.start()
        try:
            self._server = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        except OSError:
            self._stop_loop()
            raise

    def stop(self) -> None:
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.close(), self._loop).result(30)
            self._server = None
        self._stop_loop()

    def _stop_loop(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    async def _start(self) -> RunningServer:
        async def metrics(request: Request) -> Response:
            return exposition(self._registry)

        async def health(request: Request) -> Response:
            return plain(200, "OK")

        app = new_app(
            {"/metrics": metrics, "/health": health},
            web_config=self._web_config,
            stats=self._stats,
        )
        ssl_context = self._web_config.ssl_context() if self._web_config else None
        return await start_server(
            app,
            host=self._host,
            port=self._port,
            ssl_context=ssl_context,
            read_timeout_seconds=self._read_timeout_seconds,
        )
