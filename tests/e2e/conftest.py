"""Fixtures for end-to-end tests: a simulated node, the real exporter, real Prometheus.

The exporter runs the production `serve()` in a thread with its own event loop, on a
real loopback port, against the simulated NVML and the fake kubelet's real unix socket.
"""

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers.e2e import SMALL_NODE, RunningExporter, start_exporter

from gpufleet.lab.node import SimNode


@pytest.fixture
def node(tmp_path: Path) -> Iterator[SimNode]:
    with SimNode(SMALL_NODE, root=tmp_path / "n") as n:
        n.sim.nvmlInit()
        yield n


@pytest.fixture
def exporter_for() -> Iterator[Callable[..., RunningExporter]]:
    started: list[RunningExporter] = []

    def start(node: SimNode, **overrides) -> RunningExporter:
        started.append(start_exporter(node, **overrides))
        return started[-1]

    yield start
    for exp in started:
        exp.stop()
