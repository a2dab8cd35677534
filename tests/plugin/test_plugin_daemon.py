"""The plugin against the fake kubelet, over real unix sockets, on simulated GPUs:
handshake, allocation under sharing modes, health propagation and recovery, kubelet
restarts, lost GPUs, startup refusals and self-metrics."""

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_for
from prometheus_client import CollectorRegistry

from gpufleet.kubelet.fake import FakeKubelet
from gpufleet.kubelet.fake_deviceplugins import AdmissionError
from gpufleet.nvml.sim.api import SimulatedNvml
from gpufleet.plugin.config import ConfigError
from gpufleet.plugin.daemon import Plugin, SelfMetrics, check_config, start_plugin
from gpufleet.plugin.settings import PluginSettings, resolve_config

FLEET = "4xH100+1xH100:mig=7x1g.10gb"


class Node:
    """A fake kubelet, simulated GPUs, and the real plugin registered with it."""

    def __init__(self, root: Path, config_text: str | None, **settings) -> None:
        self.kubelet = FakeKubelet(root / "k", rate_limit=None)
        self.kubelet.start()
        self.sim = SimulatedNvml(FLEET)
        self.sim.nvmlInit()
        socket = self.kubelet.device_plugins_dir / "kubelet.sock"
        if config_text is not None:
            (root / "config.yaml").write_text(config_text)
            settings["config_file"] = str(root / "config.yaml")
        self.settings = PluginSettings(kubelet_socket=str(socket), **settings)
        self.config, _ = resolve_config(self.settings)
        self.plugin: Plugin = self.start_plugin()

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

    def make(config_text: str | None = None, **settings) -> Node:
        nodes.append(Node(tmp_path, config_text, **settings))
        return nodes[-1]

    yield make
    for node in nodes:
        node.close()


def test_registers_every_resource_with_its_devices(make_node):
    node = make_node(mig_strategy="mixed")
    for resource in ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb"):
        assert node.plugins.wait_for_registrations(resource, 1, timeout_seconds=10)
    wait_for(lambda: node.plugins.capacity().get("nvidia.com/mig-1g.10gb") == 7, what="MIG")
    assert node.plugins.capacity()["nvidia.com/gpu"] == 4
    assert node.plugins.allocatable() == node.plugins.capacity()


def test_whole_gpus_are_allocated_with_nvidia_visible_devices(make_node):
    node = make_node(mig_strategy="mixed")
    node.plugins.wait_for_registrations("nvidia.com/gpu", 1, timeout_seconds=10)
    wait_for(lambda: node.plugins.capacity().get("nvidia.com/gpu") == 4, what="devices")
    ids = node.kubelet.admit(("default", "train", "uid-1"), "main", "nvidia.com/gpu", 2)
    assert len(ids) == 2 and all(i.startswith("GPU-") for i in ids)
    response = node.kubelet.allocation_response("default", "train", "main")
    assert sorted(response.envs["NVIDIA_VISIBLE_DEVICES"].split(",")) == sorted(ids)


