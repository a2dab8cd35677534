"""`gpufleet autoscaler` as users run it: flags, errors, and two replicas electing one writer."""

import asyncio
import gc
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
import urllib3
from helpers import free_port, wait_for
from helpers.aggregator import (
    grant_hpa_external_metrics,
    make_pki,
    proxied_client,
    publish_authentication,
)
from helpers.descriptors import out_of_descriptors
from helpers.kube import api_client, create_autoscaler, create_vllm
from helpers.serving import MetricsServer, vllm_queue
from kubernetes import client

from gpufleet.autoscaler.daemon import GC_THRESHOLDS, _every, main
from gpufleet.autoscaler.kedascaler.api import externalscaler_pb2 as pb
from gpufleet.autoscaler.kedascaler.api import externalscaler_pb2_grpc as pb_grpc
from gpufleet.lab.kubeapi.server import FakeApiServer
from gpufleet.logs import LOG_BURST

NS = "llm"


def gpufleet(*args: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        **kw,
    )


def test_help_explains_every_group() -> None:
    run = gpufleet("autoscaler", "--help")
    assert run.returncode == 0
    groups = ("sources:", "control loop:", "high availability:", "signals for HPA and KEDA:")
    for group in (*groups, "operations:"):
        assert group in run.stdout


def test_the_daemon_runs_the_cycle_collector_less_often() -> None:
    """Under Python's thresholds a full collection over every workload's state ran once or
    twice a tick, a third of a 1,000-workload tick's CPU (BENCHMARKS.md)."""
    before, root = gc.get_threshold(), logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        # a bad address ends it after the process is set up, before anything runs
        assert main(["--prometheus-url", "http://127.0.0.1:9", "--metrics-address", "x"]) == 1
        assert gc.get_threshold() == GC_THRESHOLDS
    finally:
        gc.set_threshold(*before)
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        pytest.param(("--tick-seconds", "0"), 2, "--tick-seconds", id="bad-flag"),
        pytest.param(("--rate-window", "30"), 2, "--rate-window", id="window-without-unit"),
        pytest.param(
            ("--kubeconfig", "/nonexistent/kubeconfig"),
            1,
            "/nonexistent/kubeconfig",
            id="missing-kubeconfig",
        ),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(args, code: int, text: str) -> None:
    run = gpufleet("autoscaler", *args, "--metrics-address", "")
    assert run.returncode == code
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and text in lines[0] and "Traceback" not in run.stderr


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def autoscaler_lists(server: FakeApiServer, identity: str) -> int:
    return sum(
        1
        for r in server.requests
        if r.method == "GET"
        and r.path.endswith("/gpuautoscalers")
        and r.user_agent.endswith(f"/{identity}")
    )


def scale_writes(server: FakeApiServer, identity: str) -> int:
    return sum(
        1
        for r in server.requests
        if r.method in ("PUT", "PATCH")
        and r.path.endswith("/scale")
        and r.user_agent.endswith(f"/{identity}")
    )


@pytest.mark.prometheus
def test_two_replicas_one_writer_and_a_warm_takeover(
    apiserver: FakeApiServer, prometheus_for
) -> None:
    api = api_client(apiserver.url)
    apps = client.AppsV1Api(api)
    create_vllm(api, NS, ready_pod="vllm-0")
    pod = MetricsServer(vllm_queue())
    prometheus = prometheus_for(pod.address, labels={"namespace": NS, "pod": "vllm-0"})
    wait_for(
        lambda: prometheus.query("count_over_time(vllm:num_requests_waiting[1m]) >= 3"),
        timeout=30,
        what="three scrapes",
    )
    create_autoscaler(
        api,
        NS,
        {
            "scaleTargetRef": {"kind": "Deployment", "name": "vllm"},
            "maxReplicas": 8,
            "policy": "keda",
            "keda": {"queueTarget": 10, "pollingIntervalSeconds": 1},
        },
    )

    def start(identity: str, *flags: str) -> subprocess.Popen:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpufleet.cli",
                "autoscaler",
                "--kube-url",
                apiserver.url,
                "--prometheus-url",
                f"http://127.0.0.1:{prometheus.port}",
                "--identity",
                identity,
                "--lease-namespace",
                "kube-system",
                "--tick-seconds",
                "0.5",
                "--scrape-interval-seconds",
                "1",
                "--rate-window",
                "5s",
                "--lease-duration-seconds",
                "3",
                "--renew-deadline-seconds",
                "2",
                "--retry-period-seconds",
                "0.5",
                "--metrics-address",
                "",
                *flags,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def holder() -> str:
        return (
            client.CoordinationV1Api(api)
            .read_namespaced_lease("gpufleet-autoscaler", "kube-system")
            .spec.holder_identity
        )

    a = start("a")
    try:
        wait_for(
            lambda: apps.read_namespaced_deployment_scale("vllm", NS).spec.replicas == 4,
            timeout=30,
            what="the first scale-up",
        )
        # a watches what it reads (the default); b lists it at each tick
        b = start("b", "--watch=false")
        try:
            # b gathers and decides as a follower (its ticks list the GPUAutoscalers), and
            # must not write
            wait_for(lambda: autoscaler_lists(apiserver, "b") >= 2, timeout=30, what="b's ticks")
            assert holder() == "a"
            assert (scale_writes(apiserver, "a"), scale_writes(apiserver, "b")) == (1, 0)
            a.send_signal(signal.SIGKILL)
            a.wait(10)
            # b takes over once the 3 s lease lapses (no duration asserted: never a timed test)
            wait_for(lambda: holder() == "b", timeout=30, what="b to take the lease")
            apps.patch_namespaced_deployment_scale("vllm", NS, {"spec": {"replicas": 1}})
            wait_for(lambda: scale_writes(apiserver, "b") >= 1, timeout=25, what="b's first write")
            assert scale_writes(apiserver, "a") == 1  # no double actuation
            b.send_signal(signal.SIGTERM)
            assert b.wait(15) == 0
            assert holder() == ""  # released on SIGTERM: a standby need not wait it out
        finally:
            b.kill()
    finally:
        a.kill()
        pod.stop()
        api.close()


