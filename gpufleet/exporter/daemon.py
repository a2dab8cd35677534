"""`gpufleet exporter`: wiring of settings, NVML, the kubelet, the collector and the server.

Startup validates everything before serving: a bad flag, env var, counters CSV, web config
or listen address is a one-line error naming it, and the process exits non-zero. At runtime
nothing but SIGTERM/SIGINT stops it; both shut down gracefully. SIGHUP, or a change to the
-f file, reads the counters again, as dcgm-exporter's hot reload does.
"""

import asyncio
import contextlib
import logging
import re
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pynvml

from gpufleet.core.listen import parse_listen_address
from gpufleet.core.server_stats import ServerStats
from gpufleet.exporter.collector import Collector, CollectorConfig, CollectorLoop
from gpufleet.exporter.core.counters import CountersError, Selection, parse_counters, select_fields
from gpufleet.exporter.core.fields import CATALOG
from gpufleet.exporter.core.podmeta import parse_allowlist
from gpufleet.exporter.core.profiles import HostnameLabel, Profile
from gpufleet.exporter.core.selection import DeviceSelector, missing, parse_devices
from gpufleet.exporter.core.series import SeriesOptions
from gpufleet.exporter.http.server import App, RunningServer, build_app, start_server
from gpufleet.exporter.http.store import ExpositionStore
from gpufleet.exporter.nvml.reader import NvmlReader
from gpufleet.exporter.settings import (
    DCGM_DEFAULT_COLLECTORS,
    EMBEDDED_COLLECTORS,
    IGNORED,
    ExporterSettings,
)
from gpufleet.heap import limit_arenas
from gpufleet.logs import setup_logging, throttle_accept_errors
from gpufleet.nvml.backend import NvmlBackend, NvmlStartError, start_backend
from gpufleet.settings import settings_from_argv

# Only some configurations need these: h2 with -k; YAML, bcrypt and the TLS setup with
# --web-config-file; the kubernetes client where a flag needs it. They are imported where
# those flags are handled (BENCHMARKS.md, issue 15).
if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from gpufleet.exporter.kube.metadata import KubeMetadataWatcher
    from gpufleet.exporter.pods.podresources import PodResourcesWatcher
    from gpufleet.exporter.pods.procfs import PidPodMap
    from gpufleet.http.webconfig import WebConfig

log = logging.getLogger(__name__)
SWITCH_INTERVAL_SECONDS = 0.001
MALLOC_ARENAS = 1  # see gpufleet.heap

DESCRIPTION = """Serve NVML GPU metrics in Prometheus format: a drop-in for NVIDIA's dcgm-exporter
(same metric names, labels, counters CSV, flags and env vars), with per-pod values on
shared GPUs. Every flag can also be set through the env var shown with it; a flag wins
over its env var. Endpoints: /metrics, /health."""

# dcgm-exporter features not built yet; like the IGNORED group they are accepted with a
# warning, so an existing DaemonSet spec still starts.
NOT_YET_SUPPORTED = frozenset({"hpc_job_mapping_dir"})
# Effective only with -k, as in dcgm-exporter: warned about without it.
NEEDS_KUBERNETES = ("kubernetes_enable_pod_labels", "kubernetes_enable_dra")


def inert_flags(settings: ExporterSettings) -> list[str]:
    """The flags set away from their default that have no effect: every field of the
    IGNORED group, and NOT_YET_SUPPORTED."""
    flags = []
    for name, field in type(settings).model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if extra.get("group") != IGNORED and name not in NOT_YET_SUPPORTED:
            continue
        if getattr(settings, name) != field.get_default(call_default_factory=True):
            flags.append(str(extra["flags"][-1]))
    return flags


class StartupError(Exception):
    """A startup problem; the message names the file, flag or setting."""

    # set where a hung XID wait still holds NVML as startup gives up: no nvmlShutdown then
    nvml_in_use = False


