"""`gpufleet autoscaler`: the control loop as a daemon, with leader election and self-metrics.

Wiring only: settings into an API client, a Prometheus client, the event recorder, the
lease, the controller, an HTTP server for /metrics and /healthz, and, when asked for, the
external metrics API and KEDA's external scaler, both answering from the snapshot the
controller publishes each tick. SIGTERM cancels the pass in flight (its queries may take
minutes to time out), releases the lease (so a standby takes over at once) and exits 0.
"""

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from gpufleet.autoscaler.controller import Controller, ControllerConfig
from gpufleet.autoscaler.core.extmetrics import SnapshotFeed, window_seconds
from gpufleet.autoscaler.extmetrics import server as extmetrics_server
from gpufleet.autoscaler.kedascaler import server as kedascaler_server
from gpufleet.autoscaler.kube.cluster import Cluster
from gpufleet.autoscaler.metrics import SelfMetrics
from gpufleet.autoscaler.prom.client import PromClient
from gpufleet.autoscaler.settings import AutoscalerSettings
from gpufleet.core.listen import parse_listen_address
from gpufleet.core.server_stats import ServerStats
from gpufleet.http.abuse import AcceptErrorHandler
from gpufleet.http.metrics import exposition
from gpufleet.http.server import Response, new_app, plain, start_server
from gpufleet.http.wire import Request
from gpufleet.kube.connect import api_client
from gpufleet.kube.errors import KubeError
from gpufleet.kube.events import EventRecorder
from gpufleet.kube.lease import LeaderElector, LeaseConfig
from gpufleet.logs import OutageLog, setup_logging, throttle_accept_errors
from gpufleet.settings import settings_from_argv

# Each API call's limit: a list of every pod of a large cluster takes seconds; an API
# server that does not answer must not hold every workload's tick.
API_TIMEOUT_SECONDS = 30.0
# How often the external metrics server reads kube-apiserver's request-header ConfigMap
# again (its front-proxy CA rotates; k8s.io/apiserver watches it).
AUTH_REFRESH_SECONDS = 60.0
log = logging.getLogger(__name__)
PROG = "gpufleet autoscaler"
GIL_SWITCH_SECONDS = 0.0001
# The cycle collector's youngest generation runs every 10,000 net allocations of tracked
# objects, not 700. A tick parses Prometheus answers and API lists into short-lived dicts
# and lists; under the default thresholds enough of them lived through a young collection
# to set off a full one, over every workload's state, once or twice a tick: a third of a
# 1,000-workload tick's CPU (BENCHMARKS.md, "The cycle collector").
GC_THRESHOLDS = (10_000, 10, 10)
DESCRIPTION = """Scale GPU workloads from their serving engine's signals and GPU telemetry.

Reads GPUAutoscaler resources (autoscaling.gpufleet.dev/v1alpha1), queries Prometheus for
the signals of each one's engine preset, runs its policy (gpufleet, hpa or keda, as
gpufleet simulate replays them) and writes the target's scale subresource, status and
Events. Replicas elect one writer through a Lease.

  gpufleet autoscaler --prometheus-url http://prometheus:9090
  gpufleet autoscaler --kube-url http://127.0.0.1:8001 --leader-elect=false

It can also be the source of the signals for an HPA (external.metrics.k8s.io, HTTPS) or
KEDA (an external scaler over gRPC) that you already run:

  gpufleet autoscaler --keda-scaler-address :9403
"""


def collect_cycles_less_often() -> None:
    """The process's cycle collector at GC_THRESHOLDS (the controller bench sets it too)."""
    gc.set_threshold(*GC_THRESHOLDS)


def main(argv: Sequence[str] | None = None) -> int:
    settings = settings_from_argv(AutoscalerSettings, prog=PROG, description=DESCRIPTION, argv=argv)
    setup_logging(debug=settings.debug, json_format=settings.log_format == "json")
    collect_cycles_less_often()
    try:
        address = _address("--metrics-address", settings.metrics_address)
        signals = _SignalAddresses(
            external=_address("--external-metrics-address", settings.external_metrics_address),
            keda=_address("--keda-scaler-address", settings.keda_scaler_address),
        )
        if signals.external and not (
            settings.external_metrics_tls_cert_file and settings.external_metrics_tls_key_file
        ):
            raise ValueError(
                "--external-metrics-address needs --external-metrics-tls-cert-file and "
                "--external-metrics-tls-key-file: an aggregated API server speaks HTTPS only"
            )
        keda_tls = (settings.keda_scaler_tls_cert_file, settings.keda_scaler_tls_key_file)
        if (any(keda_tls) or settings.keda_scaler_client_ca_file) and not all(keda_tls):
            raise ValueError(
                "--keda-scaler-tls-cert-file and --keda-scaler-tls-key-file go together "
                "(and --keda-scaler-client-ca-file needs both)"
            )
        api = api_client(
            url=settings.kube_url,
            kubeconfig=settings.kubeconfig,
            user_agent=f"{PROG}/{_identity(settings)}",
            timeout_seconds=API_TIMEOUT_SECONDS,
        )
    except ValueError as err:
        log.error("%s", err)
        return 1
    return asyncio.run(_run(settings, api, address, signals))


