"""The `gpufleet` command as users run it: startup errors, help, SIGTERM, the lab."""

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from helpers import LAB_PORTS, TEST_DATA, free_port, wait_for
from helpers.lab_process import running_lab

GPUFLEET = [sys.executable, "-m", "gpufleet.cli"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*GPUFLEET, *args], capture_output=True, text=True, timeout=timeout, env=ENV
    )


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, ""
    except OSError:
        return 0, ""


def test_bad_counters_line_names_file_and_line(tmp_path: Path):
    csv = tmp_path / "bad.csv"
    csv.write_text("# mine\nDCGM_FI_DEV_GPU_TEMP, gauge, ok\nDCGM_FI_DEV_SM_CLOCK, gauge\n")
    result = run("exporter", "--fake-gpus", "-a", "127.0.0.1:0", "-f", str(csv))
    assert result.returncode == 1
    assert f"{csv}:3:" in result.stderr


def test_counters_file_that_is_not_utf8_names_file_and_line(tmp_path: Path):
    """Issue 15: a Latin-1 help text gave a raw UnicodeDecodeError."""
    csv = tmp_path / "latin1.csv"
    csv.write_bytes(b"# mine\nDCGM_FI_DEV_GPU_TEMP, gauge, Temp\xe9rature (in C).\n")
    result = run("exporter", "--fake-gpus", "-a", "127.0.0.1:0", "-f", str(csv))
    assert result.returncode == 1
    assert f"{csv}:2: not UTF-8 text (byte 0xe9)" in result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1


