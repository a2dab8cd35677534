"""Build hooks: plain Python by default; GPUFLEET_COMPILE=1 compiles the simulator's engine.
The wheel also carries rules/ as gpufleet/lab/rules, so an installed `gpufleet lab` loads
the alerts (a checkout's lab reads rules/ itself).

mypyc compiles the same source to C: a simulated run then takes 0.31-0.91 of the CPU time
(BENCHMARKS.md, "Simulator speed", the compiled simulator). Everything else, and every
editable install unless asked, stays interpreted, so an edit to these files is never
shadowed by a stale build. tests/autoscaler/replay/test_compiled.py builds the wheel and
checks that it replays as the source does.
"""

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

COMPILED = [
    "gpufleet/autoscaler/replay/core/engine.py",
    "gpufleet/autoscaler/replay/core/cluster.py",
    "gpufleet/autoscaler/replay/core/pipeline.py",
]
# One mypy, so that a build compiles the same C every time.
MYPY = "mypy==2.4.1"


def _ext_modules() -> list:
    if os.environ.get("GPUFLEET_COMPILE") != "1" or {"egg_info", "dist_info"} & set(sys.argv):
        # Metadata needs no C. An isolated build asks for its requirements this way too,
        # before mypy is there: setup_requires below names it, and pip installs it.
        return []
    if "editable_wheel" in sys.argv:
        sys.exit(
            "GPUFLEET_COMPILE=1 builds a wheel, not an editable install: the compiled "
            "modules would shadow every later edit of their source"
        )
    try:
        from mypyc.build import mypycify
    except ImportError:
        sys.exit(f"GPUFLEET_COMPILE=1 needs {MYPY} in the build environment")
    # Imported modules are read for their types, not compiled or checked here.
    return mypycify(["--follow-imports=silent", "--ignore-missing-imports", *COMPILED])


class _BuildPy(build_py):
    """build_py, plus rules/*.rules.yml copied into the built gpufleet/lab/rules."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # the lab reads the checkout's own rules/
            return
        rules = Path(__file__).resolve().parent / "rules"
        if not rules.is_dir():  # a wheel without them would run the lab with no alerts
            sys.exit(f"{rules}: missing; the wheel ships it as gpufleet/lab/rules")
        target = Path(self.build_lib) / "gpufleet" / "lab" / "rules"
        target.mkdir(parents=True, exist_ok=True)
        for path in sorted(rules.glob("*.rules.yml")):
            shutil.copyfile(path, target / path.name)


setup(
    cmdclass={"build_py": _BuildPy},
    ext_modules=_ext_modules(),
    setup_requires=[MYPY] if os.environ.get("GPUFLEET_COMPILE") == "1" else [],
)
