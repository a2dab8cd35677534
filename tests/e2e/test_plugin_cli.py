"""`gpufleet plugin` as users run it: help, bad configs, SIGTERM with sockets cleaned up."""

import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
from helpers import free_port, wait_for
from helpers.kube import api_client
from kubernetes import client

from gpufleet.lab.kubeapi.server import FakeApiServer
from gpufleet.lab.kubelet.kubelet import FakeKubelet

GPUFLEET = [sys.executable, "-m", "gpufleet.cli", "plugin"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*GPUFLEET, *args], capture_output=True, text=True, timeout=60, env={**ENV, **(env or {})}
    )


def test_version_exits_0():
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("gpufleet plugin ")


def test_help_names_nvidia_flags_and_env_vars():
    result = run("--help")
    assert result.returncode == 0
    for needle in ("--mig-strategy", "MIG_STRATEGY", "--config-file", "--device-list-strategy"):
        assert needle in result.stdout


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("version: v2\n", "version"),
        (
            "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
            "      replica: 4\n",
            "sharing.timeSlicing.resources[0].replica",
        ),
        ("version: v1\nflags:\n  migStrategy: sometimes\n", "flags.migStrategy"),
    ],
    ids=["unknown version", "misspelt key leaves replicas missing", "bad value"],
)
def test_bad_config_names_the_file_and_key(tmp_path: Path, config: str, message: str):
    path = tmp_path / "config.yaml"
    path.write_text(config)
    result = run("--sim-fleet", "2xH100", "--config-file", str(path))
    assert result.returncode == 1, result.stderr
    assert str(path) in result.stderr and message in result.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MIG_STRATEGY": "sometimes"}, "MIG_STRATEGY"),
    ],
    ids=["bad env choice"],
)
def test_bad_env_names_the_variable(tmp_path: Path, env: dict, message: str):
    result = run(
        "--sim-fleet", "2xH100", "--kubelet-socket", str(tmp_path / "kubelet.sock"), env=env
    )
    assert result.returncode != 0
    assert message in result.stderr


def test_nvidia_keys_and_unknown_items_warn_and_serve(tmp_path: Path):
    """Issue 16: a v0.20 key, a key from another version and a malformed health-check item
    used to exit 1 (zero GPUs on the node); now each is one warning and the plugin serves."""
    path = tmp_path / "config.yaml"
    path.write_text(
        "version: v1\nflags:\n  plugin:\n    sharedDevicesAllocationPolicy: packed\n"
        "    someFutureKey: true\n"
    )
    proc = subprocess.Popen(
        [
            *GPUFLEET,
            "--sim-fleet",
            "2xH100",
            "--config-file",
            str(path),
            "--kubelet-socket",
            str(tmp_path / "kubelet.sock"),
            "--metrics-address",
            "",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={**ENV, "DP_DISABLE_HEALTHCHECKS": "48,xid48"},
    )
    try:
        wait_for(lambda: (tmp_path / "nvidia-gpu.sock").exists(), timeout=20, what="socket")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert f"{path}: flags.plugin.someFutureKey: unknown key, ignored" in err
    assert "DP_DISABLE_HEALTHCHECKS: ignoring 'xid48'" in err
    assert "flags.plugin.sharedDevicesAllocationPolicy" not in err


def test_a_taken_metrics_port_costs_the_metrics_not_the_gpus(tmp_path: Path):
    """NVIDIA's plugin opens no port; its chart may run it on the host network. A port
    already taken there made the plugin exit 1 after it had registered: the node lost its
    GPUs for the sake of the self-metrics."""
    log = tmp_path / "stderr"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.Popen(
            [
                *GPUFLEET,
                "--sim-fleet",
                "1xH100",
                "--kubelet-socket",
                str(tmp_path / "kubelet.sock"),
                "--metrics-address",
                f"127.0.0.1:{port}",
            ],
            stderr=log.open("w"),
            env=ENV,
        )
        try:
            wait_for(lambda: "--metrics-address" in log.read_text(), timeout=20, what="the bind")
            assert proc.poll() is None and (tmp_path / "nvidia-gpu.sock").exists()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)
    err = log.read_text()
    assert proc.returncode == 0, err
    assert f"--metrics-address: cannot listen on 127.0.0.1:{port}" in err
    assert "serving the kubelet without metrics" in err and "Traceback" not in err