TIME_SLICING = """
version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""


def test_time_sliced_replicas_and_request_size(make_node):
    node = make_node(TIME_SLICING)
    resource = "nvidia.com/gpu.shared"
    node.plugins.wait_for_registrations(resource, 1, timeout_seconds=10)
    wait_for(lambda: node.plugins.capacity().get(resource) == 5 * 4, what="replicas")
    ids = node.kubelet.admit(("ml", "serve-0", "uid-s0"), "main", resource, 1)
    assert "::" in ids[0]
    response = node.kubelet.allocation_response("ml", "serve-0", "main")
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == ids[0].split("::")[0]


def test_xid_marks_every_replica_of_the_gpu_then_recovers(make_node):
    node = make_node(TIME_SLICING, health_recovery_seconds=0.5)
    resource = "nvidia.com/gpu.shared"
    wait_for(lambda: node.plugins.capacity().get(resource) == 20, what="replicas")
    gpu0 = node.sim.devices[0].uuid
    # XID 8 is critical but needs no reset, so the GPU may recover after the quiet period
    # (XID 48, double-bit ECC, would keep it out until a reset: see RESET_REQUIRED_XIDS).
    node.sim.inject_xid(0, 8)
    wait_for(
        lambda: (
            {h for i, h in node.health(resource).items() if i.startswith(gpu0)} == {"Unhealthy"}
        ),
        timeout=5,
        what="all four replicas of GPU 0 unhealthy",
    )
    others = {h for i, h in node.health(resource).items() if not i.startswith(gpu0)}
    assert others == {"Healthy"}
    wait_for(
        lambda: set(node.health(resource).values()) == {"Healthy"},
        timeout=10,
        what="recovery after the quiet period",
    )


def test_ignored_xid_changes_nothing(make_node):
    node = make_node(mig_strategy="mixed")
    wait_for(lambda: node.plugins.capacity().get("nvidia.com/gpu") == 4, what="devices")
    node.sim.inject_xid(1, 13)  # in NVIDIA's default ignore list
    node.sim.inject_xid(2, 48)  # a critical one after it, to know the first was processed
    wait_for(
        lambda: node.health("nvidia.com/gpu")[node.sim.devices[2].uuid] == "Unhealthy",
        what="XID 48 processed",
    )
    assert node.health("nvidia.com/gpu")[node.sim.devices[1].uuid] == "Healthy"


def test_mig_slices_of_a_lost_gpu_go_unhealthy_together(make_node):
    node = make_node(mig_strategy="mixed")
    resource = "nvidia.com/mig-1g.10gb"
    wait_for(lambda: node.plugins.capacity().get(resource) == 7, what="MIG slices")
    node.sim.fail_gpu(4)
    wait_for(lambda: set(node.health(resource).values()) == {"Unhealthy"}, what="all 7 slices")


def test_lost_gpu_never_fails_allocation_of_healthy_ones(make_node):
    node = make_node(mig_strategy="mixed")
    wait_for(lambda: node.plugins.capacity().get("nvidia.com/gpu") == 4, what="devices")
    node.sim.fail_gpu(0)
    wait_for(lambda: node.plugins.allocatable().get("nvidia.com/gpu") == 3, what="GPU 0 out")
    for n in range(3):
        (gpu,) = node.kubelet.admit(("default", f"p{n}", f"uid-{n}"), "main", "nvidia.com/gpu", 1)
        assert gpu != node.sim.devices[0].uuid
    with pytest.raises(AdmissionError):  # no healthy GPU left: the kubelet's own refusal
        node.kubelet.admit(("default", "p9", "uid-9"), "main", "nvidia.com/gpu", 1)


def test_hundred_kubelet_restarts_give_hundred_registrations(make_node):
    node = make_node(mig_strategy="mixed")
    resources = ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb")
    for resource in resources:
        assert node.plugins.wait_for_registrations(resource, 1, timeout_seconds=10)
    for restart in range(1, 101):
        node.kubelet.restart()
        for resource in resources:
            assert node.plugins.wait_for_registrations(resource, restart + 1, timeout_seconds=10), (
                f"{resource} did not re-register after restart {restart}"
            )
    assert [node.plugins.registrations(r) for r in resources] == [101, 101]
    wait_for(
        lambda: node.plugins.capacity() == {"nvidia.com/gpu": 4, resources[1]: 7},
        what="devices after restarts",
    )


def test_plugin_started_before_the_kubelet_registers_when_it_comes(make_node):
    node = make_node(mig_strategy="mixed")
    assert node.plugins.wait_for_registrations("nvidia.com/gpu", 1, timeout_seconds=10)
    node.plugin.stop()
    node.kubelet.stop()
    node.start_plugin()  # while the kubelet is down: nothing to register with yet
    before = node.plugins.registrations("nvidia.com/gpu")
    node.kubelet.start()
    assert node.plugins.wait_for_registrations("nvidia.com/gpu", before + 1, timeout_seconds=10)
    wait_for(lambda: node.plugins.allocatable().get("nvidia.com/gpu") == 4, what="allocatable")
    assert node.plugins.registrations("nvidia.com/gpu") == before + 1


def test_deleting_the_plugin_socket_re_registers_it(make_node):
    node = make_node(mig_strategy="mixed")
    for resource in ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb"):
        assert node.plugins.wait_for_registrations(resource, 1, timeout_seconds=10)
    (node.kubelet.device_plugins_dir / "nvidia-gpu.sock").unlink()
    assert node.plugins.wait_for_registrations("nvidia.com/gpu", 2, timeout_seconds=10)
    wait_for(lambda: node.plugins.allocatable().get("nvidia.com/gpu") == 4, what="allocatable")
    assert node.plugins.registrations("nvidia.com/mig-1g.10gb") == 1


class _SlowInit:
    """The simulated NVML, but `nvmlInit` waits for `release`: a health watcher that has
    not reported by the time the plugin would register."""

    def __init__(self, sim: SimulatedNvml) -> None:
        self._sim = sim
        self.release = threading.Event()

    def nvmlInit(self) -> None:
        self.release.wait(10)
        self._sim.nvmlInit()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sim, name)


def test_devices_are_registered_unhealthy_until_health_is_known(make_node):
    node = make_node(mig_strategy="mixed")
    assert node.plugins.wait_for_registrations("nvidia.com/gpu", 1, timeout_seconds=10)
    node.plugin.stop()
    slow = _SlowInit(node.sim)
    node.start_plugin(slow, first_health_timeout_seconds=0.2)
    assert node.plugins.wait_for_registrations("nvidia.com/gpu", 2, timeout_seconds=10)
    wait_for(lambda: node.plugins.capacity().get("nvidia.com/gpu") == 4, what="re-advertised")
    assert set(node.health("nvidia.com/gpu").values()) == {"Unhealthy"}
    slow.release.set()
    wait_for(
        lambda: set(node.health("nvidia.com/gpu").values()) == {"Healthy"},
        what="Healthy once the watcher reports",
    )


def test_self_metrics_export_errors_by_kind(make_node):
    node = make_node(mig_strategy="mixed")
    assert node.plugins.wait_for_registrations("nvidia.com/gpu", 1, timeout_seconds=10)
    node.plugin.stop()
    node.sim.fail_gpu(0)  # lost before discovery: left out and counted
    plugin = node.start_plugin()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SelfMetrics(plugin))

    def errors(kind: str) -> float | None:
        return registry.get_sample_value("gpufleet_plugin_errors_total", {"kind": kind})

    assert errors("discovery_gpu_lost") == 1
    assert errors("kubelet_registration") == 0


CDI = """
version: v1
flags:
  plugin:
    deviceListStrategy: [envvar, cdi-cri]
