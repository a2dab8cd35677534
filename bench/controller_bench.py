"""What one control-loop tick costs for 1, 100 and 1,000 GPUAutoscalers.

The controller runs in this process against a world in another (`controller_world`: the
lab's fake API server and a stand-in Prometheus), so this process's CPU is the
controller's own: its loop, the official client's (de)serialisation, parsing and joining
Prometheus answers, and every policy's decision. Per tick it reports Prometheus queries,
API requests and writes, wall and CPU seconds, and the peak RSS. Targets (issue 14 §7):
queries per tick do not grow with the workloads; 1,000 workloads fit in one core at a 2 s
interval (CPU per tick < 2 s).

    python3 -m bench.controller_bench [--workloads 1,100,1000] [--ticks 5] [--json out.json]
        [--default-gc] [--lists] [--other-pods N]

The controller reads the cluster as the daemon does, from watches (`--watch`), or with
`--lists` by a list of each collection at every tick (`--watch=false`). A watch is one
request however long it runs: "API requests / tick" counts the lists and writes.
`--other-pods` adds pods no GPUAutoscaler selects, of a real pod's size, as a cluster's
other teams have: a list at each tick carries them too.

The cycle collector runs at the daemon's thresholds (`GC_THRESHOLDS`), or with
`--default-gc` at Python's; "GC s / tick" is the CPU its collections took in the measured
ticks.

Writes per tick are the status refresh: the deciding signal values are rewritten every
30 s, so a run whose ticks span that refresh shows a thousand writes spread over its ticks.
"Most in a tick" and "heaviest tick" are the largest single tick's writes and CPU seconds.
"Of it reading the cluster" is the CPU the ticks' `Cluster.view` took on its thread (with
watches, applying their events runs on threads of their own, counted in the CPU only).
"""

import argparse
import asyncio
import gc
import json
import resource
import subprocess
import sys
import time
import urllib.request

from kubernetes import client

from bench.entry import exit_with
from gpufleet.autoscaler.controller import Controller, ControllerConfig
from gpufleet.autoscaler.daemon import collect_cycles_less_often
from gpufleet.autoscaler.kube.cluster import Cluster
from gpufleet.autoscaler.prom.client import PromClient
from gpufleet.kube.events import EventRecorder

MAX_WARM_TICKS = 60


