"""One GPU node of the lab, running what a real one runs: the device plugin registered with
the node's kubelet and the exporter attributing its pods, both on the node's simulated NVML.

The plugin is the real `start_plugin` over real unix sockets; its self-metrics are served
on a port of their own by the server `gpufleet plugin --metrics-address` runs (`/metrics`,
`/health`). The exporter is the real `serve`. A bad setting or a busy port raises before
anything says "running".
"""

import asyncio
import logging
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from gpufleet.core.listen import parse_listen_address
from gpufleet.exporter.daemon import Prepared, serve
from gpufleet.lab.node import SimNode
from gpufleet.lab.prometheus import LabProcessError
from gpufleet.plugin.daemon import Plugin, StartupError, start_plugin
from gpufleet.plugin.metrics import MetricsServer, SelfMetrics
from gpufleet.plugin.settings import PluginSettings, resolve_config

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RunningPlugin:
    plugin: Plugin
    server: MetricsServer  # its self-metrics, /metrics and /health

    @property
    def port(self) -> int:
        return self.server.port

    async def stop(self) -> None:
        await asyncio.to_thread(self.server.stop)
        await asyncio.to_thread(self.plugin.stop)


async def start_node_plugin(node: SimNode, address: str) -> RunningPlugin:
    """The device plugin on `node` (NVML initialised), registered with its fake kubelet,
    self-metrics on `address`. MIG slices are advertised as their own resources (`mixed`),
    as the node's MIG pods ask for them. Raises OSError naming the address when it is taken,
    LabProcessError when the plugin cannot start."""
    assert node.kubelet is not None
    settings = PluginSettings(
        kubelet_socket=str(node.kubelet.device_plugins_dir / "kubelet.sock"),
        mig_strategy="mixed",
        node_labels_file="",  # no Node Feature Discovery here
        metrics_address=address,
    )
    config, _ = resolve_config(settings)
    host, port = parse_listen_address(address)
    registry = CollectorRegistry(auto_describe=False)
    server = MetricsServer(registry, host=host, port=port)
    try:
        await asyncio.to_thread(server.start)
    except OSError as err:
        raise OSError(f"--plugin-address: {err.strerror}") from None
    try:
        plugin = await asyncio.to_thread(
            start_plugin, settings, config, node.sim, plugin_dir=node.kubelet.device_plugins_dir
        )
    except StartupError as err:
        await asyncio.to_thread(server.stop)
        raise LabProcessError(f"device plugin on {node.layout.node_name}: {err}") from None
    registry.register(SelfMetrics(plugin))
    return RunningPlugin(plugin=plugin, server=server)


async def run_exporter(
    node: SimNode, prepared: Prepared, *, stop: asyncio.Event, listening: asyncio.Future
) -> bool:
    """The exporter on `node` until `stop`; `listening` gets its port once it listens (a
    startup error is raised instead, before it is set). True when NVML may be shut down."""

    def on_listening(port: int) -> None:
        listening.set_result(port)

    quiescent = await serve(prepared, node.sim, stop=stop, on_listening=on_listening)
    if not quiescent:  # a collection is still inside the simulator: leave NVML be
        log.warning("exporter on %s stopped mid-collection", node.layout.node_name)
    return quiescent
