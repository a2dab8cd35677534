"""`gpufleet lab` as a user runs it: the whole stack comes up, prints its URLs, Prometheus
holds series from every part, the autoscaler scales the serving Deployment, and the page
draws every panel in a real (headless) Chromium.

One lab for all of it: it is the costliest thing the suite starts.
"""

import asyncio
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REPO, wait_for
from helpers.chromium import WINDOW, Panels, chromium
from helpers.kube import api_client
from helpers.lab_process import running_lab
from helpers.png import read_png
from helpers.tools import require
from kubernetes import client

from gpufleet.lab.main import watch_children
from gpufleet.lab.prometheus import Child, LabProcessError

pytestmark = pytest.mark.prometheus
PANELS = ("util-node", "util-pod", "replicas", "idle-cost")  # charts that must show data


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The lab on free ports; its printed URLs by name. Stopped by SIGHUP, as a closed
    terminal stops it: it exited at once, and Prometheus and Alertmanager, which take
    SIGHUP for "reload", outlived it on its ports."""
    require("prometheus")
    log = tmp_path_factory.mktemp("lab") / "stderr"
    with running_lab(log, "--scrape-seconds=1", stop_signal=signal.SIGHUP) as urls:
        yield urls
    for name in ("Prometheus", "Alertmanager") & urls.keys():
        with pytest.raises(urllib.error.URLError) as gone:
            urllib.request.urlopen(urls[name], timeout=5)
        assert isinstance(gone.value.reason, ConnectionRefusedError)  # nothing listens


def test_it_prints_every_url(lab: dict[str, str]) -> None:
    names = {"page", "Kubernetes API", "Prometheus", "autoscaler"}
    names |= {f"gpu-node-{i} {part}" for i in (0, 1) for part in ("exporter", "plugin")}
    if shutil.which("prometheus-alertmanager"):
        names.add("Alertmanager")
    assert set(lab) == names


def _query(lab: dict[str, str], expr: str) -> list[dict]:
    url = f"{lab['Prometheus']}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)["data"]["result"]


@pytest.mark.parametrize(
    ("part", "expr", "count"),
    [
        pytest.param("exporters", "count by (Hostname) (DCGM_FI_DEV_GPU_TEMP)", 2, id="exporter"),
        pytest.param("plugins", "gpufleet_plugin_registered == 1", 2, id="plugin"),
        pytest.param("serving pods", "count by (pod) (vllm:num_requests_running)", 1, id="vllm"),
        pytest.param("autoscaler", "gpufleet_autoscaler_ticks_total > 0", 1, id="autoscaler"),
        pytest.param("rules", "namespace:gpufleet_idle_gpu_cost:dollars_per_hour", 3, id="rules"),
    ],
)
def test_prometheus_holds_every_parts_series(lab, part: str, expr: str, count: int) -> None:
    wait_for(lambda: len(_query(lab, expr)) >= count, timeout=60, poll_seconds=0.5, what=f"{part}")


def test_each_nodes_daemons_answer_health_as_in_a_cluster(lab: dict[str, str]) -> None:
    """The chart probes /health; the lab's plugin served /metrics alone, on an aiohttp app of
    its own, not the server `gpufleet plugin --metrics-address` runs."""
    for node in ("gpu-node-0", "gpu-node-1"):
        for part in ("exporter", "plugin"):
            url = lab[f"{node} {part}"].removesuffix("/metrics") + "/health"
            with urllib.request.urlopen(url, timeout=10) as answer:
                assert answer.status == 200, url


def test_a_pods_name_is_one_pod_across_the_nodes(lab: dict[str, str]) -> None:
    """Both nodes named their pods alike (`inference/train-0`): every per-pod panel and
    rule summed two pods as one (141-171% utilization)."""

    def counts() -> tuple[int, int]:
        by_name = _query(lab, "count(count by (namespace, pod) (gpufleet_pod_gpu_share))")
        by_uid = _query(lab, "count(count by (pod_uid) (gpufleet_pod_gpu_share))")
        return tuple(int(float(r[0]["value"][1])) if r else 0 for r in (by_name, by_uid))

    wait_for(lambda: counts()[1] > 100, timeout=60, poll_seconds=0.5, what="both nodes' pods")
    by_name, by_uid = counts()
    assert by_name == by_uid


def test_the_autoscaler_scales_the_serving_deployment(lab: dict[str, str]) -> None:
    """6 requests/s on pods that serve 4 each: the Deployment grows past its one replica."""
    with api_client(lab["Kubernetes API"]) as api:
        apps = client.AppsV1Api(api)
        wait_for(
            lambda: apps.read_namespaced_deployment_scale("vllm", "llm").spec.replicas > 1,
            timeout=120,
            poll_seconds=1,
            what="the autoscaler scaling llm/vllm up",
        )
        autoscaler = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "autoscaling.gpufleet.dev", "v1alpha1", "llm", "gpuautoscalers", "vllm"
        )
    assert autoscaler["spec"]["nodePool"]["placeholders"] is True


def test_the_pages_demand_counts_the_requests_the_gateway_holds(lab: dict[str, str]) -> None:
    """At zero replicas the gateway's held requests are all the demand there is, and the
    line counted only the pods' running and waiting ones: it read nothing."""
    script = (REPO / "gpufleet" / "lab" / "page" / "page.js").read_text()
    ((_, query),) = re.findall(r'\["demand [^"]*",\s*([\'"])(.*?)\1', script)
    assert query.startswith("sum by (namespace) (")
    names = "count by (__name__) (" + query.removeprefix("sum by (namespace) (")
    wanted = {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "lab_gateway_requests_waiting",
    }
    wait_for(
        lambda: {r["metric"].get("__name__") for r in _query(lab, names)} >= wanted,
        timeout=60,
        poll_seconds=1,
        what="the demand's series",
    )