class ListenError(StartupError):
    """The listen address is taken or cannot be bound: a runtime clash, not a bad flag."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Prepared:
    """Everything validated at startup, before any thread or socket exists."""

    settings: ExporterSettings
    selection: Selection
    label_allowlist: tuple[re.Pattern[str], ...]
    kube_api: "ApiClient | None"  # for pod labels and DRA (-k with either), else None
    devices: DeviceSelector
    web_config: "WebConfig | None"
    host: str | None
    port: int


def load_selection(path: Path) -> Selection:
    """Read and resolve the counters CSV; unknown fields are warned about, line by line."""
    if path == DCGM_DEFAULT_COLLECTORS and not path.exists():
        path = EMBEDDED_COLLECTORS
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StartupError(f"counters file {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise StartupError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save the CSV as UTF-8"
        ) from None
    return selection_from_text(text, source=str(path), what="counters file")


def selection_from_text(text: str, *, source: str, what: str) -> Selection:
    """Resolve a counters CSV read from `source` (a file, a ConfigMap)."""
    try:
        rows = parse_counters(text, source=source)
    except CountersError as exc:
        raise StartupError(str(exc)) from None
    selection, warnings = select_fields(rows, CATALOG, source=source)
    for warning in warnings:
        log.warning("%s", warning)
    if not selection.fields:
        raise StartupError(f"{what} {source}: no known field selected")
    return selection


def kube_api(settings: ExporterSettings, *, needed_by: str) -> "ApiClient":
    """A Kubernetes API client from --kube-url, --kubeconfig or the service account;
    StartupError naming the flag that `needed_by` it when none can be configured."""
    from gpufleet.kube.connect import api_client

    try:
        return api_client(
            url=settings.kube_url, kubeconfig=settings.kubeconfig, user_agent="gpufleet-exporter"
        )
    except ValueError as exc:
        raise StartupError(f"{needed_by}: {exc}") from None


def metadata_api(settings: ExporterSettings) -> "ApiClient | None":
    """The client for pod labels and DRA: with -k and either flag, as in dcgm-exporter.

    Without credentials (no service account token: a chart that mounts none), the
    exporter serves without them after one warning, as dcgm-exporter does: a node's GPU
    metrics matter more than its pods' labels. A --kube-url or --kubeconfig given and
    unusable is a mistake to stop on."""
    if not settings.kubernetes:
        return None
    if settings.kubernetes_enable_pod_labels:
        flag, feature = "--kubernetes-enable-pod-labels", "pod labels"
    elif settings.kubernetes_enable_dra:
        flag, feature = "--kubernetes-enable-dra", "DRA devices"
    else:
        return None
    try:
        return kube_api(settings, needed_by=flag)
    except StartupError as exc:
        if settings.kube_url or settings.kubeconfig:
            raise
        log.warning("%s; serving without %s", exc, feature)
        return None


def load_configmap_selection(settings: ExporterSettings) -> Selection:
    """-m namespace:name: the counters CSV from the ConfigMap's `metrics` key."""
    from gpufleet.exporter.kube.configmap import read_counters_csv

    api = kube_api(settings, needed_by="--configmap-data")
    try:
        text = read_counters_csv(api, settings.configmap_data)
    except ValueError as exc:
        raise StartupError(f"--configmap-data: {exc}") from None
    finally:
        api.close()
    source = f"ConfigMap {settings.configmap_data}"
    return selection_from_text(text, source=source, what="counters")


def read_counters(settings: ExporterSettings) -> Selection:
    """The counters list: -m's ConfigMap, else the -f file. Raises StartupError."""
    if settings.configmap_data != "none":
        return load_configmap_selection(settings)
    return load_selection(settings.collectors)


