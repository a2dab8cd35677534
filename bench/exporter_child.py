"""The exporter under benchmark, alone in its own process.

It holds only the simulator side of the node (simulated NVML and its /proc tree) and runs
the real daemon code, `prepare` then `serve`, against the kubelet the parent process runs:
node layouts are deterministic, so GPU UUIDs, pids and pod UIDs agree on both sides. Being
its own process makes /proc/<pid> readings (CPU, RSS) the exporter's alone. Without
`--kubelet-socket` it runs as `gpufleet exporter` without `-k` does: no pod attribution,
and h2 never imported (grpc is never imported by the exporter).

Protocol with the parent: exactly one JSON line on stdout once listening,
`{"port": N, "threads": {name: native thread id}}`, then serving until SIGTERM or SIGINT.
It must never write anything else to stdout; logs go to stderr.
"""

import argparse
import asyncio
import json
import threading
from collections.abc import Sequence
from pathlib import Path

from gpufleet.exporter.daemon import install_signal_handlers, prepare, serve
from gpufleet.exporter.settings import ExporterSettings
from gpufleet.lab.node import NodeLayout, SimNode
from gpufleet.logs import setup_logging

# The daemon's long-lived threads, whose CPU the parent reports by name; the XID watcher
# starts within the first collection.
_AWAITED_THREADS = ("gpufleet-collector", "xid-watcher")
_KUBELET_THREAD = "podresources"  # with -k
_ANNOUNCE_DEADLINE_SECONDS = 10.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubelet-socket", type=Path, help="attribute to pods (-k)")
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--node-name", default="bench-node")
    return parser


async def _announce(port: int, awaited: tuple[str, ...]) -> None:
    """Print the port and thread ids once the `awaited` threads exist (or after a deadline:
    a thread missing then is reported among the unnamed threads)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _ANNOUNCE_DEADLINE_SECONDS
    while True:
        threads = {t.name: t.native_id for t in threading.enumerate() if t.native_id}
        started = all(any(n.startswith(p) for n in threads) for p in awaited)
        if started or loop.time() >= deadline:
            break
        await asyncio.sleep(0.01)
    print(json.dumps({"port": port, "threads": threads}), flush=True)


async def _run(args: argparse.Namespace) -> None:
    kubelet = {}
    awaited = _AWAITED_THREADS
    if args.kubelet_socket:
        kubelet = {
            "kubernetes": True,
            "pod_resources_kubelet_socket": args.kubelet_socket,
            "kubelet_checkpoint": args.checkpoint,
        }
        awaited = (*awaited, _KUBELET_THREAD)
    with SimNode(NodeLayout(), with_kubelet=False) as node:
        settings = ExporterSettings(
            address="127.0.0.1:0",
            collect_interval_ms=args.interval_ms,
            proc_root=node.sim.proc_root,
            node_name=args.node_name,
            **kubelet,
        )
        prepared = prepare(settings)
        node.sim.nvmlInit()
        stop = asyncio.Event()
        install_signal_handlers(stop)
        announced: list[asyncio.Task[None]] = []  # keeps the task referenced until it is done
        try:
            await serve(
                prepared,
                node.sim,
                stop=stop,
                on_listening=lambda port: announced.append(
                    asyncio.create_task(_announce(port, awaited))
                ),
            )
        finally:
            node.sim.nvmlShutdown()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    setup_logging(debug=False, json_format=False)
    asyncio.run(_run(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
