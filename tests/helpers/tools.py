"""The real tools the tests drive (Prometheus, promtool, Alertmanager, helm, a compiler,
Chromium). A missing one skips a test when pytest runs alone, and fails it under ./dev test
(which installs them and sets GPUFLEET_REQUIRE_TOOLS) or in CI (CI set): CI never passes a
test it did not run."""

import os
import shutil
from typing import NoReturn

import pytest


def missing(message: str) -> NoReturn:
    """Skip, or fail where the tools are required."""
    if os.environ.get("CI") or os.environ.get("GPUFLEET_REQUIRE_TOOLS"):
        pytest.fail(message)
    pytest.skip(message)


def require(binary: str) -> str:
    """The binary's path on PATH, else `missing`."""
    path = shutil.which(binary)
    if path is None:
        missing(f"{binary} is not installed (./dev test installs it)")
    return path