def prepare(settings: ExporterSettings) -> Prepared:
    """Validate the settings' files and addresses. Raises StartupError."""
    for flag in inert_flags(settings):
        log.warning("%s is accepted for compatibility but has no effect in gpufleet", flag)
    fields = type(settings).model_fields
    for name in NEEDS_KUBERNETES:
        if getattr(settings, name) and not settings.kubernetes:
            flag = fields[name].json_schema_extra["flags"][-1]  # type: ignore[index]
            log.warning("%s has no effect without --kubernetes", flag)
    try:
        allowlist = parse_allowlist(settings.kubernetes_pod_label_allowlist_regex)
    except ValueError as exc:
        raise StartupError(f"--kubernetes-pod-label-allowlist-regex: {exc}") from None
    try:
        host, port = parse_listen_address(settings.address)
    except ValueError as exc:
        raise StartupError(f"--address: {exc}") from None
    try:
        devices = parse_devices(settings.devices)
    except ValueError as exc:
        raise StartupError(f"--devices {exc}") from None
    web_config = None
    if settings.web_config_file:
        from gpufleet.http.webconfig import WebConfigError, load_web_config

        try:
            web_config = load_web_config(settings.web_config_file)
        except (WebConfigError, OSError) as exc:
            raise StartupError(str(exc)) from None
    selection = read_counters(settings)
    return Prepared(
        settings=settings,
        selection=selection,
        label_allowlist=allowlist,
        kube_api=metadata_api(settings),
        devices=devices,
        web_config=web_config,
        host=host,
        port=port,
    )