def test_unknown_counter_is_a_warning_naming_the_line(tmp_path: Path):
    csv = tmp_path / "c.csv"
    csv.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, ok\nDCGM_FI_NOT_A_FIELD, gauge, x\n")
    port = free_port()
    proc = subprocess.Popen(
        [*GPUFLEET, "exporter", "--fake-gpus", "-a", f"127.0.0.1:{port}", "-f", str(csv)],
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        wait_for(lambda: get(f"http://127.0.0.1:{port}/health")[0] == 200, what="startup")
        assert "DCGM_FI_DEV_GPU_TEMP" in get(f"http://127.0.0.1:{port}/metrics")[1]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0
    assert f"{csv}:2" in err and "DCGM_FI_NOT_A_FIELD" in err


def test_the_peer_charts_pcie_throughput_rows_are_served(tmp_path: Path):
    """dcgm-exporter's chart lists them in its customMetrics example; they were unknown
    fields here, each row skipped with a warning while /health said 200. The rows are the
    chart's own, uncommented as a user would."""
    values = (TEST_DATA / "dcgm-exporter" / "chart-values.yaml").read_text()
    rows = [
        line.strip().removeprefix("# ")  # the whole customMetrics example is commented out
        for line in values.splitlines()
        if "DCGM_FI_DEV_PCIE_" in line and "_THROUGHPUT," in line
    ]
    assert len(rows) == 2
    csv = tmp_path / "c.csv"
    csv.write_text("\n".join(rows) + "\n")
    port = free_port()
    proc = subprocess.Popen(
        [*GPUFLEET, "exporter", "--fake-gpus", "-a", f"127.0.0.1:{port}", "-f", str(csv)],
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        wait_for(lambda: "DCGM_FI_DEV_PCIE_RX_THROUGHPUT{" in get(url)[1], what="served")
        text = get(url)[1]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    for way in ("TX", "RX"):
        values = [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(f"DCGM_FI_DEV_PCIE_{way}_THROUGHPUT{{")
        ]
        assert len(values) == 8 and all(v >= 0 for v in values), values  # one per GPU
    assert "unknown" not in err


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--no-such-flag"], 2, "--no-such-flag"),
        (["--collect-interval", "3"], 2, "3 ms is below the 100 ms minimum"),
        (["--compat", "9"], 2, "invalid flag --compat"),
        (["--kubernetes=yes"], 2, "invalid flag --kubernetes: 'yes' is not a boolean"),
        (["--fake-gpus", "--devices", "q"], 1, "--devices"),
        (
            ["--fake-gpus", "-a", "127.0.0.1:0", "-d", "g:\u00b2"],
            1,
            "--devices 'g:\u00b2': bad range",
        ),
        (
            ["--fake-gpus", "-a", "127.0.0.1:0", "-d", "g:0-99"],
            1,
            "--devices 'g:0-99': couldn't find requested GPU ID '8' (missing: 8-99; GPUs on "
            "this node: 0-7)",
        ),
        (
            ["--fake-gpus", "-a", "127.0.0.1:0", "-d", "i:5"],
            1,
            "--devices 'i:5': couldn't find requested GPU instance ID '5'",
        ),
        (["--fake-gpus", "--address", "nope"], 1, "--address"),
        (["--sim-fleet", "8xH900"], 1, "H900"),
        (["--fake-gpus", "--web-config-file", "/nonexistent/web.yml"], 1, "/nonexistent/web.yml"),
        (["-f", "/nonexistent/counters.csv", "--fake-gpus"], 1, "/nonexistent/counters.csv"),
    ],
    ids=[
        "unknown flag",
        "interval in seconds by mistake",
        "bad choice",
        "bad boolean",
        "bad device selector",
        "device index not a digit",
        "device range past the last GPU",
        "instances of a GPU without MIG",
        "bad address",
        "unknown simulated model",
        "missing web config",
        "missing counters file",
    ],
)
def test_startup_errors_exit_non_zero_naming_the_input(args, code, message):
    result = run("exporter", *args)
    assert result.returncode == code, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_busy_port_is_one_line_naming_the_flag():
    """It said "[Errno 98] cannot listen on ...: error while attempting to bind on address
    (...): address already in use", naming no flag (the plugin and the autoscaler do)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("exporter", "--fake-gpus", "-a", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert result.stderr.strip().endswith(
        f"--address 127.0.0.1:{port}: cannot listen on 127.0.0.1:{port}: Address already in use"
    )
    assert result.stderr.count("\n") == 1


def test_a_selection_matching_nothing_is_warned_and_counted():
    """Issue 15: `-d i` on a node without MIG served nothing, silently. Without a range it
    still runs (a DaemonSet spans nodes that differ), says so once, and reports 0."""
    port = free_port()
    proc = subprocess.Popen(
        [*GPUFLEET, "exporter", "--fake-gpus", "-a", f"127.0.0.1:{port}", "-c", "100", "-d", "i"],
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        wait_for(
            lambda: (
                "\ngpufleet_exporter_entities 0\n" in get(f"http://127.0.0.1:{port}/metrics")[1]
            ),
            what="the entities gauge at 0",
        )
        assert "DCGM_FI_DEV_GPU_TEMP{" not in get(f"http://127.0.0.1:{port}/metrics")[1]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert err.count("-d/--devices selects none of this node's 8 GPUs") == 1


def test_no_gpu_gives_a_hint_not_a_traceback():
    result = run("exporter", "-a", "127.0.0.1:0")
    assert result.returncode == 1
    assert "cannot initialise NVML" in result.stderr and "--sim-fleet" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_explains_flags_and_env_vars():
    result = run("exporter", "--help")
    assert result.returncode == 0
    for needle in ("--collectors", "DCGM_EXPORTER_COLLECTORS", "--kubernetes", "--sim-fleet"):
        assert needle in result.stdout
    assert run("--help").returncode == 0
    assert run("nonsense").returncode == 2


def test_unknown_command_is_one_line_with_a_hint():
    result = run("exportr")
    assert result.returncode == 2
    assert result.stderr == (
        "gpufleet: unknown command 'exportr' (did you mean 'exporter'?); "
        "run 'gpufleet --help' for the commands\n"
    )


def test_sigterm_shuts_down_gracefully():
    port = free_port()
    # dcgm-exporter spellings a DaemonSet may carry: urfave/cli booleans, DCGM-only flags.
    dcgm_args = ["--kubernetes=false", "--enable-pprof", "--dump-compression=false"]
    proc = subprocess.Popen(
        [*GPUFLEET, "exporter", "--fake-gpus", "-a", f"127.0.0.1:{port}", "-c", "100", *dcgm_args],
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        wait_for(lambda: get(f"http://127.0.0.1:{port}/health")[0] == 200, what="startup")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert "shutting down" in err


@pytest.mark.parametrize("address", ["[::]", "0.0.0.0"])
def test_an_unspecified_host_listens_on_ipv4_and_ipv6(address: str):
    """As Go listens on it (dcgm-exporter's help suggests `[::]:9400`). `[::]` was bound
    IPv6 only: IPv4 scrapes and the kubelet's probes were refused."""
    port = free_port()
    proc = subprocess.Popen(
        [*GPUFLEET, "exporter", "--fake-gpus", "-a", f"{address}:{port}"],
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        wait_for(lambda: get(f"http://127.0.0.1:{port}/health")[0] == 200, what="over IPv4")
        assert get(f"http://[::1]:{port}/health")[0] == 200  # and over IPv6
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)


def test_sighup_reads_the_counters_again_and_keeps_serving(tmp_path: Path):
    """dcgm-exporter's SIGHUP, and a change to its -f file, are a hot reload; here SIGHUP
    killed the process (exit 129), and a changed file was never read again. A file that
    cannot be read keeps the list in use."""
    csv = tmp_path / "c.csv"
    csv.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n")
    log = tmp_path / "stderr"
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    proc = subprocess.Popen(
        [*GPUFLEET, "exporter", "--fake-gpus", "-a", f"127.0.0.1:{port}", "-f", str(csv)],
        stderr=log.open("w"),
        env=ENV,
    )

    def serving(name: str) -> bool:
        return f"{name}{{" in get(url)[1]

    try:
        wait_for(lambda: serving("DCGM_FI_DEV_GPU_TEMP"), what="the first list")
        csv.write_text("DCGM_FI_DEV_POWER_USAGE, gauge, power\n")
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: serving("DCGM_FI_DEV_POWER_USAGE"), what="the reloaded list")
        assert not serving("DCGM_FI_DEV_GPU_TEMP")
        csv.write_text("DCGM_FI_DEV_GPU_TEMP, gauge\n")  # a malformed line
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "the counters in use stay" in log.read_text(), what="the refusal")
        assert serving("DCGM_FI_DEV_POWER_USAGE") and proc.poll() is None
        # A ConfigMap's update sends no signal: a change to the file is read too.
        csv.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n")
        wait_for(lambda: serving("DCGM_FI_DEV_GPU_TEMP"), timeout=30, what="the changed file")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
    assert proc.returncode == 0, log.read_text()
    assert "Traceback" not in log.read_text()


