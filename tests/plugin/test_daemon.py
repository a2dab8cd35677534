"""The plugin against the fake kubelet, over real unix sockets, on simulated GPUs:
handshake, allocation under sharing modes, health propagation and recovery, kubelet
restarts, lost GPUs, startup refusals, self-metrics, and the CDI specs and IMEX channels
behind what Allocate names."""

import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_for
from helpers.plugin_daemon import FLEET, Node
from prometheus_client import CollectorRegistry

from gpufleet.lab.kubelet.deviceplugins import AdmissionError
from gpufleet.lab.nvml.api import SimulatedNvml
from gpufleet.plugin.cdi_setup import StartupError, check_config
from gpufleet.plugin.core.config import ConfigError
from gpufleet.plugin.daemon import _reload, reload_plugin, start_plugin
from gpufleet.plugin.metrics import SelfMetrics
from gpufleet.plugin.nvml.discovery import discover
from gpufleet.plugin.settings import PluginSettings, resolve_config


def test_registers_every_resource_with_its_devices(make_node):
    node = make_node(mig_strategy="mixed")
    for resource in ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb"):
        assert node.plugins.wait_for_registrations(resource, 1, timeout_seconds=10)
    # A registration is counted before its ListAndWatch stream delivers the devices.
    expected = {"nvidia.com/gpu": 4, "nvidia.com/mig-1g.10gb": 7}
    wait_for(lambda: node.plugins.capacity() == expected, what="every resource's devices")
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
            "{file}: flags.plugin.deviceListStrategy: cdi-cri needs CDI specs, and "
            "--cdi-spec-dirs (GPUFLEET_CDI_SPEC_DIRS) names no directory",
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
def test_cdi_strategies_without_a_spec_directory_are_refused_naming_their_origin(
    tmp_path, file_text, settings, message
):
    if file_text is not None:
        (tmp_path / "c.yaml").write_text(file_text)
        settings["config_file"] = str(tmp_path / "c.yaml")
    settings["cdi_spec_dirs"] = ""
    plugin_settings = PluginSettings(**settings)
    config, _ = resolve_config(plugin_settings)
    if message is None:
        check_config(plugin_settings, config)
        return
    with pytest.raises(ConfigError) as exc:
        check_config(plugin_settings, config)
    assert str(exc.value).startswith(message.format(file=tmp_path / "c.yaml"))


OUR_GPU_SPEC = "gpufleet-k8s.device-plugin.nvidia.com-gpu.json"


def cdi_names(spec_path: Path) -> set[str]:
    spec = json.loads(spec_path.read_text())
    return {f"{spec['kind']}={d['name']}" for d in spec["devices"]}


def test_the_plugin_writes_the_cdi_spec_behind_every_name_allocate_gives(make_node, tmp_path):
    etc, run = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    node = make_node(
        device_list_strategy="cdi-cri",
        mig_strategy="mixed",
        cdi_spec_dirs=f"{etc},{run}",
    )
    defined = cdi_names(etc / OUR_GPU_SPEC)
    assert len(defined) == 4 + 7  # one per GPU and MIG device
    assert not run.exists()
    for resource, n, pod in (("nvidia.com/gpu", 2, "a"), ("nvidia.com/mig-1g.10gb", 3, "b")):
        wait_for(lambda r=resource: node.plugins.allocatable().get(r), what=resource)
        node.kubelet.admit(("default", pod, f"uid-{pod}"), "main", resource, n)
        response = node.kubelet.allocation_response("default", pod, "main")
        names = [d.name for d in response.cdi_devices]
        assert len(names) == n and set(names) <= defined
        assert "NVIDIA_VISIBLE_DEVICES" not in response.envs