def _text(os_string: str) -> str:
    """An environment variable or host name as UTF-8 text: Python keeps bytes that are not
    UTF-8 as lone surrogates, which no exposition can encode. They become U+FFFD."""
    return os_string.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def series_options(settings: ExporterSettings) -> SeriesOptions:
    return SeriesOptions(
        profile=Profile(settings.compat),
        # -n is parsed and ignored, as by dcgm-exporter 4.x (its Helm values suggest it).
        hostname=_text(settings.node_name or socket.gethostname()),
        hostname_label=HostnameLabel(settings.hostname_label),
        pod_uid=settings.kubernetes_enable_pod_uid,
        old_namespace=settings.use_old_namespace,
        replace_blanks_in_model_name=settings.replace_blanks_in_model_name,
        virtual_gpus=settings.kubernetes_virtual_gpus,
        xid_window_ms=settings.xid_count_window_size,
        clock_events_window_ms=settings.clock_events_count_window_size,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Components:
    """The exporter's parts, built and wired but not started."""

    collector: Collector
    loop: CollectorLoop
    kubelet: "PodResourcesWatcher | None"
    kube: "KubeMetadataWatcher | None"
    pid_pods: "PidPodMap | None"
    store: ExpositionStore
    stats: ServerStats
    app: App
    # A collector a reload replaced is still inside NVML (hung): NVML must stay up.
    lingering: bool = False


def build(prepared: Prepared, lib: Any) -> Components:
    """Wire the exporter's parts on an initialised NVML `lib`; starts nothing."""
    settings = prepared.settings
    store = ExpositionStore()
    stats = ServerStats()
    kubelet = pid_pods = None
    if settings.kubernetes:
        from gpufleet.exporter.pods.podresources import PodResourcesWatcher
        from gpufleet.exporter.pods.procfs import PidPodMap

        kubelet = PodResourcesWatcher(
            socket_path=settings.pod_resources_kubelet_socket,
            checkpoint_path=settings.kubelet_checkpoint,
            refresh_seconds=settings.kubelet_refresh_seconds,
        )
        pid_pods = PidPodMap(proc_root=settings.proc_root)
    kube = kube_metadata(prepared)
    app = build_app(
        store,
        web_config=prepared.web_config,
        stats=stats,
        stale_after_seconds=settings.stale_after_seconds or 3 * settings.interval_seconds,
        openmetrics=settings.openmetrics,
    )
    collector, loop = build_collector(
        prepared, lib, store=store, stats=stats, kubelet=kubelet, kube=kube, pid_pods=pid_pods
    )
    return Components(
        collector=collector,
        loop=loop,
        kubelet=kubelet,
        kube=kube,
        pid_pods=pid_pods,
        store=store,
        stats=stats,
        app=app,
    )


def build_collector(
    prepared: Prepared,
    lib: Any,
    *,
    store: ExpositionStore,
    stats: ServerStats,
    kubelet: "PodResourcesWatcher | None",
    kube: "KubeMetadataWatcher | None",
    pid_pods: "PidPodMap | None",
) -> tuple[Collector, CollectorLoop]:
    """The collector of `prepared`'s counters and its loop, writing to `store`: what a
    reload replaces while the server, the store and the kubelet's view stay."""
    settings = prepared.settings
    # Per-process NVML calls serve only attribution to pods: the collector asks for the
    # GPUs several pods share, none without -k.
    reader = NvmlReader(lib, (f.spec for f in prepared.selection.fields))
    collector = Collector(
        lib=lib,
        reader=reader,
        store=store,
        kubelet=kubelet,
        kube=kube,
        pid_pods=pid_pods,
        server_stats=stats,
        config=CollectorConfig(
            selection=prepared.selection,
            options=series_options(settings),
            devices=prepared.devices,
            extra_resource_names=settings.resource_names,
            dra=kube is not None and settings.kubernetes_enable_dra,
            self_metrics=settings.enable_exporter_metrics,
            openmetrics=settings.openmetrics,
        ),
    )
    loop = CollectorLoop(
        collector,
        interval_seconds=settings.interval_seconds,
        timeout_seconds=settings.collect_timeout_seconds,
    )
    return collector, loop


def kube_metadata(prepared: Prepared) -> "KubeMetadataWatcher | None":
    """The API watcher for pod labels and DRA devices, when -k and either is on."""
    settings = prepared.settings
    if prepared.kube_api is None:
        return None
    from gpufleet.exporter.kube.metadata import KubeMetadataWatcher

    return KubeMetadataWatcher(
        prepared.kube_api,
        node_name=settings.node_name,
        labels=settings.kubernetes_enable_pod_labels,
        allowlist=prepared.label_allowlist,
        dra=settings.kubernetes_enable_dra,
        retry_seconds=settings.kubelet_refresh_seconds,
    )


async def run(
    parts: Components,
    prepared: Prepared,
    lib: Any,
    *,
    stop: asyncio.Event,
    reload: asyncio.Event | None = None,
    on_listening: Callable[[int], None] | None = None,
) -> bool:
    """Check -d against the node, listen, start the parts, wait for `stop`, then stop
    them; see `serve`. Raises StartupError when a -d range names what the node lacks or
    it cannot listen."""
    limit_arenas(MALLOC_ARENAS)  # before any of the exporter's threads starts
    # A collection holds the interpreter for ~10 ms of Python; with the default 5 ms
    # switch interval a scrape arriving then waits up to 5 ms. 1 ms bounds that wait
    # for a small cost in thread switches (BENCHMARKS.md has the p99 either way).
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    try:
        check_devices(parts.collector, prepared)
        server = await listen(parts.app, prepared)
    except BaseException as exc:  # the discovery in check_devices started the XID watcher
        if not parts.collector.close() and isinstance(exc, StartupError):
            exc.nvml_in_use = True
        raise
    if parts.kubelet:
        parts.kubelet.start()
    if parts.kube:
        parts.kube.start()
    parts.loop.start()
    if on_listening:
        on_listening(server.port)
    settings = prepared.settings
    log.info(
        "exporter started",
        extra={
            "fields": {
                "interval_ms": settings.collect_interval_ms,
                "fields": len(prepared.selection.fields),
                "kubernetes": settings.kubernetes,
            }
        },
    )
    watch = None
    if reload is not None and settings.configmap_data == "none":
        watch = asyncio.create_task(_watch_file(settings.collectors, reload))
    try:
        while not await _stop_or_reload(stop, reload):
            parts, prepared = await reload_counters(parts, prepared, lib)
    finally:
        if watch is not None:
            watch.cancel()
        log.info("shutting down")
        await server.close()
        quiescent = await asyncio.to_thread(parts.loop.stop)
        if parts.kubelet:
            await asyncio.to_thread(parts.kubelet.stop)
        if parts.kube:
            await asyncio.to_thread(parts.kube.stop)
        if quiescent:  # else freeing GPM samples or the XID event set could crash NVML
            # and a hung XID wait keeps NVML in use too: no nvmlShutdown under it
            quiescent = await asyncio.to_thread(parts.collector.close)
    return quiescent and not parts.lingering


# How often the -f file is looked at for a change (dcgm-exporter watches it with inotify).
WATCH_SECONDS = 5.0


async def _watch_file(path: Path, reload: asyncio.Event) -> None:
    """Set `reload` when the file at `path` changes: a ConfigMap's update swaps the
    symlink it is mounted through, which sends no signal."""

    def signature() -> tuple[int, int, int] | None:
        try:
            st = path.stat()
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    seen = await asyncio.to_thread(signature)
    while True:
        await asyncio.sleep(WATCH_SECONDS)
        now = await asyncio.to_thread(signature)
        if now != seen:
            seen = now
            log.info("counters file changed", extra={"fields": {"path": str(path)}})
            reload.set()


async def _stop_or_reload(stop: asyncio.Event, reload: asyncio.Event | None) -> bool:
    """Wait for either; True for the stop (which wins when both are set)."""
    if reload is None:
        await stop.wait()
        return True
    waits = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(reload.wait())}
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
    reload.clear()
    return stop.is_set()


