"""The dry runs on simulated NVML of bench/real_gpu.py, real_gpu_ab.py and real_gpu_drain.py,
and bench/real_gpu_compare.py on what the exporters served on a real H200 (tests/data/h200/).
Nothing is timed."""

import json
import shutil
from pathlib import Path

from helpers.bench import run_bench

from bench.real_gpu import Daemon
from bench.real_gpu_compare import compare

H200 = Path(__file__).resolve().parent.parent / "data" / "h200"


def test_the_dry_run_registers_allocates_attributes_and_stops_cleanly(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run = run_bench(
        "real_gpu",
        *("--out", str(out), "--sim-fleet", "1xH100", "--collections", "5"),
        timeout=180,
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["plugin_registered"]
    (device,) = summary["admitted"]
    assert summary["allocate"]["envs"] == {"NVIDIA_VISIBLE_DEVICES": device}
    assert summary["ready"] == {"dcp": True, "compat": True, "default": True}
    assert all(stop["rc"] == 0 for stop in summary["stop"].values())
    assert "nvmlDeviceGetFieldValues" in summary["timing"]["nvml_calls"]
    assert all(ms > 0 for ms in summary["collection_cpu_ms"].values())
    # -k exporters attribute the GPU to the admitted pod; the one without -k does not.
    assert f'UUID="{device}"' in (out / "idle-dcp-before.prom").read_text()
    assert 'pod="llm-0"' in (out / "idle-dcp-before.prom").read_text()
    assert 'pod="llm-0"' not in (out / "idle-compat-before.prom").read_text()
    # A cdi-cri plugin names the device by its CDI name and writes the spec it names.
    cdi = summary["cdi"]["/"]
    kind = "k8s.device-plugin.nvidia.com/gpu"
    assert cdi["allocate"]["cdiDevices"] == [{"name": f"{kind}={device}"}]
    (spec,) = (out / cdi["dir"]).iterdir()
    assert json.loads(spec.read_text())["kind"] == kind
    assert cdi["stop"]["rc"] == 0


def test_the_ab_dry_run_reads_both_builds_alone_and_together(tmp_path: Path) -> None:
    out = tmp_path / "out"
    repo = Path(__file__).resolve().parent.parent.parent  # holds a gpufleet/ package
    args = ("--base", str(repo), "--out", str(out), "--sim-fleet", "1xH100")
    run = run_bench("real_gpu_ab", *args, "--phase-seconds", "4", timeout=180)
    assert run.returncode == 0, run.stderr
    phases = json.loads((out / "summary.json").read_text())["phases"]
    assert {name: set(builds) for name, builds in phases.items()} == {
        "head": {"head"},
        "base": {"base"},
        "both": {"head", "base"},
    }
    for builds in phases.values():
        for found in builds.values():
            assert found["phase_ms"] > 0 and found["collections"] >= 3
            assert found["stop"]["rc"] == 0


def test_the_ab_base_build_runs_the_package_in_base(tmp_path: Path) -> None:
    (tmp_path / "gpufleet").mkdir()
    (tmp_path / "gpufleet" / "__init__.py").write_text("raise SystemExit(7)\n")
    daemon = Daemon("base", ["exporter", "--help"], tmp_path, python_path=tmp_path)
    assert daemon.proc.wait(timeout=30) == 7
    daemon.stop()


def test_an_ab_base_without_gpufleet_is_one_line(tmp_path: Path) -> None:
    run = run_bench("real_gpu_ab", "--base", str(tmp_path), "--out", str(tmp_path / "o"))
    assert run.returncode == 2
    assert run.stderr.splitlines()[-1].endswith(f"--base: {tmp_path} holds no gpufleet/ package")


def test_an_unknown_ab_phase_is_one_line(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parent.parent.parent
    args = ("--base", str(repo), "--out", str(tmp_path / "o"), "--phases", "base,nope")
    run = run_bench("real_gpu_ab", *args)
    assert run.returncode == 2
    assert run.stderr.splitlines()[-1].endswith("--phases: nope: expected some of head, base, both")


def test_the_drain_dry_run_times_every_phase(tmp_path: Path) -> None:
    out = tmp_path / "drain.json"
    args = ("--out", str(out), "--sim-fleet", "1xH100", "--collections", "2")
    run = run_bench("real_gpu_drain", *args, timeout=60)
    assert run.returncode == 0, run.stderr
    found = json.loads(out.read_text())
    for name in ("alone", "drained", "alone_again"):
        assert found[name]["cpu_ms"] > 0
        assert found[name]["calls"]["nvmlDeviceGetFieldValues"]["calls"] == 1
        assert "nvmlDeviceGetProcessUtilization" not in found[name]["calls"]


def test_every_reading_on_the_h200_agrees_with_nvidia_smi() -> None:
    rows, bad = compare(H200)
    assert bad == 0
    assert len(rows) - 2 == 13 + 13 + 11  # dcp, default, compat fields that nvidia-smi shows


def copy_with(tmp_path: Path, old: str, new: str) -> Path:
    """tests/data/h200 with `old` replaced by `new` in the dcp exporter's two scrapes."""
    copy = tmp_path / "h200"
    shutil.copytree(H200, copy)
    for when in ("before", "after"):
        path = copy / f"load1-dcp-{when}.prom"
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new))
    return copy


def test_a_unit_error_disagrees(tmp_path: Path) -> None:
    # FB_USED in KiB instead of MiB: 17394 MiB read as 17811456.
    rows, bad = compare(copy_with(tmp_path, 'pod="llm-0"} 17394', 'pod="llm-0"} 17811456'))
    assert bad == 1
    (wrong,) = (r for r in rows if "**no**" in r)
    assert wrong.startswith("| load1 | dcp | DCGM_FI_DEV_FB_USED |")


def test_a_series_without_its_pod_disagrees(tmp_path: Path) -> None:
    _, bad = compare(copy_with(tmp_path, ',pod="llm-0"}', "}"))
    assert bad == 13