def _drawn(tmp_path: Path, lab: dict[str, str]) -> dict[str, dict[str, str]] | None:
    parser = Panels()
    parser.feed(chromium(tmp_path, lab["page"], "--dump-dom"))
    sections = parser.sections
    if all(int(sections.get(p, {}).get("data-points") or 0) > 0 for p in PANELS):
        return sections
    return None


def test_the_page_draws_every_panel_inchromium(lab: dict[str, str], tmp_path: Path) -> None:
    require("chromium")
    wait_for(lambda: _query(lab, "gpufleet_autoscaler_desired_replicas"), timeout=60)
    sections = wait_for(
        lambda: _drawn(tmp_path, lab), timeout=120, poll_seconds=2, what="every panel drawn"
    )
    assert "data-error" not in sections["alerts"] and "data-points" in sections["alerts"]
    chromium(tmp_path, lab["page"], f"--screenshot={tmp_path / 'page.png'}")
    width, height, rows = read_png((tmp_path / "page.png").read_bytes())
    assert (width, height) == WINDOW
    bpp = len(rows[0]) // width
    for panel in PANELS:
        left, top, w, h = (int(v) for v in sections[panel]["data-box"].split(","))
        coloured = 0
        for y in range(top, min(top + h, height)):
            row = rows[y]
            for x in range(left, min(left + w, width)):
                r, g, b = row[x * bpp : x * bpp + 3]
                coloured += max(r, g, b) - min(r, g, b) > 80  # a series, not text or frame
        # Inside the chart (legends excluded): a blank chart has none; a line of the lab's
        # first minute, a few dozen.
        assert coloured > 20, f"{panel}: {coloured} coloured pixels"


async def test_a_child_that_exits_while_the_lab_runs_is_one_line(tmp_path: Path, caplog) -> None:
    """Prometheus or the autoscaler dying left the lab's terminal silent: only the page's
    panels froze."""
    caplog.set_level(logging.ERROR, logger="gpufleet.lab.main")
    child = Child(
        [sys.executable, "-c", "raise SystemExit(3)"],
        tmp_path / "child.log",
        url="http://127.0.0.1:9",
        name="Prometheus",
    )
    stop = asyncio.Event()
    watch = asyncio.create_task(watch_children([child], stop, every_seconds=0.05))
    await asyncio.to_thread(wait_for, lambda: caplog.records, what="the line")
    await asyncio.sleep(0.3)  # several more polls: still one line
    stop.set()
    await watch
    assert [r.getMessage() for r in caplog.records] == [
        f"Prometheus exited with code 3 (see {tmp_path / 'child.log'}); the lab runs on without it"
    ]


