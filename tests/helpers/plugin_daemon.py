"""The real plugin daemon on a fake kubelet and simulated GPUs, over real unix sockets:
the `Node` the daemon's end-to-end tests drive, and its `make_node` fixture."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.lab.kubelet.kubelet import FakeKubelet
from gpufleet.lab.nvml.api import SimulatedNvml
from gpufleet.plugin.daemon import Plugin, start_plugin
from gpufleet.plugin.settings import PluginSettings, resolve_config

FLEET = "4xH100+1xH100:mig=7x1g.10gb"


class Node:
    """A fake kubelet, simulated GPUs, and the real plugin registered with it."""

    def __init__(
        self,
        root: Path,
        config_text: str | None,
        *,
        plugin_kwargs: dict[str, Any] | None = None,
        fleet: str = FLEET,
        **settings,
    ) -> None:
        self.kubelet = FakeKubelet(root / "k", rate_limit=None)
        self.kubelet.start()
        self.sim = SimulatedNvml(fleet)
        self.sim.nvmlInit()
        socket = self.kubelet.device_plugins_dir / "kubelet.sock"
        if config_text is not None:
            (root / "config.yaml").write_text(config_text)
            settings["config_file"] = str(root / "config.yaml")
        self.settings = PluginSettings(kubelet_socket=str(socket), **settings)
        self.config, _ = resolve_config(self.settings)
        self.plugin: Plugin = self.start_plugin(**(plugin_kwargs or {}))

    def start_plugin(self, lib: Any = None, **kwargs) -> Plugin:
        """A new plugin process, as after a restart (stop the old one first)."""
        self.plugin = start_plugin(
            self.settings,
            self.config,
            lib or self.sim,
            plugin_dir=self.kubelet.device_plugins_dir,
            **kwargs,
        )
        return self.plugin

    @property
    def plugins(self):
        return self.kubelet.device_plugins

    def health(self, resource: str) -> dict[str, str]:
        return {d.id: d.health for d in self.plugins.devices(resource)}

    def close(self) -> None:
        self.plugin.stop()
        self.kubelet.stop()
        self.sim.close()


@pytest.fixture
def make_node(tmp_path: Path) -> Iterator:
    nodes: list[Node] = []

    def make(config_text: str | None = None, *, fleet: str = FLEET, **settings) -> Node:
        nodes.append(Node(tmp_path, config_text, fleet=fleet, **settings))
        return nodes[-1]

    yield make
    for node in nodes:
        node.close()