def test_publishes_gfd_labels_to_nfd_and_the_node(tmp_path: Path):
    """Issue 16 §3: GFD's labels from the plugin's own discovery, as a features.d file and
    on the Node object (the lab's fake API server, through the official client)."""
    features = tmp_path / "features.d" / "gpufleet-plugin"
    features.parent.mkdir()
    with FakeApiServer() as server:
        core = client.CoreV1Api(api_client(server.url))
        core.create_node({"metadata": {"name": "gpu-node-0"}})
        proc = subprocess.Popen(
            [
                *GPUFLEET,
                "--sim-fleet",
                "2xH100",
                "--kubelet-socket",
                str(tmp_path / "kubelet.sock"),
                "--metrics-address",
                "",
                "--node-labels-file",
                str(features),
                "--node-labels-api",
                "--node-name",
                "gpu-node-0",
                "--kube-url",
                server.url,
            ],
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        try:
            wait_for(lambda: features.exists(), timeout=20, what="the NFD feature file")
            wait_for(
                lambda: (
                    "nvidia.com/gpu.product" in (core.read_node("gpu-node-0").metadata.labels or {})
                ),
                timeout=20,
                what="labels on the Node",
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=20)
        on_node = core.read_node("gpu-node-0").metadata.labels
    assert proc.returncode == 0, err
    in_file = dict(line.split("=", 1) for line in features.read_text().splitlines())
    assert in_file == on_node
    assert on_node["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert on_node["nvidia.com/gpu.count"] == "2"
    assert on_node["nvidia.com/mig.capable"] == "true"


def test_serves_sockets_and_metrics_then_shuts_down_on_sigterm(tmp_path: Path):
    port = free_port()
    proc = subprocess.Popen(
        [
            *GPUFLEET,
            "--sim-fleet",
            "2xH100+1xH100:mig=7x1g.10gb",
            "--mig-strategy",
            "mixed",
            "--kubelet-socket",
            str(tmp_path / "kubelet.sock"),
            "--metrics-address",
            f"127.0.0.1:{port}",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    sockets = {tmp_path / "nvidia-gpu.sock", tmp_path / "nvidia-mig-1g.10gb.sock"}

    def metrics() -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return r.read().decode()
        except OSError:
            return ""

    try:
        wait_for(lambda: all(s.exists() for s in sockets), timeout=20, what="plugin sockets")
        wait_for(lambda: "gpufleet_plugin_devices" in metrics(), what="self-metrics")
        assert 'resource="nvidia.com/mig-1g.10gb"' in metrics()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert not any(s.exists() for s in sockets), "sockets removed on shutdown"


def _time_sliced(replicas: str) -> str:
    return (
        "version: v1\nflags: {migStrategy: mixed}\nsharing:\n  timeSlicing:\n    resources:\n"
        f"    - {{name: nvidia.com/gpu, replicas: {replicas}}}\n"
    )


def test_sighup_reloads_the_config_and_re_registers_only_what_changed(tmp_path: Path):
    """Issue 16 §1.5: SIGHUP (the config manager's, on a new node config label) used to kill
    the plugin. It re-reads the file in process: the changed resource is re-registered with
    its new devices, the unchanged one keeps its registration, and a bad config is one line
    while the running one keeps serving."""
    kubelet = FakeKubelet(tmp_path / "k", rate_limit=None)
    kubelet.start()
    plugins = kubelet.device_plugins
    gpu, mig = "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"
    path = tmp_path / "config.yaml"
    path.write_text(_time_sliced("4"))
    proc = subprocess.Popen(
        [
            *GPUFLEET,
            "--sim-fleet",
            "2xH100+1xH100:mig=7x1g.10gb",
            "--config-file",
            str(path),
            "--kubelet-socket",
            str(plugins.socket_path),
            "--metrics-address",
            "",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )

    assert proc.stderr is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()

    def reload(text: str) -> None:
        path.write_text(text)
        proc.send_signal(signal.SIGHUP)

    try:
        wait_for(lambda: len(plugins.devices(gpu)) == 8, timeout=20, what="4 replicas of 2 GPUs")
        assert plugins.wait_for_registrations(mig, 1, timeout_seconds=10)
        reload(_time_sliced("8"))
        wait_for(lambda: len(plugins.devices(gpu)) == 16, timeout=20, what="8 replicas")
        assert plugins.allocatable()[gpu] == 16
        reload(_time_sliced("many"))  # refused: the 8 replicas go on serving
        wait_for(lambda: any("config reload failed" in line for line in lines), what="refusal")
        assert len(plugins.devices(gpu)) == 16
        reload(_time_sliced("2"))
        wait_for(lambda: len(plugins.devices(gpu)) == 4, timeout=20, what="2 replicas")
        assert plugins.registrations(gpu) == 3, "the bad config re-registered nothing"
        reload(_time_sliced("2"))  # the same config: nothing to re-register
        wait_for(lambda: any("none re-registered" in line for line in lines), what="no-op")
        assert plugins.registrations(gpu) == 3
        assert plugins.registrations(mig) == 1, "the unchanged resource kept its registration"
        assert plugins.allocatable()[mig] == 7
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        reader.join(5)
        kubelet.stop()
    err = "".join(lines)
    assert proc.returncode == 0, err
    failures = [line for line in err.splitlines() if "config reload failed" in line]
    assert len(failures) == 1, err
    assert str(path) in failures[0] and "replicas" in failures[0]
    assert "Traceback" not in err


def test_a_bad_web_config_is_one_line_naming_the_file_and_key(tmp_path: Path):
    path = tmp_path / "web.yml"
    path.write_text("basic_auth_users:\n  prometheus: not-a-bcrypt-hash\n")
    result = run(
        "--sim-fleet",
        "2xH100",
        "--kubelet-socket",
        str(tmp_path / "kubelet.sock"),
        "--web-config-file",
        str(path),
    )
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert str(path) in line and "basic_auth_users" in line