async def _unless_stopped(work: Awaitable[object], stop: asyncio.Event) -> bool:
    """Await `work`, cancelling it if `stop` is set first; False when it was cancelled.
    Its exceptions are raised."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait((task, stopping), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not task.done():  # stopped, or this await itself cancelled: the work goes too
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        return False
    task.result()
    return True


@dataclass(frozen=True, slots=True)
class _SignalAddresses:
    external: tuple[str | None, int] | None
    keda: tuple[str | None, int] | None


def _address(flag: str, text: str) -> tuple[str | None, int] | None:
    """A listen address flag; None when empty (not served). ValueError names the flag."""
    if not text:
        return None
    try:
        return parse_listen_address(text)
    except ValueError as err:
        raise ValueError(f"{flag}: {err}") from None


def _identity(settings: AutoscalerSettings) -> str:
    return settings.identity or socket.gethostname()


async def _run(settings: AutoscalerSettings, api, address, signals: _SignalAddresses) -> int:
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
    feed = SnapshotFeed() if signals.external or signals.keda else None
    cluster = Cluster(api, watch=settings.watch)
    controller = Controller(
        cluster,
        prom,
        events,
        config=ControllerConfig(
            scrape_interval_seconds=settings.scrape_interval_seconds,
            rate_window=settings.rate_window,
            headroom=settings.headroom,
            wait_seconds=settings.tick_seconds,
        ),
        is_leader=elector.is_leader if elector else (lambda: True),
        feed=feed,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    throttle_accept_errors(loop)
    last_ok = [time.monotonic()]
    server_stats = ServerStats()  # the metrics server's, and the signal servers' accept errors
    stoppers: list[Callable[[], Awaitable[object]]] = []
    try:
        if address:
            try:
                server = await _serve(
                    address, controller, last_ok, settings.tick_seconds, server_stats
                )
            except OSError as err:  # the port is taken, or the host is not this machine's
                raise OSError(
                    f"--metrics-address {settings.metrics_address}: {err.strerror or err}"
                ) from None
            stoppers.append(server.close)
        if feed is not None:
            servers = _SignalServers(settings, api, feed, signals, server_stats)
            await asyncio.to_thread(servers.start)
            stoppers.append(lambda: asyncio.to_thread(servers.stop))
    except (OSError, ValueError) as err:  # a port taken, a bad certificate or ConfigMap
        log.error("%s", err)
        for stop_one in reversed(stoppers):
            await stop_one()
        await prom.close()
        api.close()
        return 1
    campaign = asyncio.create_task(elector.run(), name="lease") if elector else None
    log.info("autoscaler %s started (leader election %s)", identity, "on" if elector else "off")
    api_outage = OutageLog(log, "cannot list GPUAutoscalers")
    tick_outage = OutageLog(log, "a tick fails; the next is tried")
    try:
        while not stop.is_set():
            try:
                if not await _unless_stopped(controller.tick(), stop):
                    break  # a pass can take minutes (queries timing out): not past SIGTERM
                last_ok[0] = time.monotonic()
                api_outage.recovered()
                tick_outage.recovered()
            except KubeError as err:
                controller.stats.errors[f"kube_{err.kind}"] += 1
                api_outage.failed(str(err), kind=str(err.kind))
            except Exception as err:  # a bug, or cluster data nothing checked: not an exit
                controller.stats.errors["tick"] += 1
                tick_outage.raised(err)
            with contextlib.suppress(TimeoutError):  # the next tick, or a signal sooner
                await asyncio.wait_for(stop.wait(), timeout=settings.tick_seconds)
    finally:
        controller.close()  # no step of its writes after the lease is released
        # On a thread of their own: writes a hung admission webhook holds can fill the
        # default pool for the API timeout, and a standby waits on the release.
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpufleet-stop") as own:
            if campaign:
                campaign.cancel()
                await asyncio.gather(campaign, return_exceptions=True)
                await loop.run_in_executor(own, elector.release)
            await loop.run_in_executor(own, cluster.close)  # after the release
        for stop_one in reversed(stoppers):
            await stop_one()
        await prom.close()
        api.close()
    log.info("autoscaler %s stopped", identity)
    return 0


class _SignalServers:
    """The external metrics and KEDA servers on an event loop and thread of their own, so
    the CPU-bound stretches of a tick (a thousand decisions) never hold an answer up."""

    def __init__(
        self,
        settings: AutoscalerSettings,
        api,
        feed: SnapshotFeed,
        signals: _SignalAddresses,
        stats: ServerStats,
    ) -> None:
        self._args = (settings, api, feed, signals, stats)
        self._loop = asyncio.new_event_loop()
        throttle_accept_errors(self._loop)
        self._thread = threading.Thread(target=self._run, name="signal-servers", daemon=True)
        self._stoppers: list[Callable[[], Awaitable[object]]] = []
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self) -> None:
        """Returns once serving; raises what `_serve_signals` raised (nothing left running)."""
        # A thread waiting for the GIL gets it within the switch interval; at CPython's 5 ms
        # a request behind a tick's decisions waited that long at each of its hand-offs
        # (wake, read, write). 0.1 ms cuts a hand-off's p99 behind a busy thread from 1.2
        # to 0.24 ms (bench/gil_handoff_bench.py) and costs the tick little: it only
        # switches while an answer is waiting. Simpler than yield points sprinkled through
        # the tick (which help only if an answer happens to wait there) or a second process
        # (which would need the snapshot shipped across each tick).
        sys.setswitchinterval(GIL_SWITCH_SECONDS)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def stop(self) -> None:
        async def stop_all() -> None:
            for stop_one in reversed(self._stoppers):
                await stop_one()

        asyncio.run_coroutine_threadsafe(stop_all(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(_serve_signals(*self._args, self._stoppers))
        except Exception as err:  # handed to start(), in the daemon's thread
            for stop_one in reversed(self._stoppers):
                self._loop.run_until_complete(stop_one())
            self._error = err
        finally:
            self._ready.set()
        if self._error is None:
            self._loop.run_forever()
        self._loop.close()


def _every(seconds: float, call: Callable[[], object]) -> Callable[[], Awaitable[object]]:
    """Run the blocking `call` on a thread every `seconds`; returns how to stop it."""

    async def repeat() -> None:
        while True:
            await asyncio.sleep(seconds)
            await asyncio.to_thread(call)

    task = asyncio.create_task(repeat())

    async def stop() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return stop


async def _serve_signals(
    settings: AutoscalerSettings,
    api,
    feed: SnapshotFeed,
    signals: _SignalAddresses,
    stats: ServerStats,
    stoppers: list[Callable[[], Awaitable[object]]],
) -> None:
    """Start the servers asked for, adding how to stop each to `stoppers`. Raises
    ValueError or OSError naming the flag, file or ConfigMap at fault."""
    # Out of file descriptors, asyncio logs a traceback per failed accept (hundreds a
    # second): one rate-limited line instead, counted with the main server's (the process
    # is out of them, whichever port sees it), as on the main loop (gpufleet.http).
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(AcceptErrorHandler(stats, loop.get_exception_handler()))
    if signals.external:
        auth = await asyncio.to_thread(extmetrics_server.AuthSource, api)
        tls = extmetrics_server.tls_context(
            settings.external_metrics_tls_cert_file, settings.external_metrics_tls_key_file, auth
        )
        app = extmetrics_server.make_app(
            extmetrics_server.from_feed(feed),
            auth,
            extmetrics_server.Authorizer(api),
            window_seconds=window_seconds(settings.rate_window),
        )
        try:
            runner = await extmetrics_server.serve(app, *signals.external, tls)
        except OSError as err:
            raise OSError(
                f"--external-metrics-address {settings.external_metrics_address}: "
                f"{err.strerror or err}"
            ) from None
        stoppers.append(runner.cleanup)
        stoppers.append(_every(AUTH_REFRESH_SECONDS, auth.refresh))
    if signals.keda:
        credentials = (
            kedascaler_server.tls_credentials(
                settings.keda_scaler_tls_cert_file,
                settings.keda_scaler_tls_key_file,
                settings.keda_scaler_client_ca_file,
            )
            if settings.keda_scaler_tls_cert_file
            else None
        )
        try:
            server = await kedascaler_server.serve(feed, *signals.keda, credentials)
        except OSError as err:
            raise OSError(f"--keda-scaler-address {settings.keda_scaler_address}: {err}") from None
        stoppers.append(lambda: server.stop(grace=1.0))


async def _serve(
    address, controller: Controller, last_ok: list[float], tick: float, server_stats: ServerStats
):
    """/metrics, /healthz and /readyz on the daemons' shared server (`gpufleet.http`): its
    read and write timeouts, 404 elsewhere, and requests that do not parse counted and
    logged as one rate-limited line, never a traceback each."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SelfMetrics(lambda: controller.stats, server=server_stats))

    async def metrics(_: Request) -> Response:
        return exposition(registry)

    async def healthz(_: Request) -> Response:
        # Unhealthy when the API could not be listed for 10 ticks (at least 30 s).
        if time.monotonic() - last_ok[0] > max(10 * tick, 30.0):
            return plain(503, "control loop failing")
        return plain(200, "OK")

    async def readyz(_: Request) -> Response:
        # Ready once a tick has succeeded: the signal servers are up (they start first) and
        # have something to serve. A Service sends traffic only to ready replicas.
        if not controller.stats.ticks:
            return plain(503, "no tick has succeeded yet")
        return plain(200, "OK")

    app = new_app(
        {"/metrics": metrics, "/healthz": healthz, "/readyz": readyz},
        web_config=None,
        stats=server_stats,
    )
    host, port = address
    return await start_server(app, host=host, port=port)
