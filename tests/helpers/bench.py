"""Running a benchmark module as its users do: `python -m bench.NAME ...` from the repo root."""

import subprocess
import sys

from helpers import REPO


def run_bench(module: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `python -m bench.<module> <args>`; the caller checks the exit code and output."""
    return subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
