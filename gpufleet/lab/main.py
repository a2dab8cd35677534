"""`gpufleet lab`: the whole stack on one machine, on simulated hardware.

  - GPU nodes (--nodes, 2 by default), each a simulated node of 8 H100s (2 whole GPUs
    with a pod each, 4 time-sliced 22 ways, 2 split into 7 MIG slices each) with a pod on
    every GPU, share and slice (104 pods), a fake kubelet, the real device plugin
    registered with it and the real exporter attributing the pods (the first at --address,
    the next on the following ports);
  - a fake Kubernetes API server with its deployment controller, priority scheduler and
    node provisioner;
  - simulated vLLM pods of a Deployment serving Poisson load (--rate), a trace (--trace) or
    a generated workload (--workload), scaled by the real `gpufleet autoscaler` through a
    GPUAutoscaler with placeholders on;
  - real Prometheus with rules/ scraping all of it, and Alertmanager, when installed;
  - a web page of the dashboards' key panels, drawn from Prometheus.

Every URL is printed once all of it runs. Port 0 in any address picks a free port. A pod
of the first node is replaced every 10 s (--churn-seconds), so attribution is visibly live. With
`--dra N`, the first node's first N whole GPUs go to pods through DRA claims instead, and
the API server holds its pods and the gpu.nvidia.com ResourceSlice the exporter joins.
"""

import argparse
import asyncio
import contextlib
import itertools
import logging
import math
import random
import signal
import socket
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from gpufleet.autoscaler.replay.core.trace import Trace
from gpufleet.autoscaler.replay.core.workloads import WorkloadError, workload_trace
from gpufleet.autoscaler.replay.trace_file import TraceError, load_trace
from gpufleet.core.device_ids import is_replica
from gpufleet.core.listen import parse_listen_address
from gpufleet.exporter.daemon import (
    ListenError,
    Prepared,
    StartupError,
    install_signal_handlers,
    prepare,
)
from gpufleet.lab import flags
from gpufleet.lab import prometheus as prom
from gpufleet.lab.gpunode import RunningPlugin, run_exporter, start_node_plugin
from gpufleet.lab.node import NodeLayout, SimNode
from gpufleet.lab.web import serve_page
from gpufleet.lab.workload import (
    NAME,
    NAMESPACE,
    ServingWorkload,
    WorkloadSpec,
    create_workload,
    lab_timing,
)
from gpufleet.logs import setup_logging, throttle_accept_errors
from gpufleet.settings import describe_validation_error

if TYPE_CHECKING:  # loaded when the lab starts, after its flags are checked
    from kubernetes.client import ApiClient

    from gpufleet.exporter.settings import ExporterSettings
    from gpufleet.lab.kubeapi.server import FakeApiServer

log = logging.getLogger(__name__)


async def _churn(node: SimNode, every_seconds: float) -> None:
    """Delete one time-sliced pod and schedule a new one on its share, forever."""
    for generation in itertools.count(1):
        await asyncio.sleep(every_seconds)
        shared = sorted(k for k, p in node.pods.items() if is_replica(p.device_ids[0]))
        if not shared:
            return
        old = node.pods[shared[generation % len(shared)]]
        node.remove_pod(old.namespace, old.name)
        name = f"{old.name.rsplit('-g', 1)[0]}-g{generation}"
        node.add_pod(old.namespace, name, old.resource_name, old.device_ids)
        log.info("pod replaced", extra={"fields": {"old": old.name, "new": name}})


class _Stopped(Exception):
    """A stop signal came during start-up: the parts not yet started are not."""


def _going_on(stop: asyncio.Event) -> None:
    """Between start-up steps: each may wait up to 30 s for a part to be ready, and Ctrl-C
    waited for all of them, then printed the banner of a lab about to stop."""
    if stop.is_set():
        raise _Stopped


async def _ready(child: prom.Child, path: str, stop: asyncio.Event) -> None:
    """Wait for `child` to answer at `path` (up to 30 s); a stop meanwhile ends the wait at
    once, as `_Stopped`."""
    await asyncio.to_thread(child.wait_ready, path, stopped=stop.is_set)
    _going_on(stop)


# The lab's flags that set an exporter setting, for error messages.
_FLAGS = {"address": "--address", "collect_interval_ms": "--interval-ms"}


def _exporter_address(address: str, index: int) -> str:
    """Node `index`'s exporter address: the first's port plus `index` (0 stays 0)."""
    if index == 0:
        return address
    host, port = parse_listen_address(address)  # the first node's settings checked it
    return f"{f'[{host}]' if host and ':' in host else host or ''}:{port + index if port else 0}"


