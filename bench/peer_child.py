"""nvitop-exporter, the Python peer, on the simulated node, alone in its own process.

Runs under the peer's own environment (`bench.peer_env`), with this repository on
PYTHONPATH for the simulator only: it builds the simulator side of the benchmark's node
(the same GPUs, MIG slices and GPU processes the exporters under benchmark see), installs
it as the `pynvml` module before nvitop imports it, and runs `nvitop-exporter`'s own
command-line entry point unchanged. The process holds the simulator, as gpufleet's
benchmark child does, but no gRPC: nvitop attributes nothing to pods.

The swapped module carries every name of the real `pynvml`; its `nvml*` functions are the
simulator's. A function the simulator lacks still raises NVMLError_FunctionNotFound, as the
simulator does, and its calls are counted: on exit they are written to `--calls` as JSON
`{"missing": {name: calls}, "seconds": wall seconds}`. `_nvmlGetFunctionPointer` is left
out, so nvitop uses pynvml's functions instead of loading the real library's symbols.

Protocol with the parent: exactly one JSON line on stdout once listening, `{"port": N}`,
then serving until SIGTERM or SIGINT. Nothing else is written to stdout.
"""

import argparse
import inspect
import json
import signal
import socket
import sys
import threading
import time
import types
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pynvml

from gpufleet.lab.node import NodeLayout, SimNode
from gpufleet.lab.nvml.api import SimulatedNvml

_LISTEN_DEADLINE_SECONDS = 30.0


def swapped_pynvml(sim: SimulatedNvml, missing: Counter[str]) -> types.ModuleType:
    """A `pynvml` module whose functions are `sim`'s; calls to absent ones go to `missing`."""
    module = types.ModuleType("pynvml", pynvml.__doc__)
    for name, value in vars(pynvml).items():
        if name == "_nvmlGetFunctionPointer" or name.startswith("__"):
            continue
        if name.startswith("nvml") and inspect.isfunction(value):
            value = getattr(sim, name)
            if not hasattr(SimulatedNvml, name) and value is not getattr(pynvml, name):
                value = _counted(name, value, missing)
        setattr(module, name, value)
    return module


def _counted(name: str, fn: Callable[..., Any], calls: Counter[str]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return fn(*args, **kwargs)

    return call


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _announce_when_listening(port: int) -> None:
    deadline = time.monotonic() + _LISTEN_DEADLINE_SECONDS
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            time.sleep(0.05)
            continue
        print(json.dumps({"port": port}), flush=True)
        return


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=Path, required=True)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args(argv)
    missing: Counter[str] = Counter()
    start = time.monotonic()
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        with SimNode(NodeLayout(), with_kubelet=False) as node:
            node.sim.nvmlInit()
            sys.modules["pynvml"] = swapped_pynvml(node.sim, missing)
            from nvitop_exporter.cli import main as peer_main

            port = _free_port()
            sys.argv = [
                "nvitop-exporter",
                *("--bind-address", "127.0.0.1", "--port", str(port)),
                *("--interval", str(args.interval), "--hostname", "bench-node"),
            ]
            threading.Thread(target=_announce_when_listening, args=(port,), daemon=True).start()
            return peer_main()
    finally:
        seconds = time.monotonic() - start
        args.calls.write_text(json.dumps({"missing": dict(missing), "seconds": seconds}))


if __name__ == "__main__":
    raise SystemExit(main())
