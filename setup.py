"""Build hook: plain Python by default; GPUFLEET_COMPILE=1 compiles the simulator's engine.

mypyc compiles the same source to C: a simulated run then takes 0.31-0.91 of the CPU time
(BENCHMARKS.md, "Simulator speed", the compiled simulator). Everything else, and every
editable install unless asked, stays interpreted, so an edit to these files is never
shadowed by a stale build. tests/autoscaler/replay/test_compiled.py builds the wheel and
checks that it replays as the source does.
"""

import os
import sys

from setuptools import setup

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


setup(
    ext_modules=_ext_modules(),
    setup_requires=[MYPY] if os.environ.get("GPUFLEET_COMPILE") == "1" else [],
)