def test_lab_serves_an_attributed_node(tmp_path: Path):
    with running_lab(tmp_path / "lab.log", "--churn-seconds", "0") as urls:
        exporter = urls["gpu-node-0 exporter"]
        wait_for(
            lambda: 'pod="serve-' in get(exporter)[1], timeout=30, what="lab metrics with pods"
        )
        text = get(exporter)[1]
        assert 'GPU_I_PROFILE="1g.10gb"' in text and 'pod="train-0"' in text


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        pytest.param(("--fleet", "8xH999"), 2, "--fleet: unknown GPU model 'H999'", id="bad-fleet"),
        pytest.param(
            ("--address", "nonsense"), 2, "--address: listen address 'nonsense'", id="bad-address"
        ),
        # issue 15: these were 40-line tracebacks after "lab running"
        pytest.param(
            ("--interval-ms", "1"),
            2,
            "invalid --interval-ms: 1 ms is below the 100 ms minimum",
            id="interval-in-seconds",
        ),
        pytest.param(("--replicas", "0"), 2, "--replicas: 0 is below the minimum", id="replicas"),
        pytest.param(
            ("--churn-seconds", "-1"), 2, "--churn-seconds: -1 is below", id="negative-churn"
        ),
        pytest.param(("--intervall-ms", "5"), 2, "(did you mean '--interval-ms'?)", id="flag-typo"),
        # issue 19: the whole stack's flags
        pytest.param(("--nodes", "0"), 2, "--nodes: 0 is below the minimum", id="no-nodes"),
        pytest.param(
            ("--web-address", "nonsense"), 2, "--web-address: listen address", id="bad-web"
        ),
        pytest.param(
            ("--workload", "nosuch"), 2, "--workload: workload 'nosuch': unknown", id="workload"
        ),
        pytest.param(
            ("--trace", "/nonexistent.csv"), 2, "--trace: /nonexistent.csv: cannot read", id="trace"
        ),
        # the bad-input audit: a lab that said "scaled by the GPUAutoscaler" while its spec
        # was InvalidSpec; --dra 100 run as --dra 2; a pydantic traceback for port 65536
        pytest.param(
            ("--min-replicas", "5", "--max-replicas", "2"),
            2,
            "--min-replicas 5 is more than --max-replicas 2",
            id="min-over-max",
        ),
        pytest.param(("--dra", "3"), 2, "--dra 3: the first node has 2 whole GPUs", id="dra"),
        pytest.param(
            ("--plugin-address", "127.0.0.1:65535"),
            2,
            "--plugin-address: node 1 would listen on port 65536, over 65535",
            id="plugin-port-past-the-last",
        ),
        pytest.param(
            ("--workload", "flash:rate=1e20"), 2, "requests, more than 100,000,000", id="huge"
        ),
        # the lab audit: 1e9 froze the API server's loop in a Poisson step that never ended;
        # a mistyped --rules left the rule-fed panels empty and no alert to fire
        pytest.param(("--rate", "1e9"), 2, "--rate: 1e9 is over the maximum of 1000", id="rate"),
        pytest.param(
            ("--rules", "/nonexistent"), 2, "--rules /nonexistent: no such directory", id="rules"
        ),
    ],
)
def test_lab_bad_input_is_one_line_not_a_traceback(args, code: int, message: str):
    # Its API port taken by something else: the mistaken flag is still the line (the
    # port was checked first, and the line named it: the suite failed beside a running lab).
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        api = f"127.0.0.1:{taken.getsockname()[1]}"
        result = run("lab", *args, "--api-address", api)
    assert result.returncode == code
    assert message in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "lab running" not in result.stderr