def _exporter_settings(
    node: SimNode, args: argparse.Namespace, index: int, kube: dict[str, object]
) -> "ExporterSettings":
    """The settings of node `index`'s exporter; a bad value is a StartupError naming the
    lab's flag."""
    try:
        return node.exporter_settings(
            address=_exporter_address(args.address, index),
            collect_interval_ms=args.interval_ms,
            kubelet_refresh_seconds=1.0,
            node_name=node.layout.node_name,
            **kube,
        )
    except ValidationError as exc:
        raise StartupError(describe_validation_error(exc, flags=_FLAGS)) from None


def _exporter_started(task: asyncio.Task, prepared: Prepared) -> None:
    """Raise a finished exporter's startup error. A port taken is the lab's `--address`
    with the port at fault: the exporter named its own address, which the lab derived for
    a node after the first."""
    try:
        task.result()
    except ListenError as exc:
        reason = str(exc).removeprefix(f"--address {prepared.settings.address}: ")
        raise ListenError(f"--address: {reason}") from None


def _trace(args: argparse.Namespace) -> Trace | None:
    try:
        if args.trace:
            return load_trace(args.trace)
        if args.workload:
            return workload_trace(args.workload, seed=0)
    except (TraceError, WorkloadError) as exc:
        raise StartupError(f"--{'trace' if args.trace else 'workload'}: {exc}") from None
    except OSError as exc:
        raise StartupError(f"--trace: {args.trace}: {exc.strerror}") from None
    return None


def _free(flag: str, address: tuple[str, int]) -> tuple[str, int]:
    """The address with port 0 replaced by a free port; OSError naming `flag` if taken."""
    host, port = address
    if port == 0:
        return host, _unused_port(host)
    prom.check_free(host, port, flag)
    return address


