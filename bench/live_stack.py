"""The lab's closed loop for the live benches, started together and stopped whatever fails.

The fake API server, the lab cluster (nodes, scheduling, cold starts at `timing`), one
simulated vLLM fleet per namespace (each listed in its own file_sd file) and real Prometheus
scraping them: what `bench.live_reaction_bench` and `bench.zero_bench` measure the
controller against. Prometheus is the lab's own (`gpufleet.lab.prometheus`), on a free
loopback port; the scratch folder (targets files, Prometheus' TSDB and log) is removed on
the way out.
"""

import contextlib
import dataclasses
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from kubernetes import client

from gpufleet.lab.kubeapi.cluster import ClusterTiming, LabCluster
from gpufleet.lab.kubeapi.server import FakeApiServer
from gpufleet.lab.prometheus import start_prometheus
from gpufleet.lab.serving import ServingFleet
from tests.helpers import free_port


@dataclasses.dataclass(frozen=True)
class LiveStack:
    server: FakeApiServer
    api: client.ApiClient  # the official client, pointed at `server`
    fleets: dict[str, ServingFleet]  # by namespace
    prometheus_port: int  # on 127.0.0.1


@contextlib.contextmanager
def live_stack(
    *,
    prefix: str,
    timing: ClusterTiming,
    fleets: Mapping[str, Mapping[str, object]],
    scrape_seconds: float,
) -> Iterator[LiveStack]:
    """The stack with a fleet per namespace in `fleets` (each value: `ServingFleet`
    keyword arguments besides the store, namespace and targets file; no traffic unless
    they say so), ready once Prometheus answers; `prefix` names the scratch folder."""
    with (
        tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=True) as tmp,
        FakeApiServer() as server,
    ):
        work = Path(tmp)
        config = client.Configuration()
        config.host = server.url
        serving = {
            ns: ServingFleet(
                server.store,
                namespace=ns,
                targets_file=work / f"{ns}.json",
                **{"rate_rps": 0.0, **kwargs},  # type: ignore[arg-type]
            )
            for ns, kwargs in fleets.items()
        }

        async def start() -> LabCluster:
            cluster = LabCluster(server.store, timing=timing, clock=time.time)
            cluster.start()
            for fleet in serving.values():
                fleet.start()
            return cluster

        async def stop(cluster: LabCluster) -> None:
            for fleet in serving.values():
                await fleet.stop()
            await cluster.stop()

        cluster = server.run_async(start())
        try:
            port = free_port()
            prometheus = start_prometheus(
                work,
                host="127.0.0.1",
                port=port,
                targets_dir=work,
                rule_files=[],
                scrape_seconds=scrape_seconds,
            )
            try:
                prometheus.wait_ready("/-/ready")
                yield LiveStack(server, client.ApiClient(config), serving, port)
            finally:
                prometheus.stop()
        finally:
            server.run_async(stop(cluster))