def test_mig_capability_devices_reach_the_spec_and_device_specs(make_node, tmp_path):
    sim = SimulatedNvml(FLEET)
    sim.nvmlInit()
    (gpu,) = [g for g in discover(sim).gpus if g.mig_enabled]
    sim.close()
    lines = [f"gpu{gpu.minor}/gi{m.gi_id}/access {100 + 2 * m.index}" for m in gpu.migs]
    lines += [
        f"gpu{gpu.minor}/gi{m.gi_id}/ci{m.ci_id}/access {101 + 2 * m.index}" for m in gpu.migs
    ]
    (tmp_path / "mig-minors").write_text("config 1\nmonitor 2\n" + "\n".join(lines) + "\n")
    node = make_node(
        mig_strategy="mixed",
        device_list_strategy="envvar,cdi-cri",
        device_id_strategy="index",
        pass_device_specs=True,
        cdi_spec_dirs=str(tmp_path / "cdi"),
        plugin_kwargs={"mig_minors_path": tmp_path / "mig-minors"},
    )
    spec = json.loads((tmp_path / "cdi" / OUR_GPU_SPEC).read_text())
    first = next(d for d in spec["devices"] if d["name"] == f"{gpu.index}:0")
    assert [n["path"] for n in first["containerEdits"]["deviceNodes"]] == [
        f"/dev/nvidia{gpu.minor}",
        "/dev/nvidia-caps/nvidia-cap100",
        "/dev/nvidia-caps/nvidia-cap101",
    ]
    resource = "nvidia.com/mig-1g.10gb"
    wait_for(lambda: node.plugins.allocatable().get(resource) == 7, what="MIG devices")
    node.kubelet.admit(("default", "m", "uid-m"), "main", resource, 1)
    response = node.kubelet.allocation_response("default", "m", "main")
    (visible,) = response.envs["NVIDIA_VISIBLE_DEVICES"].split(",")
    j = int(visible.split(":")[1])
    caps = {d.container_path for d in response.devices if "nvidia-caps" in d.container_path}
    assert caps == {
        f"/dev/nvidia-caps/nvidia-cap{100 + 2 * j}",
        f"/dev/nvidia-caps/nvidia-cap{101 + 2 * j}",
    }


def test_an_operator_installed_spec_is_kept_and_ours_not_written(make_node, tmp_path):
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    theirs = cdi / "k8s.device-plugin.nvidia.com-gpu.yaml"
    theirs.write_text("cdiVersion: 0.5.0\nkind: k8s.device-plugin.nvidia.com/gpu\ndevices: []\n")
    (cdi / OUR_GPU_SPEC).write_text("{}")  # stale, from an earlier run
    make_node(device_list_strategy="cdi-annotations", cdi_spec_dirs=str(cdi))
    assert sorted(p.name for p in cdi.iterdir()) == [theirs.name]


def imex_root(tmp_path: Path) -> Path:
    """A container driver root whose /dev has IMEX channel 0 (a link to /dev/null)."""
    root = tmp_path / "driver-root"
    (root / "dev/nvidia-caps-imex-channels").mkdir(parents=True)
    os.symlink("/dev/null", root / "dev/nvidia-caps-imex-channels/channel0")
    return root


IMEX = """
version: v1
imex:
  channelIDs: [0]
  required: true
"""


def test_imex_channel_reaches_the_container(make_node, tmp_path):
    node = make_node(
        IMEX,
        container_driver_root=str(imex_root(tmp_path)),
        pass_device_specs=True,
        device_list_strategy="envvar,cdi-cri",
        cdi_spec_dirs=str(tmp_path / "cdi"),
    )
    wait_for(lambda: node.plugins.allocatable().get("nvidia.com/gpu"), what="GPUs")
    node.kubelet.admit(("default", "x", "uid-x"), "main", "nvidia.com/gpu", 1)
    response = node.kubelet.allocation_response("default", "x", "main")
    assert response.envs["NVIDIA_IMEX_CHANNELS"] == "0"
    channel = "/dev/nvidia-caps-imex-channels/channel0"
    assert channel in {d.container_path for d in response.devices}
    assert "k8s.device-plugin.nvidia.com/imex-channel=0" in {d.name for d in response.cdi_devices}
    imex_spec = tmp_path / "cdi" / "gpufleet-k8s.device-plugin.nvidia.com-imex-channel.json"
    assert cdi_names(imex_spec) == {"k8s.device-plugin.nvidia.com/imex-channel=0"}


