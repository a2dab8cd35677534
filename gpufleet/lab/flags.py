"""`gpufleet lab`'s flags: each part's size, load and address, with defaults that run the
whole stack on one machine. A bad value is argparse's one line naming the flag."""

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from gpufleet.core.listen import parse_listen_address
from gpufleet.lab.node import DEFAULT_FLEET, WHOLE_GPUS
from gpufleet.settings import OneLineParser

# The copy an installed wheel carries (setup.py), else rules/ in a checkout (./dev lab).
_PACKAGED_RULES = Path(__file__).resolve().parent / "rules"
RULES = (
    _PACKAGED_RULES if _PACKAGED_RULES.is_dir() else Path(__file__).resolve().parents[2] / "rules"
)


# Past this the simulated pods' arrivals outrun the lab's real-time loop (the API server's
# too): at 1e8 a Poisson step never ended, and the API server answered no one.
MAX_RATE = 1000.0


def _at_least(
    minimum: float, kind: type = int, maximum: float = math.inf
) -> Callable[[str], float]:
    """An argparse type: a number of `kind` no smaller than `minimum`, none over `maximum`."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text} is below the minimum of {minimum}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"{text} is over the maximum of {maximum:g}")
        return value

    return parse


def _address(text: str) -> tuple[str, int]:
    """An argparse type: host:port (host defaults to 127.0.0.1; port 0 picks a free one)."""
    try:
        host, port = parse_listen_address(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return host or "127.0.0.1", port


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The description as written; each flag's default after its help."""


def parser(description: str) -> argparse.ArgumentParser:
    """`gpufleet lab`'s flags, with `description` as its help's text."""
    parser = OneLineParser(
        prog="gpufleet lab",
        description=description,
        formatter_class=_HelpFormatter,
    )
    nodes = parser.add_argument_group("GPU nodes")
    nodes.add_argument("--nodes", type=_at_least(1), default=2, help="simulated GPU nodes")
    nodes.add_argument(
        "--address",
        default="127.0.0.1:9400",
        help="the first node's exporter listen address (the next nodes: next ports)",
    )
    nodes.add_argument(
        "--plugin-address",
        type=_address,
        default="127.0.0.1:9500",
        help="the first node's device plugin metrics address (the next nodes: next ports)",
    )
    nodes.add_argument("--fleet", default=DEFAULT_FLEET, help="simulated GPUs (fleet spec)")
    nodes.add_argument(
        "--replicas", type=_at_least(1), default=22, help="time-slicing replicas per GPU"
    )
    nodes.add_argument("--interval-ms", type=int, default=1000, help="collection interval")
    nodes.add_argument(
        "--dra",
        type=_at_least(0),
        default=0,
        metavar="N",
        help=f"give the first node's first N (at most {WHOLE_GPUS}) whole GPUs to pods "
        "through DRA claims of "
        "gpu.nvidia.com, show its pods and the driver's ResourceSlice on the API server, and "
        "serve pod labels and dra_* labels from it",
    )
    nodes.add_argument(
        "--churn-seconds",
        type=_at_least(0.0, float),
        default=10.0,
        help="replace one time-sliced pod of the first node this often (0: never)",
    )
    serving = parser.add_argument_group("serving and autoscaling")
    load = serving.add_mutually_exclusive_group()
    load.add_argument("--trace", help="replay this request trace CSV (gpufleet simulate's)")
    load.add_argument(
        "--workload", help="replay a generated workload, FAMILY[:key=value,...] (as simulate)"
    )
    serving.add_argument(
        "--rate",
        type=_at_least(0.0, float, MAX_RATE),
        default=6.0,
        help=(
            "Poisson requests per second without --trace or --workload (one pod serves ~4 "
            "at --speed 1; "
            f"at most {MAX_RATE:g})"
        ),
    )
    serving.add_argument(
        "--speed",
        type=_at_least(0.001, float),
        default=1.0,
        help=(
            "replay the trace this many times faster; the pods serve as much faster, under "
            "--rate too (one pod then serves ~4x this)"
        ),
    )
    serving.add_argument(
        "--policy", choices=("gpufleet", "hpa", "keda"), default="gpufleet", help="its policy"
    )
    serving.add_argument(
        "--min-replicas",
        type=_at_least(0),
        default=1,
        help="its minReplicas; 0 scales it to zero when idle, and the first request the "
        "gateway holds activates it",
    )
    serving.add_argument("--max-replicas", type=_at_least(1), default=8, help="its maxReplicas")
    serving.add_argument(
        "--idle-seconds-to-zero",
        type=_at_least(0),
        default=300,
        help="with --min-replicas 0: idle this long, it goes to zero",
    )
    ops = parser.add_argument_group("API server, Prometheus, page")
    ops.add_argument(
        "--api-address",
        type=_address,
        default="127.0.0.1:8001",
        help="the fake Kubernetes API server (its port; it listens on 127.0.0.1 only)",
    )
    ops.add_argument(
        "--autoscaler-address",
        type=_address,
        default="127.0.0.1:9402",
        help="the autoscaler's metrics",
    )
    ops.add_argument(
        "--prometheus-address",
        type=_address,
        default="127.0.0.1:9090",
        help="Prometheus, scraping every part of the lab with rules/ loaded",
    )
    ops.add_argument(
        "--alertmanager-address",
        type=_address,
        default="127.0.0.1:9093",
        help="Alertmanager, when prometheus-alertmanager is installed",
    )
    ops.add_argument(
        "--web-address", type=_address, default="127.0.0.1:8080", help="the lab's web page"
    )
    ops.add_argument(
        "--scrape-seconds",
        type=_at_least(0.5, float),
        default=2.0,
        help="Prometheus' scrape and rule interval (the autoscaler is told it)",
    )
    # Absolute: Prometheus runs in the lab's temporary directory, where a relative glob
    # matched nothing, and Prometheus ran without a rule and said nothing.
    ops.add_argument(
        "--rules", type=lambda t: Path(t).resolve(), default=RULES, help="folder of *.rules.yml"
    )
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The flags, each alone and together; argparse's one line and exit 2 for a mistake."""
    args = parser.parse_args(argv)
    if args.min_replicas > args.max_replicas:
        parser.error(
            f"--min-replicas {args.min_replicas} is more than --max-replicas {args.max_replicas}"
        )
    if args.rules != RULES and not args.rules.is_dir():  # a typo: panels and alerts silent
        parser.error(f"--rules {args.rules}: no such directory")
    if args.dra > WHOLE_GPUS:
        parser.error(f"--dra {args.dra}: the first node has {WHOLE_GPUS} whole GPUs for pods")
    last = args.nodes - 1  # the next nodes listen on the next ports
    for flag, port in (
        ("--address", _port(args.address)),
        ("--plugin-address", args.plugin_address[1]),
    ):
        if port and port + last > 65535:
            parser.error(f"{flag}: node {last} would listen on port {port + last}, over 65535")
    return args


def _port(text: str) -> int:
    """The port of an exporter address; 0 where the exporter's own settings will refuse it."""
    try:
        return parse_listen_address(text)[1]
    except ValueError:
        return 0
