"""The committed gRPC stubs (the kubelet's, KEDA's external scaler) are exactly what
scripts/gen_protos.py generates now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

REPO_ROOT = REPO
HINT = "stubs are stale: run python scripts/gen_protos.py"
PACKAGES = ("gpufleet/kubelet", "gpufleet/autoscaler/kedascaler")


@pytest.fixture(scope="module")
def fresh_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("stubs")
    subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "gen_protos.py"), "--out", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_committed_stubs_match_generator(fresh_root: Path, package: str) -> None:
    fresh_dir = fresh_root / package / "api"
    fresh = {p.name: p.read_bytes() for p in fresh_dir.iterdir()}
    committed = {p.name: p.read_bytes() for p in (REPO_ROOT / package / "api").glob("*_pb2*.py*")}
    assert sorted(fresh) == sorted(committed), f"generated file set differs; {HINT}"
    stale = [name for name in sorted(fresh) if fresh[name] != committed[name]]
    assert not stale, f"{', '.join(stale)} differ from the .proto files; {HINT}"
