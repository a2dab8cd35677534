"""The committed kubelet stubs are exactly what scripts/gen_protos.py generates now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import REPO

REPO_ROOT = REPO
API_DIR = REPO_ROOT / "gpufleet" / "kubelet" / "api"
HINT = "stubs are stale: run python scripts/gen_protos.py"


def test_committed_stubs_match_generator(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "gen_protos.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
    )
    fresh_dir = tmp_path / "gpufleet" / "kubelet" / "api"
    fresh = {p.name: p.read_bytes() for p in fresh_dir.iterdir()}
    committed = {p.name: p.read_bytes() for p in API_DIR.glob("*_pb2*.py*")}
    assert sorted(fresh) == sorted(committed), f"generated file set differs; {HINT}"
    stale = [name for name in sorted(fresh) if fresh[name] != committed[name]]
    assert not stale, f"{', '.join(stale)} differ from the .proto files; {HINT}"
