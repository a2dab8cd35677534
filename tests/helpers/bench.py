"""Running a benchmark module as its users do: `python -m bench.NAME ...` from the repo root."""

import os
import subprocess
import sys
from pathlib import Path

from helpers import REPO


def run_bench(
    module: str, *args: str, timeout: float = 120, tmpdir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m bench.<module> <args>` (with TMPDIR=`tmpdir` when given, so a test can
    see what the bench leaves there); the caller checks the exit code and output."""
    env = None if tmpdir is None else {**os.environ, "TMPDIR": str(tmpdir)}
    return subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
