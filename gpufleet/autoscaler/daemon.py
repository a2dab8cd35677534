"""`gpufleet autoscaler`: the control loop as a daemon, with leader election and self-metrics.

Wiring only: settings into an API client, a Prometheus client, the event recorder, the
lease, the controller, and an HTTP server for /metrics and /healthz. SIGTERM stops the
loop after the pass in flight, releases the lease (so a standby takes over at once) and
exits 0.
"""

import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections.abc import Sequence

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gpufleet.autoscaler.controller import Controller, ControllerConfig
from gpufleet.autoscaler.kube.cluster import Cluster
from gpufleet.autoscaler.metrics import SelfMetrics
from gpufleet.autoscaler.prom.client import PromClient
from gpufleet.autoscaler.settings import AutoscalerSettings
from gpufleet.core.listen import parse_listen_address
from gpufleet.kube.connect import api_client
from gpufleet.kube.errors import KubeError
from gpufleet.kube.events import EventRecorder
from gpufleet.kube.lease import LeaderElector, LeaseConfig
from gpufleet.logs import setup_logging
from gpufleet.settings import settings_from_argv

log = logging.getLogger(__name__)
PROG = "gpufleet autoscaler"
DESCRIPTION = """Scale GPU workloads from their serving engine's signals and GPU telemetry.

Reads GPUAutoscaler resources (autoscaling.gpufleet.dev/v1alpha1), queries Prometheus for
the signals of each one's engine preset, runs its policy (gpufleet, hpa or keda, as
gpufleet simulate replays them) and writes the target's scale subresource, status and
Events. Replicas elect one writer through a Lease.

  gpufleet autoscaler --prometheus-url http://prometheus:9090
  gpufleet autoscaler --kube-url http://127.0.0.1:8001 --leader-elect=false
"""


def main(argv: Sequence[str] | None = None) -> int:
    settings = settings_from_argv(AutoscalerSettings, prog=PROG, description=DESCRIPTION, argv=argv)
    setup_logging(debug=settings.debug, json_format=settings.log_format == "json")
    try:
        address = (
            parse_listen_address(settings.metrics_address) if settings.metrics_address else None
        )
        api = api_client(
            url=settings.kube_url,
            kubeconfig=settings.kubeconfig,
            user_agent=f"{PROG}/{_identity(settings)}",
        )
    except ValueError as err:
        log.error("%s", err)
        return 1
    return asyncio.run(_run(settings, api, address))


def _identity(settings: AutoscalerSettings) -> str:
    return settings.identity or socket.gethostname()


async def _run(settings: AutoscalerSettings, api, address) -> int:
    identity = _identity(settings)
    prom = PromClient(settings.prometheus_url, timeout_seconds=settings.query_timeout_seconds)
    events = EventRecorder(api, controller="gpufleet.dev/autoscaler", instance=identity)
    elector = None
    if settings.leader_elect:
        elector = LeaderElector(
            api,
            LeaseConfig(
                namespace=settings.lease_namespace or "default",
                name=settings.lease_name,
                identity=identity,
                lease_duration_seconds=settings.lease_duration_seconds,
                renew_deadline_seconds=settings.renew_deadline_seconds,
                retry_period_seconds=settings.retry_period_seconds,
            ),
        )
    controller = Controller(
        Cluster(api),
        prom,
        events,
        config=ControllerConfig(
            scrape_interval_seconds=settings.scrape_interval_seconds,
            rate_window=settings.rate_window,
        ),
        is_leader=elector.is_leader if elector else (lambda: True),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    last_ok = [time.monotonic()]
    try:
        runner = (
            await _serve(address, controller, last_ok, settings.tick_seconds) if address else None
        )
    except OSError as err:  # the port is taken, or the host is not this machine's
        log.error("--metrics-address %s: %s", settings.metrics_address, err.strerror or err)
        await prom.close()
        api.close()
        return 1
    campaign = asyncio.create_task(elector.run(), name="lease") if elector else None
    log.info("autoscaler %s started (leader election %s)", identity, "on" if elector else "off")
    try:
        while not stop.is_set():
            try:
                await controller.tick()
                last_ok[0] = time.monotonic()
            except KubeError as err:
                controller.stats.errors[f"kube_{err.kind}"] += 1
                log.warning("cannot list GPUAutoscalers: %s", err)
            with contextlib.suppress(TimeoutError):  # the next tick, or a signal sooner
                await asyncio.wait_for(stop.wait(), timeout=settings.tick_seconds)
    finally:
        if campaign:
            campaign.cancel()
            await asyncio.gather(campaign, return_exceptions=True)
            await asyncio.to_thread(elector.release)
        if runner:
            await runner.cleanup()
        await prom.close()
        api.close()
    log.info("autoscaler %s stopped", identity)
    return 0


async def _serve(address, controller: Controller, last_ok: list[float], tick: float):
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SelfMetrics(lambda: controller.stats))

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def healthz(_: web.Request) -> web.Response:
        # Unhealthy when the API could not be listed for 10 ticks (at least 30 s).
        if time.monotonic() - last_ok[0] > max(10 * tick, 30.0):
            return web.Response(status=503, text="control loop failing")
        return web.Response(text="OK")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, port = address
    await web.TCPSite(runner, host, port).start()
    log.info("serving /metrics and /healthz on %s:%d", host or "*", port)
    return runner
