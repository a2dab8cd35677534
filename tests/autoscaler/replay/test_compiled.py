"""The compiled simulator (`GPUFLEET_COMPILE=1`, setup.py): the wheel mypyc builds of the
engine's hot modules replays every run exactly as the interpreted source does.

One wheel is built per module (about a minute of CPU) by `bench.compiled_bench`, from a
copy of the source with the test environment's own mypy and setuptools. Without a C
compiler or Python's headers the tests skip when pytest runs alone and fail under ./dev
test and in CI.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
from importlib.metadata import version
from pathlib import Path

import pytest
from helpers import REPO
from helpers.tools import missing as tool_missing

from bench.compiled_bench import build_compiled

# Every module setup.py compiles; each must load from the extension, not the source.
COMPILED = ("engine", "cluster", "pipeline")

# Full digests of short runs: every policy (the oracle's repair replays included), with
# chunked prefill as vLLM V1 runs it, under a long-prefill threshold, and without it, and
# routed by prompt tokens.
DIGESTS = r"""
import dataclasses, hashlib
import numpy as np
from gpufleet.autoscaler.replay.core import cluster, engine, pipeline, sweep
from gpufleet.autoscaler.replay.core.workloads import workload_trace
from gpufleet.autoscaler.replay.settings import SimulateSettings

for module in (engine, cluster, pipeline):
    print("module", module.__name__, module.__file__)

def feed(h, v):
    if isinstance(v, np.ndarray):
        h.update(np.ascontiguousarray(v).tobytes())
    elif dataclasses.is_dataclass(v):
        for f in dataclasses.fields(v):
            feed(h, getattr(v, f.name))
    elif isinstance(v, (tuple, list)):
        for x in v:
            feed(h, x)
    else:
        h.update(repr(v).encode())

CASES = [
    ("flash:duration=600,at=200,length=120", 4, {}),
    ("longctx:duration=600", 2, {"long_prefill_token_threshold": 512}),
    ("onoff:duration=600", 3, {"chunked_prefill": False}),
    ("longctx:duration=600", 2, {"routing": "least-tokens"}),
]
for text, scale, service in CASES:
    settings = SimulateSettings.model_construct(**service)
    specs = sweep.plan(
        [workload_trace(text, seed=0, scale=scale)],
        ("hpa", "keda", "gpufleet", "oracle"),
        workload=settings.workload(),
        config=settings.sim_config(),
        tuning=settings.tuning(),
        sweep=False,
        warm_start=True,
    )
    for spec in specs:
        h = hashlib.sha256()
        feed(h, sweep.run(spec))
        print("run", text, scale, spec.policy, service, h.hexdigest())
"""


def _toolchain_missing() -> str | None:
    if shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is None:
        return "no C compiler"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        return "no Python.h (Debian: python3-dev)"
    return None


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The compiled wheel, unpacked: a folder to put first on PYTHONPATH."""
    missing = _toolchain_missing()
    if missing:
        tool_missing(f"the compiled build needs {missing}")
    return build_compiled(tmp_path_factory.mktemp("compiled"))


def _python(args: list[str], *, path: Path) -> str:
    """Python with `path` first on its path; -P: not the working directory before it."""
    done = subprocess.run(
        [sys.executable, "-P", *args],
        env={**os.environ, "PYTHONPATH": f"{path}{os.pathsep}{REPO / 'tests'}"},
        cwd=path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_the_wheel_compiles_exactly_the_engines_hot_modules(compiled: Path) -> None:
    built = sorted(p.name.split(".")[0] for p in compiled.glob("gpufleet/**/*.so"))
    assert built == sorted(COMPILED)
    # The test extra's mypy built it: the one setup.py pins for every other build.
    assert f'MYPY = "mypy=={version("mypy")}"' in (REPO / "setup.py").read_text()


def test_the_compiled_engine_replays_every_run_as_the_source_does(compiled: Path) -> None:
    fast = _python(["-c", DIGESTS], path=compiled).splitlines()
    slow = _python(["-c", DIGESTS], path=REPO).splitlines()
    modules = [line.split()[2] for line in fast if line.startswith("module")]
    assert all(path.endswith(".so") and path.startswith(str(compiled)) for path in modules)
    assert all(line.split()[2].endswith(".py") for line in slow if line.startswith("module"))
    runs = [line for line in fast if line.startswith("run")]
    assert len(runs) == 16  # four cases, four policies each
    assert runs == [line for line in slow if line.startswith("run")]


def test_the_engines_own_tests_pass_on_the_compiled_engine(compiled: Path, tmp_path: Path) -> None:
    tests = REPO / "tests" / "autoscaler" / "replay" / "core"
    files = [str(tests / "test_engine.py"), str(tests / "test_oracle.py")]
    pytest_args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    _python([*pytest_args, "--basetemp", str(tmp_path / "t"), *files], path=compiled)
