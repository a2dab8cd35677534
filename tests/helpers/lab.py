"""The closed loop's world, shared by the tests that run a controller against it: the fake
API server with the lab cluster (scheduler, node provisioner, deployment controller),
simulated vLLM pods of `llm/vllm` and real Prometheus scraping them through file_sd."""

import contextlib
from collections.abc import Iterator
from pathlib import Path

from gpufleet.lab.kubeapi.cluster import ClusterTiming
from gpufleet.lab.kubeapi.server import FakeApiServer
from gpufleet.lab.serving import ServingFleet
from gpufleet.lab.workload import NAMESPACE as NS
from gpufleet.lab.workload import ServingWorkload
from helpers.e2e import Prometheus
from helpers.tools import require

__all__ = ["NS", "closed_loop"]

# Seconds, not minutes, so a test sees a node arrive and a replica start.
TIMING = ClusterTiming(
    cold_start_seconds=2, node_provision_seconds=3, termination_seconds=1, gpus_per_node=8
)


@contextlib.contextmanager
def closed_loop(
    tmp_path: Path, *, gateway: bool = False
) -> Iterator[tuple[FakeApiServer, ServingFleet, Prometheus]]:
    """The world, started; no load until the test sets `fleet.rate_rps`. A pod prefills
    2,000 tokens/s: 4 requests/s of 500 tokens. With `gateway`, requests that find no
    ready pod wait at the fleet's gateway (see `ServingFleet`)."""
    require("prometheus")
    targets = tmp_path / "targets.json"
    with FakeApiServer() as server:
        workload = ServingWorkload(
            server, timing=TIMING, targets_file=targets, rate_rps=0.0, seed=1, gateway=gateway
        )
        prometheus = Prometheus(tmp_path / "prom", file_sd=targets)
        try:
            yield server, workload.fleet, prometheus
        finally:
            prometheus.stop()
            workload.stop()
