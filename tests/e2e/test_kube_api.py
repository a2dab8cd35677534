"""The exporter's Kubernetes API features end to end (issue 15 §2): pod labels, DRA claims
and the counters CSV from a ConfigMap, with the official client against the fake API server,
the fake kubelet on its real socket and the real exporter over loopback HTTP."""

import logging
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import free_port, wait_for
from helpers.e2e import node_settings
from helpers.kube import api_client
from helpers.lab_process import running_lab
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.exporter.daemon import prepare
from gpufleet.lab.dra import resource_slice
from gpufleet.lab.kubeapi.resources import RESOURCES
from gpufleet.lab.kubeapi.server import FakeApiServer
from gpufleet.lab.node import NAMESPACES, SimNode

NODE = "node-a"  # the exporter's NODE_NAME in helpers.e2e.node_settings
PODS = next(r for r in RESOURCES if r.plural == "pods" and not r.group)


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        core = client.CoreV1Api(api_client(server.url))
        for namespace in NAMESPACES:
            core.create_namespace({"metadata": {"name": namespace}})
        yield server


def series(text: str, name: str = "DCGM_FI_DEV_FB_USED", **labels: str) -> list[dict]:
    return [
        s.labels
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name and labels.items() <= s.labels.items()
    ]


def create_pods(server: FakeApiServer, node: SimNode, labels: dict[str, str]) -> None:
    """The node's pods in the API, on NODE, each labelled `labels` plus its own name."""
    core = client.CoreV1Api(api_client(server.url))
    for pod in node.pods.values():
        core.create_namespaced_pod(
            pod.namespace,
            {
                "metadata": {
                    "name": pod.name,
                    "labels": {**labels, "app.kubernetes.io/name": pod.name},
                },
                "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "x"}]},
            },
        )


def test_pod_labels_come_from_the_api_and_follow_its_changes(node, api, exporter_for):
    create_pods(api, node, {"team": "red", "secret": "s"})
    core = client.CoreV1Api(api_client(api.url))
    # A pod of the same name on another node must not lend its labels (field selector).
    core.create_namespaced_pod(
        "batch",
        {
            "metadata": {"name": "elsewhere", "labels": {"team": "blue"}},
            "spec": {"nodeName": "node-b", "containers": [{"name": "main", "image": "x"}]},
        },
    )
    exp = exporter_for(
        node,
        kube_url=api.url,
        kubernetes_enable_pod_labels=True,
        kubernetes_pod_label_allowlist_regex=r"^app\.kubernetes\.io/,^team$",
    )
    train = node.pods[next(k for k in node.pods if k[1] == "train-0")]
    got = wait_for(
        lambda: series(exp.metrics(), pod="train-0", team="red"), what="pod labels on series"
    )
    assert got[0]["app_kubernetes_io_name"] == "train-0"
    assert "secret" not in got[0]
    assert train.namespace == got[0]["namespace"]
    # every pod series carries its own labels; no idle GPU series carries any
    text = exp.metrics()
    for labels in series(text):
        assert ("team" in labels) == ("pod" in labels)
        if "pod" in labels:
            assert labels["app_kubernetes_io_name"] == labels["pod"]
    # A relabelled pod is seen without a restart, through the watch: one streaming list
    # (the objects, then their changes, on one request), no polling.
    core.patch_namespaced_pod(
        "train-0", train.namespace, {"metadata": {"labels": {"team": "gold"}}}
    )
    wait_for(lambda: series(exp.metrics(), pod="train-0", team="gold"), what="relabelled pod")
    assert series(exp.metrics(), team="blue") == []
    (read,) = [r for r in api.requests if r.path == "/api/v1/pods"]
    assert read.method == "WATCH" and "sendInitialEvents=true" in read.query


def kube_errors(text: str, kind: str) -> float:
    name = "gpufleet_exporter_kube_api_errors_total"
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name and s.labels.get("kind") == kind
    )


def test_api_server_restart_relists_and_catches_up(node, api, exporter_for):
    create_pods(api, node, {"team": "red"})
    exp = exporter_for(node, kube_url=api.url, kubernetes_enable_pod_labels=True)
    train = next(p for p in node.pods.values() if p.name == "train-0")
    wait_for(lambda: series(exp.metrics(), pod="train-0", team="red"), what="pod labels")
    api.stop()
    # A change the exporter cannot see while the API is down (the store outlives the server).
    api.store.patch(
        PODS,
        train.namespace,
        "train-0",
        {"metadata": {"labels": {"team": "gold"}}},
        content_type="application/merge-patch+json",
    )
    wait_for(lambda: kube_errors(exp.metrics(), "unavailable"), what="the failure counted")
    assert series(exp.metrics(), pod="train-0", team="red")  # the last view is kept
    api.start()
    wait_for(lambda: series(exp.metrics(), pod="train-0", team="gold"), what="caught up")