async def reload_counters(
    parts: Components, prepared: Prepared, lib: Any
) -> tuple[Components, Prepared]:
    """Read the counters again (-f, or -m's ConfigMap) and replace the collector with one
    of them, as dcgm-exporter's hot reload (SIGHUP) rebuilds its registry: the server, its
    connections, the store and the kubelet's view stay, so no scrape is refused. A list
    that cannot be read keeps the one in use, logged."""
    try:
        selection = await asyncio.to_thread(read_counters, prepared.settings)
    except StartupError as exc:
        log.error("reload: %s; the counters in use stay", exc)
        return parts, prepared
    quiescent = await asyncio.to_thread(parts.loop.stop)
    if quiescent:
        quiescent = await asyncio.to_thread(parts.collector.close)
    if not quiescent:  # its GPM samples and XID event set stay: freed under a hung call,
        # NVML could crash, and it must not be shut down at the end either
        log.warning("reload: the replaced collector is still inside NVML; its resources stay")
    prepared = replace(prepared, selection=selection)
    collector, loop = build_collector(
        prepared,
        lib,
        store=parts.store,
        stats=parts.stats,
        kubelet=parts.kubelet,
        kube=parts.kube,
        pid_pods=parts.pid_pods,
    )
    loop.start()
    log.info("counters reloaded", extra={"fields": {"fields": len(selection.fields)}})
    lingering = parts.lingering or not quiescent
    return replace(parts, collector=collector, loop=loop, lingering=lingering), prepared


async def serve(
    prepared: Prepared,
    lib: Any,
    *,
    stop: asyncio.Event,
    reload: asyncio.Event | None = None,
    on_listening: Callable[[int], None] | None = None,
) -> bool:
    """Run the exporter on an initialised NVML `lib` until `stop` is set; each time
    `reload` is set, read the counters again (`reload_counters`).

    `on_listening` gets the bound port once the server listens (port 0 picks a free one).
    Returns True when no collection is left inside NVML, so the caller may shut NVML
    down; False means its resources were deliberately left allocated (logged).
    """
    parts = build(prepared, lib)
    return await run(parts, prepared, lib, stop=stop, reload=reload, on_listening=on_listening)


