"""The exporter under faults: lost GPUs, a missing or failing kubelet, deleted pods,
hung NVML calls, many concurrent scrapes. One fault never costs the rest of the data."""

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest
from helpers import TEST_DATA, wait_for
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.exporter.daemon import prepare, with_backend_proc_root
from gpufleet.exporter.settings import ExporterSettings
from gpufleet.lab.kubelet.kubelet import RateLimit
from gpufleet.nvml.backend import open_backend


def samples(text: str, name: str) -> list:
    return [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def gpus_reporting(text: str) -> set[str]:
    return {s.labels["gpu"] for s in samples(text, "DCGM_FI_DEV_POWER_USAGE")}


def pods_labelled(text: str) -> set[str]:
    return {s.labels["pod"] for s in samples(text, "DCGM_FI_DEV_FB_USED") if "pod" in s.labels}


def self_metric(text: str, name: str, **labels: str) -> float:
    found = [s.value for s in samples(text, name) if labels.items() <= s.labels.items()]
    return found[0] if found else 0.0


def test_lost_gpu_mid_run_others_keep_reporting(node, exporter_for):
    exporter = exporter_for(node)
    everyone = wait_for(lambda: gpus_reporting(exporter.metrics()), what="GPUs")
    assert everyone == {str(g.index) for g in node.sim.devices}

    node.sim.fail_gpu(1)
    wait_for(lambda: "1" not in gpus_reporting(exporter.metrics()), what="GPU 1 to go")
    text = exporter.metrics()
    assert gpus_reporting(text) == everyone - {"1"}
    assert self_metric(text, "gpufleet_exporter_errors_total", kind="gpu_lost") >= 1

    node.sim.restore_gpu(1)
    wait_for(lambda: gpus_reporting(exporter.metrics()) == everyone, timeout=20, what="GPU 1 back")
    # Falling off the bus raised XID 79 on that GPU, and the count survived its absence.
    assert self_metric(exporter.metrics(), "gpufleet_xid_errors_total", gpu="1", xid="79") == 1


def test_xid_is_last_value_and_per_xid_counter(node, exporter_for):
    exporter = exporter_for(node)
    node.sim.inject_xid(0, 48)
    node.sim.inject_xid(0, 48)
    node.sim.inject_xid(0, 31)

    def gpu0_xid() -> list:
        return [
            s
            for s in samples(exporter.metrics(), "DCGM_FI_DEV_XID_ERRORS")
            if s.labels["gpu"] == "0" and s.value == 31
        ]

    last = wait_for(gpu0_xid, what="XID 31")[0]
    assert last.labels["err_code"] == "31"
    counts = {
        s.labels["xid"]: s.value
        for s in samples(exporter.metrics(), "gpufleet_xid_errors_total")
        if s.labels["gpu"] == "0"
    }
    assert counts == {"48": 2.0, "31": 1.0}


def test_deleted_pod_loses_its_series_within_a_refresh(node, exporter_for):
    exporter = exporter_for(node)
    victim = next(p for p in node.pods.values() if "::" in p.device_ids[0])
    wait_for(lambda: victim.name in pods_labelled(exporter.metrics()), what="pod labels")
    node.remove_pod(victim.namespace, victim.name)
    # kubelet refresh 0.2 s, collection 0.1 s: gone well within a second.
    wait_for(
        lambda: victim.name not in pods_labelled(exporter.metrics()),
        timeout=3,
        what="deleted pod's series to go",
    )
    assert pods_labelled(exporter.metrics()) == {p.name for p in node.pods.values()}


def test_kubelet_socket_missing_then_restarted(node, exporter_for):
    node.kubelet.stop()
    exporter = exporter_for(node)
    text = exporter.metrics()
    assert gpus_reporting(text), "metrics are served without the kubelet"
    assert pods_labelled(text) == set()
    wait_for(
        lambda: (
            self_metric(
                exporter.metrics(), "gpufleet_exporter_kubelet_errors_total", kind="socket_missing"
            )
            >= 1
        ),
        what="socket_missing counted",
    )
    node.kubelet.start()
    wait_for(
        lambda: pods_labelled(exporter.metrics()) == {p.name for p in node.pods.values()},
        timeout=10,
        what="pod labels after the kubelet came back",
    )


def test_kubelet_restart_mid_run_recovers(node, exporter_for):
    exporter = exporter_for(node)
    everyone = {p.name for p in node.pods.values()}
    wait_for(lambda: pods_labelled(exporter.metrics()) == everyone, what="pod labels")
    node.kubelet.restart()
    node.remove_pod(*next(iter(node.pods)))  # a change made while the kubelet was away
    wait_for(
        lambda: pods_labelled(exporter.metrics()) == {p.name for p in node.pods.values()},
        timeout=10,
        what="labels to follow the restarted kubelet",
    )


def test_get_disabled_does_not_matter(node, exporter_for):
    node.kubelet.get_disabled = True  # most kubelets before 1.34
    exporter = exporter_for(node)
    wait_for(
        lambda: pods_labelled(exporter.metrics()) == {p.name for p in node.pods.values()},
        what="pod labels without Get",
    )
    assert node.kubelet.calls.get("Get", 0) == 0


def test_rate_limited_kubelet_is_counted_and_recovers(node, exporter_for):
    exporter = exporter_for(node)
    everyone = {p.name for p in node.pods.values()}
    wait_for(lambda: pods_labelled(exporter.metrics()) == everyone, what="pod labels")
    node.kubelet.set_rate_limit(RateLimit(qps=0.001, burst=0))
    wait_for(
        lambda: (
            self_metric(
                exporter.metrics(), "gpufleet_exporter_kubelet_errors_total", kind="rate_limited"
            )
            >= 1
        ),
        what="rate_limited counted",
    )
    node.kubelet.set_rate_limit(None)
    node.remove_pod(*next(iter(node.pods)))
    wait_for(
        lambda: pods_labelled(exporter.metrics()) == {p.name for p in node.pods.values()},
        timeout=20,
        what="labels after the limit lifted",
    )


def test_scrapes_never_call_the_kubelet(node, exporter_for):
    exporter = exporter_for(node, kubelet_refresh_seconds=60.0)
    wait_for(lambda: node.kubelet.calls.get("List", 0) >= 1, what="first List")
    before = node.kubelet.calls.get("List", 0)
    for _ in range(30):
        assert exporter.get()[0] == 200
    assert node.kubelet.calls.get("List", 0) == before


def test_fifty_concurrent_scrapes_get_the_same_snapshot(node, exporter_for):
    # A slow interval keeps one snapshot in place while the scrapes run.
    exporter = exporter_for(node, collect_interval_ms=60_000)

    async def scrape_all() -> list[tuple[int, bytes]]:
        async with aiohttp.ClientSession() as session:

            async def one(i: int) -> tuple[int, bytes]:
                headers = {"Accept-Encoding": "gzip" if i % 2 else "identity"}
                async with session.get(exporter.url + "/metrics", headers=headers) as response:
                    return response.status, await response.read()

            return await asyncio.gather(*(one(i) for i in range(50)))

    results = asyncio.run(scrape_all())
    assert {status for status, _ in results} == {200}
    assert len({body for _, body in results}) == 1
    assert b"DCGM_FI_DEV_FB_USED" in results[0][1]


def test_hung_nvml_call_is_a_counted_timeout_and_health_goes_stale(node, exporter_for):
    exporter = exporter_for(node, collect_timeout_seconds=0.3, stale_after_seconds=0.5)
    node.sim.set_hang("nvmlDeviceGetPowerUsage", 2.0)
    wait_for(lambda: exporter.get("/health")[0] == 503, what="/health 503 while hung")
    assert exporter.get()[0] == 200, "the last snapshot is still served"
    node.sim.set_hang("nvmlDeviceGetPowerUsage", 0)
    wait_for(lambda: exporter.get("/health")[0] == 200, timeout=15, what="recovery")
    wait_for(
        lambda: (
            self_metric(exporter.metrics(), "gpufleet_exporter_errors_total", kind="timeout") >= 1
        ),
        what="timeout counted",
    )


def test_an_xid_wait_hung_at_shutdown_keeps_nvml_initialised(node, exporter_for):
    """The XID watcher's hung nvmlEventSetWait_v2 was said in a log line only, and the
    daemon shut NVML down under it (the event set itself was left allocated, since
    freeing it under a blocked wait is undefined)."""
    exporter = exporter_for(node)
    node.sim.set_hang("nvmlEventSetWait_v2", 6.0)
    time.sleep(1.5)  # its current wait ends, and the next one hangs
    exporter.stop()
    node.sim.set_hang("nvmlEventSetWait_v2", 0)
    assert exporter.quiescent is False


def test_dcgm_counters_file_with_every_default_field(node, exporter_for):
    csv = TEST_DATA / "dcgm-default-counters.csv"
    exporter = exporter_for(node, collectors=csv)
    # PROF (GPM) and NVLink rates need two collections.
    wait_for(lambda: "DCGM_FI_PROF_PCIE_RX_BYTES" in exporter.metrics(), what="GPM fields")
    names = {f.name for f in text_string_to_metric_families(exporter.metrics())}
    rows = [
        [cell.strip() for cell in line.split(",")]
        for line in csv.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    wanted = [field for field, kind, *_ in rows if kind != "label"]
    assert len(wanted) == 25
    assert [n for n in wanted if n not in names] == []
    power = samples(exporter.metrics(), "DCGM_FI_DEV_POWER_USAGE")[0]
    assert power.labels["DCGM_FI_DRIVER_VERSION"]


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def test_sim_fleet_exporter_removes_its_temp_proc_root_on_sigterm(tmp_path: Path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = ["exporter", "--sim-fleet", "2xH100", "-k", "-a", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.cli", *command],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"},
    )
    try:
        wait_for(lambda: _healthy(port), what="startup")
        assert [p.name[:18] for p in tmp_path.iterdir()] == ["gpufleet-sim-proc-"]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("fleet", "proc_root", "expected"),
    [
        ("1xH100", None, "sim"),
        ("1xH100", "/host/proc", "/host/proc"),
        (None, None, "/proc"),
    ],
    ids=["sim-default-uses-the-sims", "sim-explicit-wins", "real-nvml-keeps-proc"],
)
def test_proc_root_follows_a_simulated_backend_unless_set(fleet, proc_root, expected):
    settings = ExporterSettings(**({"proc_root": Path(proc_root)} if proc_root else {}))
    backend = open_backend(fleet)
    try:
        got = with_backend_proc_root(prepare(settings), backend).settings.proc_root
        assert got == (backend.proc_root if expected == "sim" else Path(expected))
    finally:
        backend.close()