def _unused_port(host: str) -> int:
    """A port nothing listens on, for a child to bind later: below the kernel's ephemeral
    range. One the kernel picked (a bind to port 0) it may give to any connection's source
    port, or another bind to 0, before the child binds it (the suite's labs failed with
    "address already in use" beside tests that connect)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    for _ in range(100):
        port = random.randint(max(1024, low - 12000), max(1024, low - 1))
        try:
            prom.check_free(host, port, "")
        except OSError:
            continue
        return port
    with socket.socket() as probe:  # every one tried was taken: let the kernel choose
        probe.bind((host, 0))
        return probe.getsockname()[1]


def _url(address: tuple[str, int], path: str = "") -> str:
    host, port = address
    return f"http://{f'[{host}]' if ':' in host else host}:{port}{path}"


@dataclass(slots=True)
class _Lab:
    """What runs, for the printout and the shutdown."""

    workdir: Path
    urls: list[tuple[str, str]] = field(default_factory=list)
    children: list[prom.Child] = field(default_factory=list)
    plugins: list[RunningPlugin] = field(default_factory=list)

    def print(self, load: str) -> None:
        width = max(len(name) for name, _ in self.urls)
        lines = [f"gpufleet lab running (Ctrl-C to stop); its files are in {self.workdir}"]
        lines += [f"  {name:<{width}}  {url}" for name, url in self.urls]
        lines.append(
            f"Deployment {NAMESPACE}/{NAME} serves {load}, scaled by the GPUAutoscaler "
            f"{NAMESPACE}/{NAME}; its pods' targets: {self.workdir / 'targets' / 'serving.json'}"
        )
        print("\n".join(lines), flush=True)


async def _run(args: argparse.Namespace) -> None:
    # First: a signal during setup must not kill the process before the temporary
    # directories below exist to be cleaned. SIGHUP too (a closed terminal): Prometheus
    # and Alertmanager take it for "reload" and would outlive the lab, holding its ports.
    stop = asyncio.Event()
    install_signal_handlers(stop)
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, stop.set)
    throttle_accept_errors(asyncio.get_running_loop())
    trace = _trace(args)
    try:
        nodes = [
            SimNode(
                NodeLayout(
                    fleet=args.fleet,
                    replicas=args.replicas,
                    dra_gpus=args.dra if i == 0 else 0,
                    seed=i,  # distinct GPU UUIDs and pod UIDs per node
                    node_name=f"gpu-node-{i}",
                    pod_prefix=f"n{i}-" if i else "",  # unique in their namespaces
                )
            )
            for i in range(args.nodes)
        ]
    except ValueError as exc:  # the fleet spec
        raise StartupError(f"--fleet: {exc}") from None
    from gpufleet.kube.connect import api_client
    from gpufleet.lab.kubeapi.server import FakeApiServer

    api_host, api_port = args.api_address
    api_port = api_port or _unused_port(api_host)
    server = FakeApiServer(port=api_port)
    kube = {"kube_url": server.url, "kubernetes_enable_pod_labels": True}
    prepared = [
        prepare(
            _exporter_settings(
                n, args, i, {**kube, "kubernetes_enable_dra": True} if i == 0 and args.dra else {}
            )
        )
        for i, n in enumerate(nodes)
    ]
    # After the flags: a mistaken one is the line to show, whatever port is taken.
    _free("--api-address", (api_host, api_port))
    with (
        contextlib.ExitStack() as stack,
        tempfile.TemporaryDirectory(prefix="gpufleet-lab-") as tmp,
    ):
        lab = _Lab(workdir=Path(tmp))
        for node in nodes:
            stack.enter_context(node)
        stack.enter_context(server)
        api = stack.enter_context(api_client(url=server.url))
        if args.dra:
            nodes[0].publish(api)
        try:
            await _serve(
                args,
                lab,
                nodes=nodes,
                prepared=prepared,
                server=server,
                api=api,
                trace=trace,
                stop=stop,
            )
        finally:
            # All at once: each gets up to 15 s to stop, and on a loaded machine one after
            # another took longer than a Ctrl-C should.
            await asyncio.gather(*(asyncio.to_thread(c.stop) for c in lab.children))
            for plugin in lab.plugins:
                await plugin.stop()


async def _serve(
    args: argparse.Namespace,
    lab: _Lab,
    *,
    nodes: list[SimNode],
    prepared: list[Prepared],
    server: "FakeApiServer",
    api: "ApiClient",
    trace: Trace | None,
    stop: asyncio.Event,
) -> None:
    """Start everything in dependency order, print the URLs, run until `stop`."""
    targets = lab.workdir / "targets"
    targets.mkdir()
    exporters: list[asyncio.Task] = []
    lab.urls.append(("Kubernetes API", server.url))
    churn = None
    try:
        for i, (node, ready) in enumerate(zip(nodes, prepared, strict=True)):
            node.sim.nvmlInit()
            host, port = args.plugin_address
            plugin = await start_node_plugin(node, f"{host}:{port + i if port else 0}")
            lab.plugins.append(plugin)
            listening: asyncio.Future = asyncio.get_running_loop().create_future()
            task = asyncio.create_task(run_exporter(node, ready, stop=stop, listening=listening))
            exporters.append(task)
            await asyncio.wait({listening, task}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                _exporter_started(task, ready)
            _going_on(stop)
            name = node.layout.node_name
            exporter = (ready.host or "127.0.0.1", listening.result())
            plugin_at = (host, plugin.port)
            lab.urls.append((f"{name} exporter", _url(exporter, "/metrics")))
            lab.urls.append((f"{name} plugin", _url(plugin_at, "/metrics")))
            # Each component's job named as the chart's, so the alerts tell them apart.
            prom.write_targets(
                targets / f"exporter-{i}.json",
                [f"{exporter[0]}:{exporter[1]}"],
                {"job": "gpufleet-exporter"},
            )
            prom.write_targets(
                targets / f"plugin-{i}.json",
                [f"{host}:{plugin.port}"],
                {"node": name, "job": "gpufleet-plugin"},
            )
        if args.churn_seconds:
            churn = asyncio.create_task(_churn(nodes[0], args.churn_seconds))
        await _observe(args, lab, api=api, server=server, trace=trace, targets=targets, stop=stop)
    finally:
        if churn:
            churn.cancel()
        stop.set()
        for task in exporters:
            with contextlib.suppress(Exception):
                await task


async def _observe(
    args: argparse.Namespace,
    lab: _Lab,
    *,
    api: "ApiClient",
    server: "FakeApiServer",
    trace: Trace | None,
    targets: Path,
    stop: asyncio.Event,
) -> None:
    """Prometheus, Alertmanager, the autoscaler, the workload and the page."""
    _going_on(stop)
    web_address = _free("--web-address", args.web_address)
    prom_address = _free("--prometheus-address", args.prometheus_address)
    autoscaler_address = _free("--autoscaler-address", args.autoscaler_address)
    alertmanager, am_child = "", None
    if prom.installed(prom.ALERTMANAGER):
        am_address = _free("--alertmanager-address", args.alertmanager_address)
        am_child = prom.start_alertmanager(lab.workdir, host=am_address[0], port=am_address[1])
        lab.children.append(am_child)
        alertmanager = f"{am_address[0]}:{am_address[1]}"
    rules = sorted(args.rules.glob("*.rules.yml"))
    if not rules:
        log.warning("no rules in %s: Prometheus runs without alerts", args.rules)
    prometheus_url = _url(prom_address)
    if prom.installed(prom.PROMETHEUS):
        child = prom.start_prometheus(
            lab.workdir,
            host=prom_address[0],
            port=prom_address[1],
            targets_dir=targets,
            rule_files=rules,
            scrape_seconds=args.scrape_seconds,
            alertmanager=alertmanager,
        )
        lab.children.append(child)
        await _ready(child, "/-/ready", stop)
        lab.urls.append(("Prometheus", prometheus_url))
    else:
        log.warning("prometheus is not installed (./dev lab installs it): no metrics store")
    if am_child:
        await _ready(am_child, "/-/ready", stop)
        lab.urls.append(("Alertmanager", f"http://{alertmanager}"))
    spec = WorkloadSpec(
        nodes=args.nodes,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        idle_seconds_to_zero=args.idle_seconds_to_zero,
        policy=args.policy,
        rate_rps=args.rate,
        trace=trace,
        speed=args.speed,
    )
    create_workload(api, spec)
    workload = ServingWorkload(
        server,
        timing=lab_timing(spec),
        targets_file=targets / "serving.json",
        rate_rps=spec.rate_rps,
        trace=spec.trace,
        speed=spec.speed,
        gateway=True,
    )
    try:
        autoscaler = prom.Child(
            [
                sys.executable,
                "-m",
                "gpufleet.cli",
                "autoscaler",
                f"--kube-url={server.url}",
                f"--prometheus-url={prometheus_url}",
                "--leader-elect=false",
                f"--metrics-address={autoscaler_address[0]}:{autoscaler_address[1]}",
                f"--scrape-interval-seconds={args.scrape_seconds:g}",
                # Whole seconds: the flag takes no fraction (--scrape-seconds 3.3 gave 13.2s).
                f"--rate-window={math.ceil(max(4 * args.scrape_seconds, 10))}s",
            ],
            lab.workdir / "autoscaler.log",
            url=_url(autoscaler_address),
            name="gpufleet autoscaler",
        )
        lab.children.append(autoscaler)
        await _ready(autoscaler, "/metrics", stop)
        prom.write_targets(
            targets / "autoscaler.json",
            [f"{autoscaler_address[0]}:{autoscaler_address[1]}"],
            {"job": "gpufleet-autoscaler"},
        )
        lab.urls.append(("autoscaler", _url(autoscaler_address, "/metrics")))
        runner = await serve_page(prometheus_url, *web_address)
        try:
            lab.urls.insert(0, ("page", _url(web_address, "/")))
            log.info("lab running: open %s (Ctrl-C to stop)", lab.urls[0][1])
            if trace is not None:
                load = f"the trace {trace.name} ({len(trace)} requests) at {args.speed:g}x"
            else:
                load = f"Poisson load of {args.rate:g} requests/s"
            lab.print(load)
            watch = asyncio.create_task(watch_children(lab.children, stop))
            try:
                await stop.wait()
            finally:
                watch.cancel()
        finally:
            await runner.cleanup()
    finally:
        await asyncio.to_thread(workload.stop)


async def watch_children(
    children: Sequence[prom.Child], stop: asyncio.Event, every_seconds: float = 1.0
) -> None:
    """One line for each child (Prometheus, Alertmanager, the autoscaler) that exits while
    the lab runs: its panels and alerts stop, and nothing else would say why."""
    told: set[int] = set()
    while not stop.is_set():
        for child in children:
            code = child.exit_code()
            if code is not None and id(child) not in told:
                told.add(id(child))
                log.error(
                    "%s exited with code %d (see %s); the lab runs on without it",
                    child.name,
                    code,
                    child.log_file,
                )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_seconds)


def main(argv: Sequence[str] | None = None) -> int:
    args = flags.parse(flags.parser(__doc__), argv)
    setup_logging(debug=False, json_format=False)
    try:
        asyncio.run(_run(args))
    except (OSError, ListenError, prom.LabProcessError) as exc:  # a port taken, a child failed
        log.error("%s", exc)
        return 1
    except StartupError as exc:  # a bad flag (the message names it)
        log.error("%s", exc)
        return 2
    except _Stopped:  # as a Ctrl-C before the handlers were in place
        log.info("stopped during start-up")
        return 130
    return 0
