"""`bench.entry.exit_with`: a report cut short by its reader (`| head`) ends quietly, and a
run that never ends in one line."""

import subprocess
import sys

from helpers.bench import REPO

PRINTS_A_LOT = """
from bench.entry import exit_with

def main():
    for n in range(1_000_000):
        print("row", n)
    return 0

exit_with(main)
"""


def test_a_reader_that_goes_away_early_gets_no_traceback() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", PRINTS_A_LOT],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    assert child.stdout.readline() == b"row 0\n"
    child.stdout.close()  # as `head -1` does
    stderr = child.stderr.read().decode()
    assert child.wait(timeout=60) == 141, stderr
    assert stderr == ""


def test_the_exit_code_is_mains() -> None:
    code = "from bench.entry import exit_with\nexit_with(lambda: 3)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO, check=False).returncode == 3


def test_a_run_that_never_ends_is_one_line_and_exit_1() -> None:
    """The engine's error as `sweep.run` words it, from a grid's worker or the main process."""
    code = (
        "from bench.entry import exit_with\n"
        "from gpufleet.autoscaler.replay.core.engine import SimulationError\n"
        "def main():\n"
        "    raise SimulationError('mix-s1-x10 gpufleet target_attainment=0.996: policy gpufleet: "
        "5 requests still unserved 86400 s after the trace ended')\n"
        "exit_with(main)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert done.stderr == (
        "-c: error: mix-s1-x10 gpufleet target_attainment=0.996: policy gpufleet: "
        "5 requests still unserved 86400 s after the trace ended\n"
    )
