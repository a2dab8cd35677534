"""What the exporter loads depends on its flags (issue 15, section 4).

h2 (the pod-resources List over HTTP/2) and the kubelet's view serve only `-k`, and grpc
none: the exporter never loads it; YAML, bcrypt and the web config's TLS setup only
`--web-config-file`; the Kubernetes client only the flags that read the API. Each costs
resident memory on every GPU node (BENCHMARKS.md), so a plain exporter must not load them.
The exporter runs as users start it, in a fresh interpreter, until its first collection is
served; then it reports which of these modules it holds.
"""

import json
import subprocess
import sys
from pathlib import Path

from helpers import free_port

LAZY = {
    "h2": "-k",
    "gpufleet.exporter.pods.podresources": "-k",
    # The kubelet's view and checkpoint and the /proc pid-to-pod map (0.1 MiB of code).
    "gpufleet.exporter.pods.view": "-k",
    "gpufleet.exporter.pods.procfs": "-k",
    "gpufleet.kubelet.checkpoint": "-k",
    "yaml": "--web-config-file",
    "bcrypt": "--web-config-file",
    "gpufleet.http.webconfig": "--web-config-file",
    "gpufleet.http.tls": "--web-config-file",
    "kubernetes": "--kubernetes-enable-pod-labels, --kubernetes-enable-dra, -m",
    "gpufleet.exporter.kube.view": "--kubernetes-enable-pod-labels, --kubernetes-enable-dra",
}
# Loaded by no configuration: `-k` makes its gRPC call with h2 (grpcunary) and decodes
# the kubelet's answer itself (listwire), gzip comes from zlib, did-you-mean hints load
# difflib only on a bad input, the process's CPU comes from time.process_time, not the
# `resource` extension module, and the HTTP server is gpufleet's own (`gpufleet.http`).
NEVER = ("grpc", "google.protobuf", "gzip", "difflib", "resource", "aiohttp")

# Runs the daemon's own main() on simulated GPUs; a thread waits for a 200 from /metrics (the
# first collection is in), prints which LAZY modules are loaded, and stops the daemon as
# SIGTERM does. Raw sockets: urllib would load modules of its own.
CHILD = r"""
import json, os, signal, socket, sys, threading, time
from gpufleet.exporter import daemon

watched, port, args = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]

def served():
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(b"GET /metrics HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n")
            return conn.recv(12).endswith(b" 200")
    except OSError:
        return False

def report():
    deadline = time.monotonic() + 30
    while not served():
        if time.monotonic() > deadline:
            os._exit(3)
        time.sleep(0.05)
    print(json.dumps(sorted(m for m in watched if m in sys.modules)), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=report, daemon=True).start()
sys.exit(daemon.main(["--fake-gpus", "-a", f"127.0.0.1:{port}", *args]))
"""


def loaded_modules(*args: str) -> set[str]:
    """The LAZY modules an exporter started with `args` holds once it serves metrics."""
    result = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(sorted([*LAZY, *NEVER])), str(free_port()), *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return set(json.loads(result.stdout))


def test_plain_exporter_loads_none_of_them() -> None:
    assert loaded_modules() == set()


def test_kubernetes_loads_h2_only_never_grpc(tmp_path: Path) -> None:
    loaded = loaded_modules(
        "-k",
        *("--pod-resources-kubelet-socket", str(tmp_path / "kubelet.sock")),
        *("--kubelet-checkpoint", str(tmp_path / "kubelet_internal_checkpoint")),
    )
    assert loaded == {m for m, flag in LAZY.items() if flag == "-k"}


def test_web_config_loads_yaml_bcrypt_and_tls(tmp_path: Path) -> None:
    web_config = tmp_path / "web.yml"
    web_config.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    loaded = loaded_modules("--web-config-file", str(web_config))
    assert loaded == {m for m, flag in LAZY.items() if flag == "--web-config-file"}