class CollectorTime:
    """CPU seconds the cycle collector's passes took, from gc's own callbacks."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._began = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.process_time()
        else:
            self.seconds += time.process_time() - self._began


def counts(prom_url: str) -> dict:
    with urllib.request.urlopen(f"{prom_url}/counts", timeout=30) as r:
        return json.load(r)


async def measure(
    n: int, ticks: int, scrape_seconds: float, *, watch: bool, other_pods: int
) -> dict:
    world = subprocess.Popen(
        [sys.executable, "-m", "bench.controller_world", str(n), str(other_pods)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        urls = json.loads(world.stdout.readline())
        config = client.Configuration()
        config.host = urls["kube"]
        api = client.ApiClient(config)
        prom = PromClient(urls["prom"], timeout_seconds=30)
        cluster = Cluster(api, watch=watch)
        view_cpu = [0.0]  # CPU of the ticks' reads of the cluster, on their own thread
        read_view = cluster.view

        def timed_view() -> object:
            began = time.thread_time()
            try:
                return read_view()
            finally:
                view_cpu[0] += time.thread_time() - began

        cluster.view = timed_view  # type: ignore[method-assign]
        ctl = Controller(
            cluster,
            prom,
            EventRecorder(api, controller="gpufleet.dev/autoscaler", instance="bench"),
            config=ControllerConfig(scrape_interval_seconds=scrape_seconds),
        )
        # Warm-up, not counted: the 30-minute history backfill and the first status writes,
        # then the ticks that catch up on the samples that came in meanwhile. A tick waits
        # at most --tick-seconds, so at 1,000 workloads the backfill answers over several
        # ticks: warm until two ticks in a row had no query or step still running at
        # their end.
        warm, quiet = 0, 0
        while quiet < 2 and warm < MAX_WARM_TICKS:
            running = ctl.stats.late_queries + ctl.stats.busy_steps
            await ctl.tick()
            await asyncio.sleep(scrape_seconds)
            warm += 1
            quiet = quiet + 1 if ctl.stats.late_queries + ctl.stats.busy_steps == running else 0
        before, q0, view0 = counts(urls["prom"]), ctl.stats.queries, view_cpu[0]
        collector = CollectorTime()
        gc.callbacks.append(collector)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        heaviest = (0.0, 0)  # (CPU s, API writes) of single ticks, each the largest
        for _ in range(ticks):
            tick_cpu, tick_writes = time.process_time(), counts(urls["prom"])["writes"]
            await ctl.tick()
            heaviest = (
                max(heaviest[0], time.process_time() - tick_cpu),
                max(heaviest[1], counts(urls["prom"])["writes"] - tick_writes),
            )
            await asyncio.sleep(scrape_seconds)  # one new sample per signal each tick
        wall = time.perf_counter() - wall0 - ticks * scrape_seconds
        cpu = time.process_time() - cpu0
        gc.callbacks.remove(collector)
        after = counts(urls["prom"])
        await prom.close()
        cluster.close()
        api.close()
        return {
            "workloads": n,
            "warm_up_ticks": warm,
            "queries_per_tick": (ctl.stats.queries - q0) / ticks,
            "api_requests_per_tick": (after["requests"] - before["requests"]) / ticks,
            "api_writes_per_tick": (after["writes"] - before["writes"]) / ticks,
            "most_api_writes_in_a_tick": heaviest[1],
            "cpu_seconds_heaviest_tick": heaviest[0],
            "gc_seconds_per_tick": collector.seconds / ticks,
            "writes_by_kind": {
                k: (v - before["by"].get(k, 0)) / ticks for k, v in after["by"].items()
            },
            "wall_seconds_per_tick": wall / ticks,
            "cpu_seconds_per_tick": cpu / ticks,
            "view_cpu_seconds_per_tick": (view_cpu[0] - view0) / ticks,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
    finally:
        world.stdin.close()
        world.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="1,100,1000")
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument(
        "--scrape-seconds",
        type=float,
        default=5.0,
        help="scrape interval and query step; a tick runs once per scrape",
    )
    parser.add_argument("--json", default="")
    parser.add_argument(
        "--default-gc", action="store_true", help="Python's collector thresholds, not the daemon's"
    )
    parser.add_argument(
        "--lists", action="store_true", help="list the cluster at every tick, not watch it"
    )
    parser.add_argument(
        "--other-pods", type=int, default=0, help="pods of other teams in the cluster"
    )
    args = parser.parse_args()
    if not args.default_gc:
        collect_cycles_less_often()
    rows = [
        asyncio.run(
            measure(
                int(n),
                args.ticks,
                args.scrape_seconds,
                watch=not args.lists,
                other_pods=args.other_pods,
            )
        )
        for n in args.workloads.split(",")
    ]
    collector = "Python's default" if args.default_gc else "the daemon's"
    reads = "lists at every tick" if args.lists else "watches"
    print(
        f"# gpufleet controller benchmark, cycle collector at {collector} thresholds, "
        f"the cluster read from {reads}, {args.other_pods:,} pods of other teams\n"
    )
    print(
        "| workloads | Prometheus queries / tick | API requests / tick | API writes / tick "
        "| most in a tick | wall s / tick | CPU s / tick | of it reading the cluster "
        "| heaviest tick | GC s / tick "
        "| peak RSS MiB | fits one core at 2 s | warm-up ticks |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for r in rows:
        fits = "yes" if r["cpu_seconds_per_tick"] < 2.0 else "**no**"
        print(
            f"| {r['workloads']:,} | {r['queries_per_tick']:.1f} | "
            f"{r['api_requests_per_tick']:.1f} | {r['api_writes_per_tick']:.1f} | "
            f"{r['most_api_writes_in_a_tick']} | {r['wall_seconds_per_tick']:.3f} | "
            f"{r['cpu_seconds_per_tick']:.3f} | {r['view_cpu_seconds_per_tick']:.3f} | "
            f"{r['cpu_seconds_heaviest_tick']:.3f} | "
            f"{r['gc_seconds_per_tick']:.3f} | {r['peak_rss_mib']:.0f} | {fits} | "
            f"{r['warm_up_ticks']} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    exit_with(main)