def test_sigterm_releases_the_lease_while_a_hung_webhook_holds_every_write(
    apiserver: FakeApiServer,
) -> None:
    """The release waited in asyncio's default pool behind the writes a hung webhook
    held there, each for the API timeout (30 s), so a standby waited the lease out. It
    now runs on a thread of its own: released at once, the writes still held."""
    api = api_client(apiserver.url)
    client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
    pool = min(32, (os.cpu_count() or 1) + 4)  # the daemon's default pool
    for i in range(pool + 4):  # each writes its status (its target is missing)
        create_autoscaler(api, NS, {"scaleTargetRef": {"name": f"t{i}"}}, name=f"w{i}")
    apiserver.faults.hold_writes_suffix = "/status"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.cli", "autoscaler", "--kube-url", apiserver.url,
         "--prometheus-url", "http://127.0.0.1:9", "--identity", "a",
         "--lease-namespace", "kube-system", "--tick-seconds", "0.2",
         "--metrics-address", ""],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip

    def holder() -> str:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(
            "gpufleet-autoscaler", "kube-system"
        )
        return lease.spec.holder_identity or ""

    try:
        wait_for(lambda: apiserver.held_writes >= pool, timeout=30, what="a full pool")
        assert holder() == "a"
        daemon.send_signal(signal.SIGTERM)
        wait_for(lambda: holder() == "", timeout=10, what="the release, writes still held")
        assert apiserver.held_writes >= pool
        apiserver.faults.hold_writes_suffix = ""
        assert daemon.wait(30) == 0
    finally:
        apiserver.faults.hold_writes_suffix = ""
        daemon.kill()
        api.close()


def lone_autoscaler(api_url: str, port: int, *args: str) -> subprocess.Popen:
    """`gpufleet autoscaler` without an election or a Prometheus, its metrics on `port`."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpufleet.cli",
            "autoscaler",
            "--kube-url",
            api_url,
            "--prometheus-url",
            "http://127.0.0.1:9",
            "--leader-elect=false",
            *args,
            "--metrics-address",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def http_get(port: int, path: str) -> tuple[int, str]:
    """Status and body of GET `path` on the loopback `port`; (0, "") while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:  # an answer, not a 2xx one
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


def test_metrics_and_healthz_while_it_runs(apiserver: FakeApiServer) -> None:
    port = free_port()
    daemon = lone_autoscaler(apiserver.url, port, "--tick-seconds", "0.2")
    try:
        wait_for(
            lambda: (
                "gpufleet_autoscaler_ticks_total" in http_get(port, "/metrics")[1]
                and "gpufleet_autoscaler_ticks_total 0.0" not in http_get(port, "/metrics")[1]
            ),
            timeout=30,
            what="a tick counted",
        )
        text = http_get(port, "/metrics")[1]
        assert "gpufleet_autoscaler_leader 1.0" in text  # no election: it writes
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            assert answer.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert http_get(port, "/healthz") == (200, "OK")
        assert http_get(port, "/readyz") == (200, "OK")
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(15) == 0
    finally:
        daemon.kill()


