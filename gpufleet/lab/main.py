"""`gpufleet lab`: the whole stack on one machine, on simulated hardware.

For now: a simulated node of 8 H100s (2 whole GPUs with a pod each, 4 time-sliced 22 ways,
2 split into 7 MIG slices each), a fake kubelet with a pod on every GPU, share and slice
(104 pods), and the real exporter attributing them, served at
http://127.0.0.1:9400/metrics. Pods come and go every few seconds so attribution is visibly
live. With `--dra N`, the first N whole GPUs go to pods through DRA claims instead, and a
fake Kubernetes API server holds the pods and the gpu.nvidia.com ResourceSlice the exporter
joins them with. Later issues add the plugin, Prometheus and the autoscaler.
"""

import argparse
import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Sequence

from pydantic import ValidationError

from gpufleet.core.device_ids import is_replica
from gpufleet.exporter.daemon import StartupError, install_signal_handlers, prepare, serve
from gpufleet.exporter.settings import ExporterSettings
from gpufleet.lab.node import DEFAULT_FLEET, NodeLayout, SimNode
from gpufleet.logs import setup_logging
from gpufleet.settings import OneLineParser, describe_validation_error

log = logging.getLogger(__name__)


def _at_least(minimum: float, kind: type = int) -> Callable[[str], float]:
    """An argparse type: a number of `kind` no smaller than `minimum`."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text} is below the minimum of {minimum}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="gpufleet lab",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--address", default="127.0.0.1:9400", help="exporter listen address")
    parser.add_argument("--fleet", default=DEFAULT_FLEET, help="simulated GPUs (fleet spec)")
    parser.add_argument(
        "--replicas", type=_at_least(1), default=22, help="time-slicing replicas per GPU"
    )
    parser.add_argument("--interval-ms", type=int, default=1000, help="collection interval")
    parser.add_argument(
        "--dra",
        type=_at_least(0),
        default=0,
        metavar="N",
        help="give the first N whole GPUs to pods through DRA claims of gpu.nvidia.com, "
        "run a fake Kubernetes API server with the pods and the driver's ResourceSlice, and "
        "serve pod labels and dra_* labels from it (0: no API server)",
    )
    parser.add_argument(
        "--churn-seconds",
        type=_at_least(0.0, float),
        default=10.0,
        help="replace one time-sliced pod this often (0: never)",
    )
    return parser


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


# The lab's flags that set an exporter setting, for error messages.
_FLAGS = {"address": "--address", "collect_interval_ms": "--interval-ms"}


def _settings(node: SimNode, args: argparse.Namespace, kube: dict[str, object]) -> ExporterSettings:
    """The exporter's settings for the lab's node; a bad value is a StartupError naming
    the lab's flag."""
    try:
        return node.exporter_settings(
            address=args.address,
            collect_interval_ms=args.interval_ms,
            kubelet_refresh_seconds=1.0,
            node_name=node.layout.node_name,
            **kube,
        )
    except ValidationError as exc:
        raise StartupError(describe_validation_error(exc, flags=_FLAGS)) from None


async def _run(args: argparse.Namespace) -> None:
    try:
        node = SimNode(NodeLayout(fleet=args.fleet, replicas=args.replicas, dra_gpus=args.dra))
    except ValueError as exc:  # the fleet spec
        raise StartupError(f"--fleet: {exc}") from None
    with node, contextlib.ExitStack() as stack:
        kube = _kube_api(node, stack) if args.dra else {}
        prepared = prepare(_settings(node, args, kube))
        node.sim.nvmlInit()
        stop = asyncio.Event()
        install_signal_handlers(stop)
        churn = (
            asyncio.create_task(_churn(node, args.churn_seconds)) if args.churn_seconds else None
        )

        def listening(port: int) -> None:  # only now: a busy port must not say "running"
            host = prepared.host or "localhost"
            log.info(
                "lab running: open http://%s:%d/metrics (Ctrl-C to stop)",
                f"[{host}]" if ":" in host else host,
                port,
                extra={"fields": {"fleet": args.fleet, "pods": len(node.pods)}},
            )

        quiescent = False
        try:
            quiescent = await serve(prepared, node.sim, stop=stop, on_listening=listening)
        finally:
            if churn:
                churn.cancel()
            if quiescent:  # else a collection is still inside the simulator
                node.sim.nvmlShutdown()


def _kube_api(node: SimNode, stack: contextlib.ExitStack) -> dict[str, object]:
    """Start a fake API server showing `node`; the exporter settings that read it."""
    from gpufleet.kube.connect import api_client
    from gpufleet.lab.kubeapi.server import FakeApiServer

    server = stack.enter_context(FakeApiServer())
    node.publish(stack.enter_context(api_client(url=server.url)))
    log.info("fake Kubernetes API server at %s", server.url)
    return {
        "kube_url": server.url,
        "kubernetes_enable_pod_labels": True,
        "kubernetes_enable_dra": True,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    setup_logging(debug=False, json_format=False)
    try:
        asyncio.run(_run(args))
    except StartupError as exc:  # a bad flag (the message names it)
        log.error("%s", exc)
        return 2
    except OSError as exc:  # cannot listen: the port is taken
        log.error("%s", exc)
        return 1
    return 0
