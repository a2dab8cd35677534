"""Fixtures for end-to-end tests: a simulated node, the real exporter, real Prometheus.

The exporter runs the production `serve()` in a thread with its own event loop, on a
real loopback port, against the simulated NVML and the fake kubelet's real unix socket.
"""

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import wait_for
from helpers.e2e import RunningExporter, node_settings

from gpufleet.lab.node import NodeLayout, SimNode


@pytest.fixture
def node(tmp_path: Path) -> Iterator[SimNode]:
    # Small enough to keep tests quick, with every kind of allocation: 2 whole GPUs,
    # 2 time-sliced 4 ways, one GPU split into 7 MIG slices.
    layout = NodeLayout(fleet="4xH100+1xH100:mig=7x1g.10gb", whole_gpus=2, replicas=4)
    with SimNode(layout, root=tmp_path / "n") as n:
        n.sim.nvmlInit()
        yield n


@pytest.fixture
def exporter_for() -> Iterator[Callable[..., RunningExporter]]:
    started: list[RunningExporter] = []

    def start(node: SimNode, **overrides) -> RunningExporter:
        exp = RunningExporter(node_settings(node, **overrides), node.sim).start()
        started.append(exp)
        wait_for(lambda: exp.get("/health")[0] == 200, what="first collection")
        return exp

    yield start
    for exp in started:
        exp.stop()