def test_an_api_that_stays_down_is_one_line_and_never_ready() -> None:
    """Listing failed every tick, one warning each (86k lines a day at 1 s); now the outage
    is one line, and /readyz keeps Services away from a replica with nothing to serve."""
    port = free_port()
    nothing_there = f"http://127.0.0.1:{free_port()}"
    daemon = lone_autoscaler(nothing_there, port, "--tick-seconds", "0.1")
    try:
        wait_for(
            lambda: _failed_ticks(http_get(port, "/metrics")[1]) >= 10,
            timeout=30,
            what="ten failed ticks",
        )
        assert http_get(port, "/readyz") == (503, "no tick has succeeded yet")
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(15) == 0
        stderr = daemon.stderr.read()
        assert stderr.count("cannot list GPUAutoscalers") == 1, stderr
    finally:
        daemon.kill()


def _failed_ticks(text: str) -> float:
    for line in text.splitlines():
        if line.startswith('gpufleet_autoscaler_errors_total{kind="kube_unavailable"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_request_that_does_not_parse_is_one_line_and_counted(apiserver: FakeApiServer) -> None:
    # Issue 18: aiohttp logged each malformed request on :9402 with a traceback.
    port = free_port()
    daemon = lone_autoscaler(apiserver.url, port)
    try:
        wait_for(lambda: http_get(port, "/metrics")[1] != "", timeout=30, what="the metrics port")
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
            assert b" 400 " in conn.recv(64)[:20]
        text = http_get(port, "/metrics")[1]  # still serving
        assert "gpufleet_autoscaler_http_bad_requests_total 1.0" in text.splitlines()
        assert 'gpufleet_autoscaler_http_requests_total{code="200",route="/metrics"}' in text
        daemon.send_signal(signal.SIGTERM)
        _, stderr = daemon.communicate(timeout=15)
    finally:
        daemon.kill()
    assert daemon.returncode == 0
    assert "Traceback" not in stderr
    refused = [line for line in stderr.splitlines() if "refused with 400" in line]
    assert len(refused) == 1, stderr


def test_a_busy_metrics_port_is_one_line_and_exit_1() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = gpufleet(
            "autoscaler",
            "--kube-url",
            "http://127.0.0.1:9",
            "--leader-elect=false",
            "--metrics-address",
            f"127.0.0.1:{port}",
        )
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert "Traceback" not in run.stderr
    assert any(f"--metrics-address 127.0.0.1:{port}: " in line for line in lines)


@pytest.mark.parametrize(
    ("args", "text"),
    [
        pytest.param(
            ("--external-metrics-address", ":0"),
            "--external-metrics-address needs --external-metrics-tls-cert-file",
            id="https-without-a-certificate",
        ),
        pytest.param(
            ("--keda-scaler-address", "9403"), "--keda-scaler-address: listen address", id="keda"
        ),
        pytest.param(
            ("--keda-scaler-address", ":0", "--keda-scaler-client-ca-file", "/ca.pem"),
            "--keda-scaler-tls-cert-file and --keda-scaler-tls-key-file go together",
            id="keda-client-ca-without-tls",
        ),
    ],
)
def test_bad_signal_flags_are_one_line_and_exit_1(args, text: str) -> None:
    run = gpufleet("autoscaler", *args, "--metrics-address", "", "--kube-url", "http://x:9")
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and text in lines[0] and "Traceback" not in run.stderr


def test_without_the_authentication_configmap_the_external_metrics_server_refuses(
    apiserver: FakeApiServer, tmp_path
) -> None:
    pki = make_pki(tmp_path)
    run = gpufleet(
        "autoscaler",
        *("--kube-url", apiserver.url, "--leader-elect=false", "--metrics-address", ""),
        *("--external-metrics-address", f"127.0.0.1:{free_port()}"),
        *("--external-metrics-tls-cert-file", str(pki.server_cert)),
        *("--external-metrics-tls-key-file", str(pki.server_key)),
    )
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert "Traceback" not in run.stderr
    assert "ConfigMap kube-system/extension-apiserver-authentication" in lines[-1]


def test_the_external_metrics_api_and_the_keda_scaler_while_it_runs(
    apiserver: FakeApiServer, tmp_path
) -> None:
    pki = make_pki(tmp_path)
    kube = api_client(apiserver.url)
    publish_authentication(kube, pki)
    grant_hpa_external_metrics(kube)
    https, grpc_port = free_port(), free_port()
    daemon = subprocess.Popen(
        [
            sys.executable,
            *("-m", "gpufleet.cli", "autoscaler", "--kube-url", apiserver.url),
            *("--prometheus-url", "http://127.0.0.1:9", "--leader-elect=false"),
            *("--metrics-address", "", "--keda-scaler-address", f"127.0.0.1:{grpc_port}"),
            *("--external-metrics-address", f"127.0.0.1:{https}"),
            *("--external-metrics-tls-cert-file", str(pki.server_cert)),
            *("--external-metrics-tls-key-file", str(pki.server_key)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"https://127.0.0.1:{https}"

    def discovered() -> list[str]:
        with proxied_client(url, pki) as api:
            try:
                found = client.CustomObjectsApi(api).get_api_resources(
                    "external.metrics.k8s.io", "v1beta1"
                )
            except urllib3.exceptions.HTTPError:  # not listening yet
                return []
            return [r.name for r in found.resources]

    try:
        assert "gpufleet_desired_replicas" in wait_for(discovered, timeout=30, what="discovery")
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            stub = pb_grpc.ExternalScalerStub(channel)
            ref = pb.ScaledObjectRef(name="so", namespace=NS, scalerMetadata={"autoscaler": "a"})
            (spec,) = stub.GetMetricSpec(ref, timeout=10).metricSpecs
            assert (spec.metricName, spec.targetSizeFloat) == ("gpufleet_desired_replicas", 1.0)
            with pytest.raises(grpc.RpcError) as caught:
                stub.IsActive(ref, timeout=10)
            assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(15) == 0, daemon.stderr.read()
    finally:
        daemon.kill()
        kube.close()


def test_out_of_descriptors_the_external_metrics_server_logs_a_few_lines(
    apiserver: FakeApiServer, tmp_path
) -> None:
    """Its own event loop had asyncio's default handler: a traceback per failed accept,
    hundreds a second (104 MB of log in 40 s). Now the daemons' one rate-limited line."""
    pki = make_pki(tmp_path)
    kube = api_client(apiserver.url)
    publish_authentication(kube, pki)
    https = free_port()
    daemon = subprocess.Popen(
        [
            sys.executable,
            *("-m", "gpufleet.cli", "autoscaler", "--kube-url", apiserver.url),
            *("--prometheus-url", "http://127.0.0.1:9", "--leader-elect=false"),
            *("--metrics-address", "", "--external-metrics-address", f"127.0.0.1:{https}"),
            *("--external-metrics-tls-cert-file", str(pki.server_cert)),
            *("--external-metrics-tls-key-file", str(pki.server_key)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(daemon.stderr), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("serving external" in line for line in lines), what="serving")
        with out_of_descriptors(daemon.pid, https):
            wait_for(
                lambda: any("cannot accept connections" in line for line in lines),
                timeout=30,
                what="the accept warning",
            )
            time.sleep(2.5)  # failed accepts retry every second: a few cycles of them
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(15) == 0
    finally:
        daemon.kill()
        reader.join(timeout=5)
        kube.close()
    log = "".join(lines)
    accept_lines = [line for line in lines if "cannot accept connections" in line]
    assert 1 <= len(accept_lines) <= LOG_BURST + 2, log[-2000:]
    assert "Traceback" not in log and "out of system resource" not in log, log[-2000:]


def test_sigterm_cancels_a_pass_stuck_on_prometheus_and_releases_the_lease(
    apiserver: FakeApiServer,
) -> None:
    """A Prometheus that accepts and never answers held each pass for its queries'
    timeouts (75 s with three workloads): SIGTERM waited for the pass, past Kubernetes'
    30 s grace period, so the lease was never released."""
    kube = api_client(apiserver.url)
    create_vllm(kube, NS)
    create_autoscaler(
        kube, NS, {"scaleTargetRef": {"kind": "Deployment", "name": "vllm"}, "maxReplicas": 8}
    )
    silent = socket.create_server(("127.0.0.1", 0))  # the kernel accepts; nothing answers
    silent.settimeout(30)  # a daemon that never queries fails the test, not hangs it
    daemon = subprocess.Popen(
        [
            sys.executable,
            *("-m", "gpufleet.cli", "autoscaler", "--kube-url", apiserver.url),
            *("--prometheus-url", f"http://127.0.0.1:{silent.getsockname()[1]}"),
            *("--query-timeout-seconds", "300", "--metrics-address", ""),
            *("--lease-namespace", "kube-system", "--identity", "a"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: _holder(kube) == "a", timeout=30, what="the lease")
        # The pass is waiting on Prometheus once the daemon has connected to it.
        conn, _ = silent.accept()
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(15) == 0
        assert _holder(kube) == ""
        assert "Traceback" not in daemon.stderr.read()
        conn.close()
    finally:
        daemon.kill()
        silent.close()
        kube.close()


def _holder(api: client.ApiClient) -> str:
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(
            "gpufleet-autoscaler", "kube-system"
        )
    except client.ApiException:
        return ""
    return lease.spec.holder_identity or ""


async def test_a_call_every_interval_runs_on_a_thread_until_stopped() -> None:
    """How the external metrics server reads the request-header ConfigMap each minute."""
    threads: list[str] = []
    stop = _every(0.01, lambda: threads.append(threading.current_thread().name))
    while len(threads) < 3:
        await asyncio.sleep(0.01)
    await stop()
    seen = len(threads)
    await asyncio.sleep(0.05)
    assert len(threads) == seen  # stopped
    assert threading.main_thread().name not in threads  # blocking calls stay off the loop