async def listen(app: App, prepared: Prepared) -> RunningServer:
    """The server, listening. Raises StartupError naming the flag or file at fault."""
    try:
        ssl_context = prepared.web_config.ssl_context() if prepared.web_config else None
    except ValueError as exc:  # a certificate file changed since `prepare` read it
        raise StartupError(str(exc)) from None
    try:
        return await start_server(
            app, host=prepared.host, port=prepared.port, ssl_context=ssl_context
        )
    except OSError as exc:  # the flag, as the plugin and the autoscaler name theirs
        raise ListenError(f"--address {prepared.settings.address}: {exc.strerror}") from None


def check_devices(collector: Collector, prepared: Prepared) -> None:
    """Refuse a -d range that names GPUs (or MIG instances) the node lacks, as
    dcgm-exporter does ("couldn't find requested GPU ID"): such a typo would serve no
    series for those GPUs while /health says 200. A selection without a range that
    matches nothing (`-d i` on a node without MIG) is only warned about, by the
    collector: a DaemonSet spans nodes that differ."""
    problem = missing(prepared.devices, collector.discover())
    if problem:
        raise StartupError(f"--devices {prepared.settings.devices!r}: {problem}")


def start_nvml(settings: ExporterSettings) -> NvmlBackend:
    """The NVML backend, initialised. Raises StartupError with a hint when NVML is missing."""
    fleet = settings.sim_fleet or ("8xH100" if settings.fake_gpus else None)
    try:
        return start_backend(fleet or None)
    except NvmlStartError as exc:
        raise StartupError(str(exc)) from None


def with_backend_proc_root(prepared: Prepared, backend: NvmlBackend) -> Prepared:
    """Point --proc-root at a simulated backend's processes unless it was set explicitly
    (a simulated pid looked up in the host's /proc would find some unrelated process)."""
    default = ExporterSettings.model_fields["proc_root"].default
    if backend.proc_root is None or prepared.settings.proc_root != default:
        return prepared
    settings = prepared.settings.model_copy(update={"proc_root": backend.proc_root})
    return replace(prepared, settings=settings)


def install_signal_handlers(stop: asyncio.Event, reload: asyncio.Event | None = None) -> None:
    """SIGTERM and SIGINT stop; SIGHUP reloads the counters where `reload` is given, as
    dcgm-exporter's does (it killed the process)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if reload is not None:
        loop.add_signal_handler(signal.SIGHUP, reload.set)


def main(argv: Sequence[str] | None = None) -> int:
    settings = settings_from_argv(
        ExporterSettings, prog="gpufleet exporter", description=DESCRIPTION, argv=argv
    )
    setup_logging(debug=settings.debug, json_format=settings.log_format == "json")
    try:
        prepared = prepare(settings)
        backend = start_nvml(settings)
    except StartupError as exc:
        log.error("%s", exc)
        return 1
    prepared = with_backend_proc_root(prepared, backend)

    async def run_until_signal() -> bool:
        stop, reload = asyncio.Event(), asyncio.Event()
        install_signal_handlers(stop, reload)
        throttle_accept_errors(asyncio.get_running_loop())
        return await serve(prepared, backend.lib, stop=stop, reload=reload)

    quiescent = True  # nothing reached NVML if serving never started
    try:
        quiescent = asyncio.run(run_until_signal())
    except StartupError as exc:  # cannot listen; -d names what is not there
        log.error("%s", exc)
        quiescent = not exc.nvml_in_use
        return 1
    except OSError as exc:  # anything else the system refused: one line, not a traceback
        log.error("%s", exc)
        return 1
    finally:
        if quiescent:
            with contextlib.suppress(pynvml.NVMLError):
                backend.lib.nvmlShutdown()
        else:
            log.warning("NVML left initialised: a collection is still inside it")
        backend.close()
    return 0
