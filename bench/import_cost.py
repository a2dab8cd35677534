"""What importing the exporter costs in resident memory, package by package (issue 15).

Each number comes from a fresh interpreter, read from its own /proc/self/status (VmRSS):
- floors: the bare interpreter, each library of the exporter's stack alone, and the stacks
  an exporter needs without and with `-k`, with and without the simulated node the
  benchmark's exporters hold;
- the own cost of every module the exporter's daemon imports, for the daemon as it starts
  with no flags, with `-k` and with `--web-config-file`: an import hook reads RSS around
  each module's loading (an extension module's creation included) and charges the module
  what it added less what the imports it made added, summed by distribution (stdlib by
  module). Where `python -X importtime` orders imports by time, this charges memory.

RSS grows in pages and allocator chunks, so a module's own cost is accurate to about
0.1 MiB and the hook's own bookkeeping adds a little; the floors are the figures to quote.
`--traced` charges tracemalloc's traced bytes instead of RSS: the live Python objects each
module's loading left, free of page and pymalloc pool granularity (C allocations of
extension modules are not seen), the figure for comparing small modules.

Run from the repository root:  python3 -m bench.import_cost [--min-mib 0.1] [--traced]
Prints a Markdown report on stdout. Numbers vary by a few hundred KiB from run to run.
"""

import argparse
import functools
import json
import platform
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata

from bench.entry import exit_with

MIB = 1 << 20
# What the exporter loads: its HTTP server is gpufleet's own, on asyncio streams.
STACK = ("asyncio", "pydantic_settings", "pynvml")
# With -k it adds h2 for its one gRPC call.
STACK_H2 = (*STACK, "h2.connection")
# Issue 15's "card's stack" with pod attribution, kept as its definition; the exporter no
# longer loads aiohttp or grpc.
STACK_K = ("aiohttp.web", "pydantic_settings", "pynvml", "grpc")
# The simulator side of the benchmark's node, as the exporters under benchmark hold it.
SIM_NODE = (
    "from gpufleet.lab.node import NodeLayout, SimNode\n"
    "node = SimNode(NodeLayout(), with_kubelet=False)\n"
    "node.start()\n"
)
DAEMON = "gpufleet.exporter.daemon"
# What each configuration imports beyond the daemon module (where the flags are handled).
CONFIGURATIONS = {
    "no flags": (DAEMON,),
    "-k": (DAEMON, "gpufleet.exporter.pods.podresources"),
    "--web-config-file": (DAEMON, "gpufleet.http.webconfig"),
}

_RSS = (
    "def rss():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmRSS:'):\n"
    "            return int(line.split()[1]) * 1024\n"
)
# Charges each module the resident memory its own loading added (creating an extension
# module included), less what the imports it made while loading added: its own cost.
_METER = (
    _RSS
    + """
import json, sys

frames, own = [], {}


class Meter:
    def __init__(self, loader, name):
        self._loader, self._name = loader, name

    def __getattr__(self, attr):
        return getattr(self._loader, attr)

    def create_module(self, spec):
        frames.append([self._name, rss(), 0])
        create = getattr(self._loader, "create_module", None)
        try:
            return create(spec) if create else None
        except BaseException:
            self._done()
            raise

    def exec_module(self, module):
        try:
            self._loader.exec_module(module)
        finally:
            self._done()

    def _done(self):
        name, start, children = frames.pop()
        total = rss() - start
        own[name] = own.get(name, 0) + total - children
        if frames:
            frames[-1][2] += total


class Finder:
    def find_spec(self, name, path, target=None):
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                if hasattr(spec.loader, "exec_module"):
                    spec.loader = Meter(spec.loader, name)
                return spec
        return None


start = rss()
sys.meta_path.insert(0, Finder())
for name in sys.argv[1:]:
    __import__(name)
print(json.dumps({"interpreter": start, "modules": own}))
"""
)


def _python(code: str, *args: str, python: str = sys.executable) -> str:
    result = subprocess.run(
        [python, "-c", code, *args], capture_output=True, text=True, check=True, timeout=120
    )
    return result.stdout


def rss_after(modules: Sequence[str], *, setup: str = "", python: str = sys.executable) -> int:
    """Resident bytes of a fresh interpreter once it imported `modules` and ran `setup`."""
    imports = "".join(f"import {m}\n" for m in modules)
    return int(_python(f"{imports}{setup}{_RSS}print(rss())", python=python))


# The meter with tracemalloc's traced bytes standing in for RSS.
_TRACED_METER = _METER.replace(
    "def rss():",
    "import tracemalloc\ntracemalloc.start()\n\n\ndef rss():\n"
    "    return tracemalloc.get_traced_memory()[0]\n\n\ndef _rss():",
    1,
)