def test_pod_labels_off_by_default(node, api, exporter_for):
    create_pods(api, node, {"team": "red"})
    exp = exporter_for(node, kube_url=api.url)
    text = wait_for(lambda: series(exp.metrics(), pod="train-0") and exp.metrics(), what="pods")
    assert series(text, team="red") == []


def _claims(node: SimNode) -> tuple[str, str]:
    """Swap GPU 1's pod and one MIG slice's pod for pods holding them through DRA claims;
    returns (GPU 1's UUID, the MIG device's UUID)."""
    gpu = node.sim.devices[1]
    mig = next(d for d in node.sim.devices if d.mig_enabled).mig[2]
    for (namespace, name), pod in list(node.pods.items()):
        if pod.device_ids[0] in (gpu.uuid, mig.uuid):
            node.remove_pod(namespace, name)
    node.add_claim_pod("research", "dra-gpu", (gpu.uuid,))
    node.add_claim_pod("batch", "dra-mig", (mig.uuid,))
    return gpu.uuid, mig.uuid


def test_dra_claims_get_dcgm_exporters_dra_labels(node, api, exporter_for):
    gpu_uuid, mig_uuid = _claims(node)
    resources = client.ResourceV1Api(api_client(api.url))
    resources.create_resource_slice(resource_slice(node.sim, node.layout.node_name))
    exp = exporter_for(node, kube_url=api.url, kubernetes_enable_dra=True)
    pool = node.layout.node_name
    (gpu,) = wait_for(lambda: series(exp.metrics(), pod="dra-gpu"), what="DRA GPU pod")
    assert gpu["UUID"] == gpu_uuid
    assert {k: v for k, v in gpu.items() if k.startswith("dra_")} == {
        "dra_claim_name": "dra-gpu-gpu",
        "dra_claim_namespace": "research",
        "dra_driver_name": "gpu.nvidia.com",
        "dra_pool_name": pool,
        "dra_device_name": "gpu-1",
    }
    (mig,) = series(exp.metrics(), pod="dra-mig")
    assert {k: v for k, v in mig.items() if k.startswith("dra_mig")} == {
        "dra_mig_profile": "1g.10gb",
        "dra_mig_device_uuid": mig_uuid,
    }
    assert mig["GPU_I_PROFILE"] == "1g.10gb"  # on the MIG instance's own series
    # device-plugin pods are untouched
    assert all("dra_claim_name" not in s for s in series(exp.metrics(), pod="train-0"))


def test_dra_claim_without_a_slice_is_counted_until_the_slice_comes(node, api, exporter_for):
    _claims(node)
    exp = exporter_for(node, kube_url=api.url, kubernetes_enable_dra=True)
    text = wait_for(lambda: series(exp.metrics(), pod="train-0") and exp.metrics(), what="pods")
    assert series(text, pod="dra-gpu") == []
    (dropped,) = [
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "gpufleet_exporter_attribution_dropped"
        and s.labels["reason"] == "unknown_device_ids"
    ]
    assert dropped == 2  # the two claims
    # The driver publishes its slice later: the watch brings it in.
    client.ResourceV1Api(api_client(api.url)).create_resource_slice(
        resource_slice(node.sim, node.layout.node_name)
    )
    wait_for(lambda: series(exp.metrics(), pod="dra-gpu"), what="the late slice")
    slices = "/apis/resource.k8s.io/v1/resourceslices"
    reads = [r for r in api.requests if r.path == slices and r.method != "POST"]
    assert [r.method for r in reads] == ["WATCH"] and "sendInitialEvents=true" in reads[0].query


def test_dra_off_leaves_claims_unattributed(node, api, exporter_for):
    _claims(node)
    client.ResourceV1Api(api_client(api.url)).create_resource_slice(
        resource_slice(node.sim, node.layout.node_name)
    )
    exp = exporter_for(node, kube_url=api.url)
    text = wait_for(lambda: series(exp.metrics(), pod="train-0") and exp.metrics(), what="pods")
    assert series(text, pod="dra-gpu") == []


METRICS_CSV = (
    "# from a ConfigMap\n"
    "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
    "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n"
)


def test_counters_csv_from_a_configmap(node, api, exporter_for):
    core = client.CoreV1Api(api_client(api.url))
    core.create_namespaced_config_map(
        "kube-system",
        {"metadata": {"name": "exporter-metrics"}, "data": {"metrics": METRICS_CSV}},
    )
    exp = exporter_for(node, kube_url=api.url, configmap_data="kube-system:exporter-metrics")
    text = exp.metrics()
    assert series(text, "DCGM_FI_DEV_GPU_TEMP")
    assert series(text, "DCGM_FI_DEV_POWER_USAGE")
    assert series(text, "DCGM_FI_DEV_FB_USED") == []  # the -f default list is not read


