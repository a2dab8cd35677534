"""`bench.entry.exit_with`: a report cut short by its reader (`| head`) ends quietly."""

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