def own_costs(modules: Sequence[str], *, traced: bool = False) -> tuple[int, dict[str, int]]:
    """The interpreter's resident bytes (traced bytes with `traced`) before importing
    `modules`, and each module's own cost (what loading it added, less its own imports),
    over every module they import."""
    result = json.loads(_python(_TRACED_METER if traced else _METER, *modules))
    return result["interpreter"], result["modules"]


def owner(module: str) -> str:
    """Who a module's cost is charged to: its distribution, or `stdlib <top-level name>`."""
    top = module.partition(".")[0]
    if top in sys.stdlib_module_names or top.startswith("_"):
        return f"stdlib `{top.lstrip('_')}`"  # _ssl with ssl, _asyncio with asyncio
    names = _distributions().get(top)
    return names[0] if names else top


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return metadata.packages_distributions()


def by_owner(own: dict[str, int]) -> list[tuple[str, int]]:
    """Own costs summed per owner, largest first."""
    totals: dict[str, int] = {}
    for module, cost in own.items():
        totals[owner(module)] = totals.get(owner(module), 0) + cost
    return sorted(totals.items(), key=lambda item: -item[1])


def floors() -> list[tuple[str, int]]:
    """(what was imported, resident bytes) for the interpreter and the stack."""
    rows = [("bare interpreter", rss_after(()))]
    alone = dict.fromkeys((*STACK, *STACK_K, "h2.connection"))
    rows += [(f"`{m}` alone", rss_after((m,))) for m in alone]
    rows += [
        ("stack without -k: " + " + ".join(f"`{m}`" for m in STACK), rss_after(STACK)),
        ("stack as the exporter loads it with -k: the above + `h2`", rss_after(STACK_H2)),
        ("issue 15's stack with -k: " + " + ".join(f"`{m}`" for m in STACK_K), rss_after(STACK_K)),
        ("stack without -k + simulated node", rss_after(STACK, setup=SIM_NODE)),
        ("stack + `h2` + simulated node", rss_after(STACK_H2, setup=SIM_NODE)),
        ("issue 15's stack with -k + simulated node", rss_after(STACK_K, setup=SIM_NODE)),
    ]
    rows += [
        (f"`{DAEMON}` as started with {name}", rss_after(modules))
        for name, modules in CONFIGURATIONS.items()
    ]
    return rows


def _table(rows: list[tuple[str, int]], min_bytes: float, *, head: str) -> list[str]:
    shown = [(name, cost) for name, cost in rows if cost >= min_bytes]
    rest = sum(cost for _, cost in rows) - sum(cost for _, cost in shown)
    lines = [f"| {head} | MiB |", "|---|---:|"]
    lines += [f"| {name} | {cost / MIB:.2f} |" for name, cost in shown]
    lines.append(f"| {len(rows) - len(shown)} others | {rest / MIB:.2f} |")
    return lines


def markdown(min_mib: float, *, traced: bool = False) -> str:
    lines = [
        "# Exporter import cost",
        "",
        f"- python: {platform.python_implementation()} {platform.python_version()}",
        f"- command: `python3 -m bench.import_cost --min-mib {min_mib:g}"
        f"{' --traced' if traced else ''}`",
        f"- own costs in {'traced bytes (tracemalloc)' if traced else 'RSS'}",
        "",
        "## Floors (RSS of a fresh interpreter each)",
        "",
        "| imported | RSS MiB |",
        "|---|---:|",
    ]
    lines += [f"| {what} | {rss / MIB:.1f} |" for what, rss in floors()]
    for name, modules in CONFIGURATIONS.items():
        interpreter, own = own_costs(modules, traced=traced)
        total = interpreter + sum(own.values())
        lines += [
            "",
            f"## Own cost by owner, daemon as started with {name} "
            f"(interpreter {interpreter / MIB:.1f} MiB + imports "
            f"{(total - interpreter) / MIB:.1f} MiB = {total / MIB:.1f} MiB)",
            "",
            *_table(by_owner(own), min_mib * MIB, head="owner"),
            "",
            "gpufleet's modules:",
            "",
            *_table(
                sorted(
                    ((f"`{m}`", c) for m, c in own.items() if m.startswith("gpufleet")),
                    key=lambda item: -item[1],
                ),
                min_mib * MIB,
                head="module",
            ),
        ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.import_cost", description=__doc__)
    parser.add_argument(
        "--min-mib", type=float, default=0.1, help="list distributions costing at least this"
    )
    parser.add_argument(
        "--traced",
        action="store_true",
        help="charge own costs in tracemalloc's traced bytes instead of RSS",
    )
    options = parser.parse_args(argv)
    print(markdown(options.min_mib, traced=options.traced))
    return 0


if __name__ == "__main__":
    exit_with(main)