def _exporter(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", "exporter", "--sim-fleet", "1xH100", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def _no_api_env(home: Path) -> dict[str, str]:
    """No service account, no kubeconfig anywhere."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
    }
    return {**env, "HOME": str(home)}


def test_no_api_configuration_for_the_counters_is_one_line_naming_the_flag(tmp_path):
    result = _exporter("-m", "kube-system:cm", "-a", "127.0.0.1:0", env=_no_api_env(tmp_path))
    assert result.returncode == 1, result.stderr
    assert (
        "--configmap-data: cannot configure the Kubernetes client from the default kubeconfig"
        in result.stderr
    )
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("flag", "feature"),
    [
        ("--kubernetes-enable-pod-labels", "pod labels"),
        ("--kubernetes-enable-dra", "DRA devices"),
    ],
)
def test_no_api_configuration_for_labels_serves_without_them(tmp_path, flag, feature):
    """dcgm-exporter warns and serves without pod labels; exiting 1 left a node with no
    GPU metrics at all (its chart mounts no token with enablePodLabels and rbac.create
    false)."""
    port = free_port()
    command = [sys.executable, "-m", "gpufleet.cli", "exporter", "--sim-fleet", "1xH100"]
    proc = subprocess.Popen(
        [*command, "-k", flag, "-a", f"127.0.0.1:{port}"],
        stderr=subprocess.PIPE,
        text=True,
        env=_no_api_env(tmp_path),
    )
    try:
        wait_for(lambda: _status(f"http://127.0.0.1:{port}/health") == 200, what="serving")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert f"{flag}: cannot configure the Kubernetes client" in err
    assert f"serving without {feature}" in err and "Traceback" not in err


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status
    except OSError:
        return 0


@pytest.mark.parametrize(
    ("configmap", "data", "message"),
    [
        ("kube-system:absent", None, "could not retrieve ConfigMap 'kube-system:absent': 404"),
        (
            "kube-system:cm",
            {"other": "x"},
            "malformed ConfigMap 'kube-system:cm': no 'metrics' key",
        ),
        ("kube-system", None, "malformed configmap-data 'kube-system'"),
        ("a:b:c", None, "malformed configmap-data 'a:b:c'"),
        ("kube-system:cm", {"metrics": "NOPE, gauge, x\n"}, "no known field selected"),
    ],
)
def test_bad_configmap_is_one_line_and_exit_1(api, configmap, data, message):
    if data is not None:
        client.CoreV1Api(api_client(api.url)).create_namespaced_config_map(
            "kube-system", {"metadata": {"name": "cm"}, "data": data}
        )
    result = _exporter("--kube-url", api.url, "-m", configmap, "-a", "127.0.0.1:0")
    assert result.returncode == 1, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_allowlist_regex_is_one_line_and_exit_1():
    result = _exporter(
        "-k", "--kubernetes-enable-pod-labels", "--kubernetes-pod-label-allowlist-regex", "^a$,[x"
    )
    assert result.returncode == 1
    assert (
        "--kubernetes-pod-label-allowlist-regex: pattern '[x' is not a valid regex" in result.stderr
    )
    assert "Traceback" not in result.stderr


def test_the_kubernetes_client_is_imported_only_when_a_flag_needs_it():
    # issue 15 §4: the client costs tens of MiB; an exporter without these flags never pays.
    code = (
        "import sys, gpufleet.exporter.daemon, gpufleet.lab.node;"
        "sys.exit('kubernetes' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_lab_runs_dra_claims_with_a_fake_api_server(tmp_path: Path):
    def claimed(exporter: str) -> list[dict]:
        """The claim's series once the pod watch has delivered its labels too: pods and
        ResourceSlices are watched apart, so a collection may see the pod's devices one
        refresh before its labels (CI caught one)."""
        try:
            with urllib.request.urlopen(exporter, timeout=5) as r:
                found = series(r.read().decode(), pod="claim-0")
        except OSError:
            return []
        return found if all("app_kubernetes_io_name" in s for s in found) else []

    lab = ("--dra", "1", "--churn-seconds", "0.5", "--fleet", "3xH100+1xH100:mig=2x1g.10gb")
    with running_lab(tmp_path / "lab.log", *lab) as urls:
        exporter = urls["gpu-node-0 exporter"]
        (gpu,) = wait_for(
            lambda: claimed(exporter), timeout=60, what="the lab's DRA pod", poll_seconds=0.5
        )
        assert gpu["dra_driver_name"] == "gpu.nvidia.com"
        assert gpu["dra_device_name"] == "gpu-0"
        assert gpu["app_kubernetes_io_name"] == "claim"


def test_pod_labels_and_dra_without_k_warn_and_reach_no_api(node, api, caplog):
    settings = node_settings(
        node,
        kubernetes=False,
        kubernetes_enable_pod_labels=True,
        kubernetes_enable_dra=True,
        kube_url=api.url,
    )
    with caplog.at_level(logging.WARNING):
        assert prepare(settings).kube_api is None
    assert "--kubernetes-enable-pod-labels has no effect without --kubernetes" in caplog.text
    assert "--kubernetes-enable-dra has no effect without --kubernetes" in caplog.text