def test_cli_refuses_a_required_imex_channel_that_is_missing(tmp_path):
    (tmp_path / "c.yaml").write_text(IMEX)
    code = "import sys; from gpufleet.plugin.daemon import main; sys.exit(main(sys.argv[1:]))"
    run = subprocess.run(
        [
            *(sys.executable, "-c", code),
            *("--config-file", str(tmp_path / "c.yaml")),
            *("--sim-fleet", "1xH100", "--kubelet-socket", "", "--metrics-address", ""),
            *("--container-driver-root", str(tmp_path / "no-driver-root")),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert "imex.required: requested IMEX channel channel0 does not exist" in run.stderr


def test_a_plugin_directory_it_cannot_serve_in_is_a_startup_error(tmp_path):
    sim = SimulatedNvml(FLEET)
    sim.nvmlInit()
    settings = PluginSettings(kubelet_socket="")
    config, _ = resolve_config(settings)
    missing = tmp_path / "no-such-dir"
    try:
        with pytest.raises(
            StartupError,
            match=f"cannot serve the plugin sockets in {missing}: no such directory",
        ):
            start_plugin(settings, config, sim, plugin_dir=missing)
    finally:
        sim.close()


def test_a_plugin_directory_too_long_for_a_socket_is_a_startup_error_that_says_so(tmp_path):
    sim = SimulatedNvml(FLEET)
    sim.nvmlInit()
    settings = PluginSettings(kubelet_socket="")
    config, _ = resolve_config(settings)
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    try:
        with pytest.raises(StartupError, match="longer than 107 bytes, the unix socket limit"):
            start_plugin(settings, config, sim, plugin_dir=deep)
    finally:
        sim.close()


def test_a_mig_enabled_gpu_without_instances_is_skipped_with_a_warning_under_mixed(
    make_node, caplog
):
    """Issue 16 §1.4: it stopped startup (zero GPUs on the node); NVIDIA warns and serves
    the other GPUs."""
    with caplog.at_level(logging.WARNING, logger="gpufleet.plugin.daemon"):
        node = make_node(fleet="2xH100+1xH100:mig=empty", mig_strategy="mixed")
    assert node.plugins.wait_for_registrations("nvidia.com/gpu", 1, timeout_seconds=10)
    wait_for(lambda: node.plugins.allocatable() == {"nvidia.com/gpu": 2}, what="2 GPUs")
    assert [r.getMessage() for r in caplog.records if "no MIG devices" in r.getMessage()] == [
        f"device 2 ({node.sim.nvmlDeviceGetUUID(node.sim.nvmlDeviceGetHandleByIndex(2))}) "
        "has no MIG devices configured: it is not advertised"
    ]


MPS = """
version: v1
sharing:
  mps:
    resources: [{name: nvidia.com/gpu, replicas: 2}]
"""
# A stand-in for the driver's nvidia-cuda-mps-control: a real executable that records what
# it was asked and answers only while the "daemon" (a marker file) is up.
FAKE_MPS_CONTROL = """#!/bin/sh
query=$(cat)
echo "$CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY $query" >> {calls}
if [ -e {up} ]; then echo 100.0; exit 0; fi
echo "Cannot find MPS control daemon process" >&2
exit 1
"""


def test_an_mps_resource_is_registered_only_once_its_control_daemon_answers(
    make_node, tmp_path, monkeypatch, caplog
):
    """Issue 16 §1.6: MPS resources were registered whether or not a daemon served their
    pipe directory; NVIDIA's plugin asks nvidia-cuda-mps-control first."""
    bin_dir, calls, up = tmp_path / "bin", tmp_path / "calls", tmp_path / "daemon-up"
    bin_dir.mkdir()
    control = bin_dir / "nvidia-cuda-mps-control"
    control.write_text(FAKE_MPS_CONTROL.format(calls=calls, up=up))
    control.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    resource = "nvidia.com/gpu"

    def waits() -> list[str]:
        return [r.getMessage() for r in caplog.records if "not registering" in r.getMessage()]

    with caplog.at_level(logging.INFO, logger="gpufleet.plugin.kubelet.registration"):
        node = make_node(MPS, fleet="2xH100", mps_root=str(tmp_path / "mps"))
        wait_for(lambda: calls.exists() and len(calls.read_text().splitlines()) >= 2)
        assert node.plugins.registrations(resource) == 0
        up.touch()
        assert node.plugins.wait_for_registrations(resource, 1, timeout_seconds=20)
    wait_for(lambda: len(node.plugins.devices(resource)) == 4, what="2 replicas of 2 GPUs")
    assert waits() == [
        "not registering nvidia.com/gpu until its MPS control daemon answers "
        "(nvidia-cuda-mps-control (/mps/nvidia.com/gpu/pipe) exited 1: Cannot find MPS "
        "control daemon process); retrying"
    ], "one line while it waits, not one per retry"
    assert set(calls.read_text().splitlines()) == {
        "/mps/nvidia.com/gpu/pipe /mps/nvidia.com/gpu/log get_default_active_thread_percentage"
    }


def reload(node, config_text: str | None = None) -> None:
    """What SIGHUP runs: the config file (re)written, read and applied in process."""
    if config_text is not None:
        Path(node.settings.config_file).write_text(config_text)
    config, _ = resolve_config(node.settings)
    reload_plugin(node.plugin, node.settings, config, node.sim)


def test_a_reload_forgets_no_gpus_health_and_no_error_count(make_node):
    """The reload replaced the health watcher with one whose GPUs all started Healthy: a
    GPU awaiting a reset (XID 48) was advertised Healthy again at every SIGHUP, which
    NVIDIA's config manager sends at each config label change; error counts fell to 0."""
    node = make_node("version: v1\n", fleet="4xH100", health_recovery_seconds=0.5)
    resource = "nvidia.com/gpu"
    wait_for(lambda: node.plugins.capacity().get(resource) == 4, what="devices")
    gpu0, gpu1 = (d.uuid for d in node.sim.devices[:2])
    node.sim.inject_xid(0, 48)
    wait_for(lambda: node.health(resource)[gpu0] == "Unhealthy", what="GPU 0 down")
    node.sim.fail_gpu(3)  # lost at the reload's discovery: counted
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SelfMetrics(node.plugin))
    for reloads in (1, 2):
        reload(node)
        lost = {"kind": "discovery_gpu_lost"}
        assert registry.get_sample_value("gpufleet_plugin_errors_total", lost) == reloads
    node.sim.inject_xid(1, 8)  # reported after the reloads: health flows on
    wait_for(lambda: node.health(resource).get(gpu1) == "Unhealthy", what="GPU 1 down")
    assert node.health(resource)[gpu0] == "Unhealthy"


def test_a_reload_that_cannot_serve_leaves_the_old_resources_watched(make_node, tmp_path):
    """A new resource whose socket path is too long: the reload is refused, and the
    resource still served goes on hearing of its GPUs' XIDs (the new watcher told only the
    services that were never served)."""
    sockets = tmp_path / "k" / "device-plugins"
    # nvidia-gpu.sock fits in 107 bytes; nvidia-gpu.shared.sock does not.
    fill = 107 - len(str(sockets / "x" / "nvidia-gpu.sock")) - 3
    node_root = tmp_path / ("x" * fill)
    node = Node(node_root, "version: v1\n", fleet="2xH100")
    try:
        resource = "nvidia.com/gpu"
        wait_for(lambda: node.plugins.capacity().get(resource) == 2, what="devices")
        with pytest.raises(StartupError, match="longer than 107 bytes"):
            reload(node, TIME_SLICING)
        assert [s.resource for s in node.plugin.services] == [resource]
        node.sim.inject_xid(0, 48)
        gpu0 = node.sim.devices[0].uuid
        wait_for(lambda: node.health(resource).get(gpu0) == "Unhealthy", what="GPU 0 down")
    finally:
        node.close()


def test_a_reload_failing_on_nvml_is_one_line_and_the_plugin_serves_on(make_node, caplog):
    """NVML answering errors mid-discovery (its "Unknown error" after a systemd
    daemon-reload): the error escaped the SIGHUP handler and killed the main thread,
    leaving a process that ignored SIGTERM."""
    node = make_node("version: v1\n", fleet="2xH100")
    wait_for(lambda: node.plugins.capacity().get("nvidia.com/gpu") == 2, what="devices")
    node.sim.set_not_supported("nvmlDeviceGetCount")
    _reload(node.settings, node.plugin, node.sim)
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert line == (
        "config reload failed, still serving the previous config: NVMLError_NotSupported: "
        "Not Supported"
    )
    node.sim.clear_injections()
    node.sim.inject_xid(1, 48)
    gpu1 = node.sim.devices[1].uuid
    wait_for(lambda: node.health("nvidia.com/gpu").get(gpu1) == "Unhealthy", what="down")
