"""`mps_daemon_problem`: NVIDIA's MPS health query, run as a real subprocess against
stand-in `nvidia-cuda-mps-control` executables; every failure is a phrase, never a raise."""

import os
from pathlib import Path

import pytest

from gpufleet.plugin.host.mps_daemon import mps_daemon_problem


@pytest.mark.parametrize(
    ("script", "problem"),
    [
        (None, "nvidia-cuda-mps-control is not on PATH"),
        ('[ "$(cat)" = get_default_active_thread_percentage ] && echo 100.0', None),
        (
            "echo 'Cannot find MPS control daemon process' >&2; exit 1",
            "nvidia-cuda-mps-control (/mps/nvidia.com/gpu/pipe) exited 1: Cannot find MPS "
            "control daemon process",
        ),
        ("exit 3", "nvidia-cuda-mps-control (/mps/nvidia.com/gpu/pipe) exited 3"),
        (
            "printf 'bad \\377 byte\\n' >&2; exit 1",  # not UTF-8: a phrase all the same
            "nvidia-cuda-mps-control (/mps/nvidia.com/gpu/pipe) exited 1: bad \ufffd byte",
        ),
        (
            "exec sleep 30",
            "nvidia-cuda-mps-control (/mps/nvidia.com/gpu/pipe) did not answer within 5 s",
        ),
    ],
    ids=["not installed", "answers", "no daemon", "fails silently", "not utf-8", "hangs"],
)
def test_mps_daemon_problem(tmp_path: Path, monkeypatch, script: str | None, problem: str | None):
    if script is not None:
        control = tmp_path / "nvidia-cuda-mps-control"
        control.write_text(f"#!/bin/sh\n{script}\n")
        control.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin:/bin")
    # 5 s: room for a loaded machine to start a shell; only the hanging one waits it out
    assert mps_daemon_problem("nvidia.com/gpu", timeout_seconds=5) == problem