def test_lab_names_its_flag_when_a_later_nodes_exporter_port_is_taken():
    """Node 1's exporter listens on --address's port + 1. Its clash was named
    `--address 127.0.0.1:P+1`, a value nobody typed."""
    for _ in range(100):  # a free port whose next one can be taken here
        first = free_port()
        with socket.socket() as taken:
            try:
                taken.bind(("127.0.0.1", first + 1))
            except OSError:
                continue
            taken.listen()
            result = run("lab", f"--address=127.0.0.1:{first}", "--churn-seconds", "0", *LAB_PORTS)
        break
    assert result.returncode == 1
    assert f"--address: cannot listen on 127.0.0.1:{first + 1}: " in result.stderr
    assert f"--address 127.0.0.1:{first + 1}" not in result.stderr
    assert "Traceback" not in result.stderr


def test_lab_help_describes_the_default_node():
    """Issue 15: the help said "6 whole H100s"; it must count what the lab builds."""
    from gpufleet.lab.node import NodeLayout, SimNode

    with SimNode(NodeLayout(), with_kubelet=False) as node:
        pods = list(node.pods.values())
        gpus = node.sim.devices
    whole = sum(p.resource_name == "nvidia.com/gpu" for p in pods)
    shared_gpus = {p.device_ids[0].split("::")[0] for p in pods if "::" in p.device_ids[0]}
    mig_gpus = [g for g in gpus if g.mig_enabled]
    help_text = " ".join(run("lab", "--help").stdout.split())
    assert f"{len(gpus)} H100s ({whole} whole GPUs" in help_text
    assert f"{len(shared_gpus)} time-sliced {NodeLayout().replicas} ways" in help_text
    assert f"{len(mig_gpus)} split into {len(mig_gpus[0].mig)} MIG slices each" in help_text
    assert f"({len(pods)} pods)" in help_text


@pytest.mark.parametrize(
    "flag", ["--address", "--plugin-address", "--web-address", "--prometheus-address"]
)
def test_lab_on_a_busy_port_says_so_and_exits_1(flag: str):
    """The exporter's port, and (issue 19) those of the plugin, the page and Prometheus."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = [p for p in LAB_PORTS if not p.startswith(flag + "=")]
        address = "--address=127.0.0.1:0" if flag != "--address" else ""
        args = [a for a in (address, f"{flag}=127.0.0.1:{port}") if a]
        result = run("lab", *args, "--churn-seconds", "0", *ports)
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
    assert "lab running" not in result.stderr  # issue 15: it said so before failing
