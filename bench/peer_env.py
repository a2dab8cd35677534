"""The peer's own Python environment: nvitop-exporter, installed from PyPI with pip.

The peer must not share gpufleet's environment: its process would then be able to import
what ours does, and its dependencies (psutil, nvitop) would be ours to pin. A virtual
environment under `.bench/` (ignored by git) holds the pinned release and its own
dependencies; it is made once and reused while the pin is unchanged.

`python3 -m bench.peer_env` makes it and prints its Python; `bench.exporter_bench` does the
same before it runs.
"""

import subprocess
import sys
from pathlib import Path

PEER = "nvitop-exporter==1.7.2"
VENV = Path(__file__).resolve().parent.parent / ".bench" / "nvitop-exporter"
_INSTALL_TIMEOUT_SECONDS = 600


class PeerEnvError(Exception):
    """The peer's environment could not be made; the message says which step failed."""


def peer_python(venv: Path = VENV) -> Path:
    """The Python of an environment holding `PEER`, made (or remade) when needed."""
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if python.exists() and stamp.exists() and stamp.read_text() == PEER:
        return python
    steps = (
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", PEER],
    )
    for step in steps:
        try:
            subprocess.run(
                step, capture_output=True, text=True, check=True, timeout=_INSTALL_TIMEOUT_SECONDS
            )
        except (OSError, subprocess.SubprocessError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            raise PeerEnvError(f"{' '.join(step[:4])}: {detail.strip()[-2000:]}") from None
    stamp.write_text(PEER)
    return python


def main() -> int:
    """`python3 -m bench.peer_env`: make the environment, print its Python."""
    try:
        print(peer_python())
    except PeerEnvError as exc:
        print(f"cannot install {PEER}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