def test_a_child_that_fails_to_start_says_why_in_the_error(tmp_path: Path) -> None:
    """The error said "(see .../prometheus.log)", a file in the lab's temporary directory,
    gone by the time anyone read the line: a broken rules file said nothing of itself."""
    said = 'msg="Error loading rule file patterns" file=/rules/bad.rules.yml'
    child = Child(
        [sys.executable, "-c", f"print('starting'); print({said!r}); raise SystemExit(1)"],
        tmp_path / "child.log",
        url="http://127.0.0.1:9",
        name="prometheus",
    )
    with pytest.raises(LabProcessError) as raised:
        child.wait_ready("/-/ready")
    assert str(raised.value) == f"prometheus exited with code 1: {said}"


def test_a_relative_rules_folder_is_read_from_where_the_lab_was_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prometheus runs in the lab's temporary directory, where `--rules rules` matched no
    file: it ran without a rule and nothing said so."""
    from gpufleet.lab import flags

    monkeypatch.chdir(tmp_path)
    (tmp_path / "rules").mkdir()
    args = flags.parse(flags.parser(""), ["--rules", "rules"])
    assert args.rules == tmp_path / "rules"


def test_prometheus_takes_a_scrape_interval_that_is_not_whole_seconds(tmp_path: Path) -> None:
    """`--scrape-seconds 3.3` wrote "3.3s", which Prometheus refuses: the lab failed to
    start (and the autoscaler's --rate-window got 13.2s, which it refuses too)."""
    require("prometheus")
    from gpufleet.lab import prometheus as prom
    from gpufleet.lab.main import _unused_port

    (tmp_path / "targets").mkdir()
    child = prom.start_prometheus(
        tmp_path,
        host="127.0.0.1",
        port=_unused_port("127.0.0.1"),
        targets_dir=tmp_path / "targets",
        rule_files=[],
        scrape_seconds=3.3,
    )
    try:
        child.wait_ready("/-/ready")
    finally:
        child.stop()


def test_ctrl_c_during_start_up_starts_nothing_more(tmp_path: Path) -> None:
    """Ctrl-C waited for every part still to start (each up to 30 s), then printed the
    banner of a lab about to stop and exited 0; a very early one exited 130."""
    require("prometheus")
    from helpers import LAB_PORTS

    log = tmp_path / "lab.log"
    command = [sys.executable, "-m", "gpufleet.cli", "lab", "--address=127.0.0.1:0", *LAB_PORTS]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log.open("w"), text=True)
    try:
        wait_for(lambda: "plugin started" in log.read_text(), timeout=60, what="start-up")
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    said = log.read_text()
    assert proc.returncode == 130, said
    assert "lab running" not in stdout + said and "Traceback" not in said
    assert "stopped during start-up" in said


def test_ctrl_c_while_a_part_is_not_yet_ready_ends_the_wait(tmp_path: Path) -> None:
    """A readiness wait under way (each up to 30 s) ran to its end before the stop was
    seen: here a Prometheus that never answers, reported as failed after 30 s, exit 1."""
    from helpers import LAB_PORTS

    started = tmp_path / "started"
    fake = tmp_path / "bin" / "prometheus"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\ntouch {started}\nexec sleep 600\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
    log = tmp_path / "lab.log"
    command = [sys.executable, "-m", "gpufleet.cli", "lab", "--address=127.0.0.1:0", *LAB_PORTS]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log.open("w"), env=env)
    try:
        wait_for(started.exists, timeout=60, what="the fake Prometheus started")
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    said = log.read_text()
    assert proc.returncode == 130, said
    assert "stopped during start-up" in said and "did not answer" not in said
