"""The container image, as far as it can be checked without a Docker engine: the Dockerfile's
steps replayed on this machine (wheel, clean virtualenv, pinned dependencies only), and the
Dockerfile, the chart and the package agreeing on entrypoint, user, version and paths."""

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import yaml
from helpers import REPO, wait_for
from helpers.helm import render

import gpufleet
import gpufleet.cli

DOCKERFILE = (REPO / "Dockerfile").read_text()
LOCK = REPO / "docker" / "requirements.txt"
CHART = REPO / "helm" / "gpufleet"
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
VENV = "/opt/venv"  # where the Dockerfile installs
_TEXT = {"check": True, "capture_output": True, "text": True, "timeout": 60}

# The closure of a distribution's requirements, read in the target interpreter.
_CLOSURE = """
import importlib.metadata as md, re, sys
from pip._vendor.packaging.requirements import Requirement
seen, todo = set(), ["gpufleet"]
while todo:
    for spec in md.requires(todo.pop()) or []:
        req = Requirement(spec)
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        if name not in seen:
            seen.add(name)
            todo.append(req.name)
print("\\n".join(sorted(seen)))
"""


def _instruction(name: str) -> list[str]:
    return re.findall(rf"^{name} (.+)$", DOCKERFILE, re.M)


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_wheel_installs_and_runs_from_a_clean_virtualenv(tmp_path):
    """The Dockerfile's build stage, here: the wheel alone, the pinned dependencies with
    --no-deps (so the lock must be complete), pip check, then every daemon's --help."""
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*build, "-w", str(wheels), str(REPO)], check=True, capture_output=True)
    (wheel,) = wheels.glob("gpufleet-*.whl")
    assert wheel.name.startswith(f"gpufleet-{gpufleet.__version__}-")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    pip = [
        python,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--no-compile",
        "--disable-pip-version-check",
    ]
    subprocess.run([*pip, "-r", str(LOCK)], check=True, capture_output=True)
    subprocess.run([*pip, str(wheel)], check=True, capture_output=True)
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout

    # The lock holds the runtime closure exactly: no test or dev package rides along.
    closure = subprocess.run(
        [python, "-c", _CLOSURE], check=True, capture_output=True, text=True
    ).stdout.split()
    locked = [
        _normalized(line.split("==")[0])
        for line in LOCK.read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert sorted(locked) == sorted(closure), "regenerate docker/requirements.txt (see its header)"

    script = venv / "bin" / "gpufleet"
    # argv[0] of a console script is its shebang's interpreter: what config-manager matches.
    assert script.read_text().splitlines()[0] == f"#!{venv}/bin/python"
    top = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert top.returncode == 0 and "exporter" in top.stdout, top.stderr
    for daemon in ("exporter", "plugin", "autoscaler"):
        done = subprocess.run(
            [str(script), daemon, "--help"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"usage: gpufleet {daemon}"), done.stdout[:200]

    # NVIDIA's chart runs `command: [nvidia-device-plugin]`, and its config-manager finds
    # the plugin by that name at the head of its command line (the Dockerfile copies the
    # launcher there).
    launcher = venv / "bin" / "nvidia-device-plugin"
    shutil.copy2(REPO / "docker" / "nvidia-device-plugin", launcher)
    path = {**os.environ, "PATH": f"{venv}/bin:{os.environ['PATH']}"}
    done = subprocess.run(
        ["nvidia-device-plugin", "--help"], capture_output=True, text=True, timeout=60, env=path
    )
    assert done.returncode == 0 and done.stdout.startswith("usage: gpufleet plugin"), done.stderr
    plugin = subprocess.Popen(
        ["nvidia-device-plugin", "--sim-fleet", "1xH100", "--metrics-address", ""],
        env={**path, "KUBELET_SOCKET": str(tmp_path / "kubelet.sock")},
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        cmdline = Path(f"/proc/{plugin.pid}/cmdline")
        wait_for(lambda: b"gpufleet.cli" in cmdline.read_bytes(), what="the plugin's python")
        assert cmdline.read_bytes().split(b"\0")[0] == b"nvidia-device-plugin"
    finally:
        plugin.terminate()
        plugin.wait(timeout=20)

    # An installed lab loads the alerts: rules/ travels in the wheel (setup.py). Run
    # outside the checkout, whose gpufleet/ would be imported first.
    where = "from gpufleet.lab.flags import RULES; print(RULES)"
    done = subprocess.run([python, "-c", where], cwd=tmp_path, **_TEXT)
    rules = Path(done.stdout.strip())
    assert rules.is_relative_to(venv)
    assert {p.name: p.read_text() for p in rules.glob("*.rules.yml")} == {
        p.name: p.read_text() for p in (REPO / "rules").glob("*.rules.yml")
    }


def test_every_locked_dependency_is_pinned():
    lines = [line for line in LOCK.read_text().splitlines() if line and not line.startswith("#")]
    assert lines
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==[^=\s]+", line) for line in lines), lines


def test_image_reference_is_the_package_version():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == chart["version"] == project["version"] == gpufleet.__version__
    assert VALUES["image"]["tag"] == ""  # empty: the appVersion, so one bump moves all
    assert f"ghcr.io/gpufleet/gpufleet:{gpufleet.__version__}" in DOCKERFILE


def test_entrypoint_user_and_paths_agree_with_the_chart():
    assert _instruction("ENTRYPOINT") == [f'["{VENV}/bin/gpufleet"]']
    # NVIDIA's device-plugin chart names its binary: the launcher goes into the image,
    # executable, beside the venv's python (the wheel test runs it).
    launcher = "docker/nvidia-device-plugin"
    assert f"COPY {launcher} {VENV}/bin/nvidia-device-plugin" in DOCKERFILE
    assert f"!{launcher}" in (REPO / ".dockerignore").read_text().splitlines()
    assert os.access(REPO / launcher, os.X_OK)
    # the console script is installed through the venv's python (its shebang)
    assert f"{VENV}/bin/python -m pip install --no-deps /wheels/*.whl" in DOCKERFILE
    assert VALUES["configManager"]["processToSignal"] == f"{VENV}/bin/python"
    (user,) = _instruction("USER")
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    uid, gid = user.split(":")
    assert f"runAsUser: {uid}\nrunAsGroup: {gid}" in helpers
    (base,) = {m for m in re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE, re.M)}
    minor = ".".join(base.split(":")[1].split(".")[:2])
    assert "for Python " + minor in LOCK.read_text(), "the lock is resolved for the image's Python"


def test_chart_containers_run_a_subcommand_of_the_entrypoint(tmp_path):
    """Containers of our image set args, never command: the ENTRYPOINT stays gpufleet,
    and the first argument is one of its subcommands."""
    objects = render({}, tmp_path=tmp_path)
    image = f"{VALUES['image']['repository']}:{gpufleet.__version__}"
    ours = [
        c
        for o in objects
        if o["kind"] in ("DaemonSet", "Deployment")
        for c in o["spec"]["template"]["spec"]["containers"]
        if c["image"] == image
    ]
    assert sorted(c["args"][0] for c in ours) == ["autoscaler", "exporter", "plugin"]
    for c in ours:
        assert "command" not in c, c["name"]
        assert f"  {c['args'][0]} " in gpufleet.cli.USAGE


def test_a_wheel_built_from_the_sdist_carries_the_rules(tmp_path):
    """`python -m build` and `pip install <sdist>` build the wheel from the sdist: without
    rules/ in it, that wheel's lab ran Prometheus with no alerts."""
    sdist_dir, wheels = tmp_path / "sdist", tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "setup.py", "-q", "sdist", "-d", str(sdist_dir)],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    (sdist,) = sdist_dir.glob("gpufleet-*.tar.gz")
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*build, "-w", str(wheels), str(sdist)], check=True, capture_output=True)
    (wheel,) = wheels.glob("gpufleet-*.whl")
    with zipfile.ZipFile(wheel) as zipped:
        shipped = sorted(
            Path(n).name for n in zipped.namelist() if n.startswith("gpufleet/lab/rules/")
        )
    assert shipped == sorted(p.name for p in (REPO / "rules").glob("*.rules.yml"))
