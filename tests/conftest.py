"""Suite-wide fixtures: async tests fail when they leave asyncio tasks running (STYLE §16).

Shared helper functions live in the `helpers` package, not here: pytest imports every
conftest.py outside a package as the module `conftest`, so importing from one is
order-dependent.
"""

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from helpers.e2e import Prometheus
from helpers.tools import require
from hypothesis import settings

# CI draws hypothesis' examples from each test alone (`.ci/run` sets GPUFLEET_CI), so a
# commit that passed before it was pushed passes there too; a developer's `./dev test`
# draws new ones each run, and an edge one finds is a real bug, fixed and pinned with
# @example. Twice a random CI run turned red on an edge older than the change it judged.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("GPUFLEET_CI"):
    settings.load_profile("ci")

# A task cancelled during teardown needs a loop iteration or two to finish; one still
# pending after this long was never going to stop.
_SETTLE_SECONDS = 0.5


@pytest.fixture(autouse=True)
def _no_leaked_tasks(request: pytest.FixtureRequest) -> None:
    """Arms the leak check for async tests only; sync tests never get an event loop here."""
    if pytest_asyncio.is_async_test(request.node):
        request.getfixturevalue("_asyncio_tasks_finished")


@pytest_asyncio.fixture
async def _asyncio_tasks_finished() -> AsyncIterator[None]:
    """Fail when tasks the test (or its fixtures) started are still pending at the end.

    Set up before, and torn down after, the test's other fixtures, so a fixture that stops
    its own tasks in teardown does not count as a leak. Leaked tasks are cancelled so they
    cannot run on into the next test.
    """
    before = asyncio.all_tasks()
    yield
    current = asyncio.current_task()
    leftovers = {t for t in asyncio.all_tasks() if t is not current and t not in before}
    if not leftovers:
        return
    _, pending = await asyncio.wait(leftovers, timeout=_SETTLE_SECONDS)
    for task in pending:
        task.cancel()
    if pending:
        names = sorted(f"{t.get_name()} ({t.get_coro()!r})" for t in pending)
        pytest.fail(f"test left {len(pending)} asyncio task(s) running: {', '.join(names)}")


@pytest.fixture
def prometheus_for(tmp_path: Path) -> Iterator[Callable[..., Prometheus]]:
    """Start real Prometheus servers scraping a target; stopped after the test."""
    require("prometheus")
    servers: list[Prometheus] = []

    def start(target: str, *, labels: dict[str, str] | None = None) -> Prometheus:
        servers.append(Prometheus(tmp_path / f"prometheus-{len(servers)}", target, labels=labels))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()
