"""`gpufleet exporter`: wiring of settings, NVML, the kubelet, the collector and the server.

Startup validates everything before serving: a bad flag, env var, counters CSV, web config
or listen address is a one-line error naming it, and the process exits non-zero. At runtime
nothing but SIGTERM/SIGINT stops it; both shut down gracefully.
"""

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml

from gpufleet.exporter.collector import Collector, CollectorConfig, CollectorLoop
from gpufleet.exporter.counters import CountersError, Selection, parse_counters, select_fields
from gpufleet.exporter.devices import DeviceSelector, parse_devices
from gpufleet.exporter.fields import CATALOG
from gpufleet.exporter.nvml import NvmlReader
from gpufleet.exporter.podresources import PodResourcesWatcher
from gpufleet.exporter.procfs import PidPodMap
from gpufleet.exporter.profiles import HostnameLabel, Profile
from gpufleet.exporter.series import SeriesOptions
from gpufleet.exporter.server import ServerStats, build_app, parse_listen_address, start_server
from gpufleet.exporter.settings import (
    DCGM_DEFAULT_COLLECTORS,
    EMBEDDED_COLLECTORS,
    ExporterSettings,
)
from gpufleet.exporter.store import SnapshotStore
from gpufleet.exporter.webconfig import WebConfig, WebConfigError, load_web_config
from gpufleet.logs import setup_logging
from gpufleet.nvml.backend import open_nvml
from gpufleet.settings import SettingsError, build_parser, exit_on_settings_error, load_settings

log = logging.getLogger(__name__)

DESCRIPTION = """Serve NVML GPU metrics in Prometheus format: a drop-in for NVIDIA's dcgm-exporter
(same metric names, labels, counters CSV, flags and env vars), with per-pod values on
shared GPUs. Every flag can also be set through the env var shown with it; a flag wins
over its env var. Endpoints: /metrics, /health."""

# Accepted for drop-in compatibility; they configure DCGM itself or features not built yet.
_UNSUPPORTED = {
    "kubernetes_enable_pod_labels": False,
    "kubernetes_enable_dra": False,
    "hpc_job_mapping_dir": "",
    "remote_hostengine_info": "",
    "web_systemd_socket": False,
    "enable_dcgm_log": False,
    "configmap_data": "none",
}


class StartupError(Exception):
    """A startup problem; the message names the file, flag or setting."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Prepared:
    """Everything validated at startup, before any thread or socket exists."""

    settings: ExporterSettings
    selection: Selection
    devices: DeviceSelector
    web_config: WebConfig | None
    host: str | None
    port: int


def load_selection(path: Path) -> Selection:
    """Read and resolve the counters CSV; unknown fields are warned about, line by line."""
    if path == DCGM_DEFAULT_COLLECTORS and not path.exists():
        path = EMBEDDED_COLLECTORS
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise StartupError(f"counters file {path}: {exc.strerror or exc}") from None
    try:
        rows = parse_counters(text, source=str(path))
    except CountersError as exc:
        raise StartupError(str(exc)) from None
    selection, warnings = select_fields(rows, CATALOG, source=str(path))
    for warning in warnings:
        log.warning("%s", warning)
    if not selection.fields:
        raise StartupError(f"counters file {path}: no known field selected")
    return selection


def prepare(settings: ExporterSettings) -> Prepared:
    """Validate the settings' files and addresses. Raises StartupError."""
    for name, inert in _UNSUPPORTED.items():
        if getattr(settings, name) != inert:
            flag = ExporterSettings.model_fields[name].json_schema_extra["flags"][-1]  # type: ignore[index]
            log.warning("%s is accepted for compatibility but has no effect in gpufleet", flag)
    try:
        host, port = parse_listen_address(settings.address)
    except ValueError as exc:
        raise StartupError(f"--address: {exc}") from None
    try:
        devices = parse_devices(settings.devices)
    except ValueError as exc:
        raise StartupError(f"--devices: {exc}") from None
    try:
        web_config = load_web_config(settings.web_config_file) if settings.web_config_file else None
    except (WebConfigError, OSError) as exc:
        raise StartupError(str(exc)) from None
    return Prepared(
        settings=settings,
        selection=load_selection(settings.collectors),
        devices=devices,
        web_config=web_config,
        host=host,
        port=port,
    )