"""


@pytest.mark.parametrize(
    ("file_text", "settings", "message"),
    [
        pytest.param(
            CDI,
            {},
            "{file}: flags.plugin.deviceListStrategy: cdi-cri needs CDI specs of kind "
            "k8s.device-plugin.nvidia.com/gpu, and none is in",
            id="file",
        ),
        pytest.param(
            None,
            {"device_list_strategy": "cdi-annotations"},
            "--device-list-strategy (DEVICE_LIST_STRATEGY): cdi-annotations needs CDI specs",
            id="flag",
        ),
        pytest.param(
            CDI,
            {"device_list_strategy": "volume-mounts"},
            None,
            id="flag-overrides-file",
        ),
    ],
)
def test_cdi_strategies_are_refused_naming_their_origin(tmp_path, file_text, settings, message):
    if file_text is not None:
        (tmp_path / "c.yaml").write_text(file_text)
        settings["config_file"] = str(tmp_path / "c.yaml")
    settings["cdi_spec_dirs"] = str(tmp_path / "cdi")  # none installed
    plugin_settings = PluginSettings(**settings)
    config, _ = resolve_config(plugin_settings)
    if message is None:
        check_config(plugin_settings, config)
        return
    with pytest.raises(ConfigError) as exc:
        check_config(plugin_settings, config)
    assert str(exc.value).startswith(message.format(file=tmp_path / "c.yaml"))


def test_cdi_strategies_work_where_a_spec_of_the_kind_is_installed(tmp_path):
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    (cdi / "other.yaml").write_text("cdiVersion: 0.6.0\nkind: nvidia.com/gpu\n")
    settings = PluginSettings(device_list_strategy="cdi-cri", cdi_spec_dirs=str(cdi))
    config, _ = resolve_config(settings)
    with pytest.raises(ConfigError, match="nvidia-ctk cdi generate --vendor"):
        check_config(settings, config)  # a spec, but of the toolkit's kind, not ours
    (cdi / "plugin.json").write_text(
        '{"cdiVersion": "0.6.0", "kind": "k8s.device-plugin.nvidia.com/gpu"}'
    )
    check_config(settings, config)


def test_cli_refuses_cdi_and_warns_imex_is_not_applied(tmp_path):
    (tmp_path / "c.yaml").write_text(CDI + "imex:\n  channelIDs: [0]\n  required: true\n")
    code = "import sys; from gpufleet.plugin.daemon import main; sys.exit(main(sys.argv[1:]))"
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "--config-file",
            str(tmp_path / "c.yaml"),
            "--cdi-spec-dirs",
            str(tmp_path / "cdi"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert "imex (channelIDs [0], required true) is not applied yet" in run.stderr
    assert "flags.plugin.deviceListStrategy: cdi-cri needs CDI specs" in run.stderr
