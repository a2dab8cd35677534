"""`gpufleet lab` as a user starts it, every listener on a port the kernel picks.

The tests read the exporter's and the other parts' addresses from the lab's banner, not from
a port probed free beforehand: a probed port can be taken before the lab binds it, and the
lab's second node listens on the probed port plus one, which nobody probed (both lab tests
that did so timed out once under the full suite).
"""

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from helpers import LAB_PORTS

_URL_LINE = re.compile(r"  (.+?)\s{2,}(http://\S+)\n")


@contextlib.contextmanager
def running_lab(
    log: Path, *args: str, stop_signal: signal.Signals = signal.SIGINT
) -> Iterator[dict[str, str]]:
    """The lab with `args`, started; yields the URLs its banner prints, by name
    ("gpu-node-0 exporter", "Prometheus", ...).

    Its log goes to the file `log`: a pipe nobody reads would fill and stall the lab. On the
    way out it gets `stop_signal`, must exit 0 without a traceback, and a failing test shows
    its log.
    """
    command = [sys.executable, "-m", "gpufleet.cli", "lab", "--address=127.0.0.1:0"]
    proc = subprocess.Popen(
        [*command, *LAB_PORTS, *args],
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    urls: dict[str, str] = {}
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the banner, printed once everything runs
            if line.startswith("gpufleet lab running"):
                continue
            match = _URL_LINE.fullmatch(line)
            if not match:
                break
            urls[match[1]] = match[2]
        assert "page" in urls, f"no banner: {urls}\n{log.read_text()[-3000:]}"
        yield urls
    finally:
        proc.send_signal(stop_signal)
        proc.communicate(timeout=60)
        print(log.read_text()[-6000:])  # shown only with a failure
    err = log.read_text()
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err