def series_options(settings: ExporterSettings) -> SeriesOptions:
    hostname = None if settings.no_hostname else (settings.node_name or socket.gethostname())
    return SeriesOptions(
        profile=Profile(settings.compat),
        hostname=hostname,
        hostname_label=HostnameLabel(settings.hostname_label),
        pod_uid=settings.kubernetes_enable_pod_uid,
        old_namespace=settings.use_old_namespace,
        replace_blanks_in_model_name=settings.replace_blanks_in_model_name,
        virtual_gpus=settings.kubernetes_virtual_gpus,
    )


async def serve(
    prepared: Prepared,
    lib: Any,
    *,
    stop: asyncio.Event,
    on_listening: Callable[[int], None] | None = None,
) -> None:
    """Run the exporter on an initialised NVML `lib` until `stop` is set.

    `on_listening` gets the bound port once the server listens (port 0 picks a free one).
    """
    settings = prepared.settings
    store = SnapshotStore()
    stats = ServerStats()
    kubelet = pid_pods = None
    if settings.kubernetes:
        kubelet = PodResourcesWatcher(
            socket_path=settings.pod_resources_kubelet_socket,
            checkpoint_path=settings.kubelet_checkpoint,
            refresh_seconds=settings.kubelet_refresh_seconds,
        )
        pid_pods = PidPodMap(proc_root=settings.proc_root)
    reader = NvmlReader(lib, (f.spec for f in prepared.selection.fields))
    collector = Collector(
        lib=lib,
        reader=reader,
        store=store,
        kubelet=kubelet,
        pid_pods=pid_pods,
        server_stats=stats,
        config=CollectorConfig(
            selection=prepared.selection,
            options=series_options(settings),
            extra_resource_names=settings.resource_names,
            self_metrics=settings.enable_exporter_metrics,
        ),
    )
    interval = settings.interval_seconds
    loop = CollectorLoop(
        collector, interval_seconds=interval, timeout_seconds=settings.collect_timeout_seconds
    )
    app = build_app(
        store,
        web_config=prepared.web_config,
        stats=stats,
        stale_after_seconds=settings.stale_after_seconds or 3 * interval,
    )
    ssl_context = prepared.web_config.ssl_context() if prepared.web_config else None
    server = await start_server(
        app, host=prepared.host, port=prepared.port, ssl_context=ssl_context
    )
    if kubelet:
        kubelet.start()
    loop.start()
    if on_listening:
        on_listening(server.port)
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
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        await server.close()
        await asyncio.to_thread(loop.stop)
        if kubelet:
            await asyncio.to_thread(kubelet.stop)
        collector.close()


def open_backend(settings: ExporterSettings) -> Any:
    """The NVML backend, initialised. Raises StartupError with a hint when NVML is missing."""
    fleet = settings.sim_fleet or ("8xH100" if settings.fake_gpus else None)
    try:
        lib = open_nvml(fleet or None)
    except ValueError as exc:
        raise StartupError(f"--sim-fleet: {exc}") from None
    try:
        lib.nvmlInit()
    except pynvml.NVMLError as exc:
        raise StartupError(
            f"cannot initialise NVML: {exc}. Is the NVIDIA driver visible in this container "
            "(runtimeClassName: nvidia, or the NVIDIA container toolkit)? To try gpufleet "
            "without a GPU, use --sim-fleet 8xH100."
        ) from None
    return lib


def install_signal_handlers(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(ExporterSettings, prog="gpufleet exporter", description=DESCRIPTION)
    try:
        settings = load_settings(ExporterSettings, parser, argv)
    except SettingsError as exc:
        exit_on_settings_error(parser.prog, exc)
    setup_logging(debug=settings.debug, json_format=settings.log_format == "json")
    try:
        prepared = prepare(settings)
        lib = open_backend(settings)
    except StartupError as exc:
        log.error("%s", exc)
        return 1

    async def run() -> None:
        stop = asyncio.Event()
        install_signal_handlers(stop)
        await serve(prepared, lib, stop=stop)

    try:
        asyncio.run(run())
    except OSError as exc:  # cannot listen
        log.error("%s", exc)
        return 1
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            lib.nvmlShutdown()
    return 0
