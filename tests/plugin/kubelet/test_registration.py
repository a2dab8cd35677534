"""The registration runner survives what kills naive plugins: its directory vanishing
under it, and kubelets coming and going while it backs off."""

import logging
import shutil
import time
from pathlib import Path

from helpers import wait_for

from gpufleet.lab.kubelet.kubelet import FakeKubelet
from gpufleet.lab.nvml.api import SimulatedNvml
from gpufleet.plugin.daemon import start_plugin
from gpufleet.plugin.kubelet.registration import socket_name
from gpufleet.plugin.settings import PluginSettings, resolve_config


def test_runner_survives_a_failed_re_serve_and_registers_when_it_can(tmp_path: Path):
    kubelet = FakeKubelet(tmp_path / "k", rate_limit=None)
    kubelet.start()
    sim = SimulatedNvml("2xH100")
    sim.nvmlInit()
    settings = PluginSettings(kubelet_socket=str(kubelet.device_plugins_dir / "kubelet.sock"))
    config, _ = resolve_config(settings)
    plugin = start_plugin(settings, config, sim, plugin_dir=kubelet.device_plugins_dir)
    try:
        resource = "nvidia.com/gpu"
        assert kubelet.device_plugins.wait_for_registrations(resource, 1, timeout_seconds=10)
        before = plugin.runner.state.failures
        # The directory vanishes: the plugin cannot serve its socket until it is back.
        kubelet.stop()
        shutil.rmtree(kubelet.device_plugins_dir)
        wait_for(lambda: plugin.runner.state.failures > before, what="a failed re-serve")
        assert plugin.runner._thread.is_alive(), "the registration thread must survive"
        kubelet.start()  # re-creates the directory and kubelet.sock
        assert kubelet.device_plugins.wait_for_registrations(resource, 2, timeout_seconds=15)
        assert (kubelet.device_plugins_dir / socket_name(resource)).exists()
    finally:
        plugin.stop()
        kubelet.stop()
        sim.close()


def test_a_restart_storm_ends_registered_with_the_last_kubelet(make_node):
    """Issue 16 §1.7: 50 restarts 20 ms apart once left the plugin unregistered for 15-25 s
    (a Register hung on a dead kubelet); the last kubelet must get every resource."""
    node = make_node(mig_strategy="mixed")
    resources = ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb")
    for resource in resources:
        assert node.plugins.wait_for_registrations(resource, 1, timeout_seconds=10)
    for _ in range(50):
        node.kubelet.restart()
        time.sleep(0.02)  # the storm's pace, not a wait for a condition
    wait_for(
        lambda: all(node.plugins.options(r) is not None for r in resources),
        timeout=10,
        what="every resource registered with the last kubelet",
    )
    wait_for(lambda: node.plugin.runner.state.registered, timeout=10, what="runner's view")


def test_a_kubelet_socket_made_anew_in_place_leaves_no_earlier_stream_open(make_node):
    """The kubelet re-creates kubelet.sock in the same life (serveWithRetry; Bottlerocket)
    and leaves the plugin's socket: the plugin registers again. Since 1.26 the kubelet keeps
    the earlier client and its ListAndWatch stream, so each such round left one more open;
    the fifth was refused (MAX_WATCHERS), and the kubelet, its stream failing, took the GPUs
    for disconnected. The plugin now serves again before it registers, as NVIDIA's does."""
    node = make_node()
    resource = "nvidia.com/gpu"
    assert node.plugins.wait_for_registrations(resource, 1, timeout_seconds=10)
    for round_ in range(2, 8):
        node.plugins.recreate_socket()
        assert node.plugins.wait_for_registrations(resource, round_, timeout_seconds=10)
    healthy_and_registered(node, resource)
    assert node.plugin.services[0].streams_open() == 1  # the current registration's only


def test_a_stream_the_kubelet_closes_gets_the_plugin_registered_again(make_node):
    """A kubelet closes the current client too when an earlier one's stream ends after the
    plugin registered again (runClient disconnects the resource): the plugin, its socket
    and kubelet.sock unchanged, never registered again, and the GPUs stayed unallocatable."""
    node = make_node()
    resource = "nvidia.com/gpu"
    assert node.plugins.wait_for_registrations(resource, 1, timeout_seconds=10)
    healthy_and_registered(node, resource)
    node.plugins.disconnect(resource)
    assert node.plugins.wait_for_registrations(resource, 2, timeout_seconds=10)
    healthy_and_registered(node, resource)


def healthy_and_registered(node, resource: str) -> None:
    wait_for(
        lambda: (
            node.plugins.allocatable().get(resource) == len(node.plugins.devices(resource))
            and node.plugins.allocatable()[resource] > 0
            and node.plugins.options(resource) is not None
            and node.plugin.runner.state.registered
        ),
        timeout=10,
        what="every GPU healthy and the plugin registered",
    )


def test_waiting_for_the_kubelet_is_one_line_then_one_when_it_comes(tmp_path: Path, caplog):
    """Retried every 0.1 s while the kubelet is away: logged as transitions, not per try."""
    kubelet = FakeKubelet(tmp_path / "k", rate_limit=None)
    kubelet.device_plugins_dir.mkdir(parents=True)
    sim = SimulatedNvml("2xH100")
    sim.nvmlInit()
    socket = kubelet.device_plugins_dir / "kubelet.sock"
    settings = PluginSettings(kubelet_socket=str(socket))
    config, _ = resolve_config(settings)
    caplog.set_level(logging.INFO, logger="gpufleet.plugin.kubelet.registration")
    plugin = start_plugin(settings, config, sim, plugin_dir=kubelet.device_plugins_dir)
    try:
        outage = plugin.runner._no_kubelet
        wait_for(lambda: outage.failures >= 5, what="five tries with no kubelet")
        kubelet.start()
        assert kubelet.device_plugins.wait_for_registrations(
            "nvidia.com/gpu", 1, timeout_seconds=10
        )
        wait_for(lambda: "works again" in caplog.text, what="the line saying it came")
        waiting = [r for r in caplog.records if "waiting for the kubelet socket" in r.getMessage()]
        assert [r.getMessage() for r in waiting] == [
            f"waiting for the kubelet socket {socket}: no socket there yet",
            f"waiting for the kubelet socket {socket}: works again, after "
            f"{waiting[-1].getMessage().rsplit(' ', 2)[1]} failures",
        ]
        assert int(waiting[-1].getMessage().rsplit(" ", 2)[1]) >= 5
    finally:
        plugin.stop()
        kubelet.stop()
        sim.close()


def test_the_runner_outlives_an_error_no_check_foresaw(tmp_path: Path, caplog):
    """Stat of the kubelet socket failing otherwise than absent (its directory a file for
    a moment): the thread died, and the plugin never registered again. Now a line, with
    its traceback once, and the next try registers."""
    kubelet = FakeKubelet(tmp_path / "k", rate_limit=None)
    kubelet.device_plugins_dir.mkdir(parents=True)
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    sim = SimulatedNvml("2xH100")
    sim.nvmlInit()
    settings = PluginSettings(kubelet_socket=str(blocker / "kubelet.sock"))
    config, _ = resolve_config(settings)
    plugin = start_plugin(settings, config, sim, plugin_dir=kubelet.device_plugins_dir)
    try:
        wait_for(lambda: "NotADirectoryError" in caplog.text, what="the failed stat")
        blocker.unlink()
        blocker.symlink_to(kubelet.device_plugins_dir)
        kubelet.start()
        assert kubelet.device_plugins.wait_for_registrations(
            "nvidia.com/gpu", 1, timeout_seconds=10
        )
        assert caplog.text.count("keeping the plugin registered: NotADirectoryError") == 1
    finally:
        plugin.stop()
        kubelet.stop()
        sim.close()
