"""The autoscaler's first read of a large cluster: its pods (or Kueue's Workloads, a custom
resource) as one answer, in pages, or as a streaming list.

A reflector's first list of pods is the largest answer a daemon reads. Where the API
server streams lists (its WatchList gate on, as from 1.34), one watch sends each object as
an event; where it does not (1.33's default), its watch cache answers resourceVersion "0"
as one answer; a resource without the cache comes in pages of 500, each read and reduced
before the next is asked for. The autoscaler asks the same in every case; the server
decides. This starts the autoscaler's `Cluster` in a fresh process for each run and times
its first `view()` against the lab's fake API server with N pods of a real pod's size
(`controller_world`) served each way, the order turned about each round. Per run: the
reader's peak RSS above its RSS before the view, and the CPU and wall seconds the view
took (wall includes the fake server's work: it scans its whole store for each page, where
etcd reads only the page). `--kueue-workloads N` adds a NodePool and N Workloads of about
2.5 KB (`controller_world`), read through the custom-objects API.

    python3 -m bench.list_bench [--pods 20000] [--kueue-workloads 0] [--rounds 3]
        [--json out.json]
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from kubernetes import client

from bench.entry import exit_with
from bench.procstat import memory_bytes
from gpufleet.autoscaler.kube.cluster import Cluster

MODES = {
    "whole": ["--no-watch-list"],
    "pages": ["--no-watch-list", "--no-watch-cache"],
    "stream": [],
}


def child(url: str) -> None:
    """One first view, measured in this process: a JSON line on stdout."""
    config = client.Configuration()
    config.host = url
    cluster = Cluster(client.ApiClient(config), watch=True)
    before = memory_bytes(os.getpid())["VmRSS"]
    cpu, wall = time.process_time(), time.perf_counter()
    view = cluster.view()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    peak = memory_bytes(os.getpid())["VmHWM"]
    cluster.close()
    print(json.dumps({"pods": len(view.pods), "kueue": len(view.kueue_workloads),
                      "peak_mib": (peak - before) / 2**20,
                      "cpu_s": cpu, "wall_s": wall}))  # fmt: skip


def run(mode: str, pods: int, kueue: int) -> dict:
    world_args = ["0", str(pods), "--kueue-workloads", str(kueue), *MODES[mode]]
    world = subprocess.Popen(
        [sys.executable, "-m", "bench.controller_world", *world_args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = json.loads(world.stdout.readline())["kube"]
        out = subprocess.run(
            [sys.executable, "-m", "bench.list_bench", "--child", url],
            capture_output=True, text=True, check=True, timeout=600,
        ).stdout  # fmt: skip
        result = json.loads(out.strip().splitlines()[-1])
    finally:
        world.stdin.close()
        world.wait(30)
    if (result["pods"], result["kueue"]) != (pods, kueue):
        raise SystemExit(f"{mode}: the view had {result['pods']} pods and {result['kueue']}"
                         f" Workloads, not {pods} and {kueue}")  # fmt: skip
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python3 -m bench.list_bench", description=__doc__)
    parser.add_argument("--pods", type=int, default=20000, help="pods in the cluster")
    parser.add_argument("--kueue-workloads", type=int, default=0, metavar="N",
                        help="Kueue Workloads in the cluster (and one NodePool)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="runs of each mode")
    parser.add_argument("--json", metavar="FILE", help="write the runs here too")
    parser.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    if args.pods < 0 or args.kueue_workloads < 0 or args.rounds < 1:
        parser.error("--pods and --kueue-workloads must be at least 0, --rounds at least 1")
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for r in range(args.rounds):
        for mode in MODES if r % 2 == 0 else reversed(MODES):
            runs[mode].append(run(mode, args.pods, args.kueue_workloads))
            print(mode, runs[mode][-1], flush=True)
    print(f"\n{args.pods} pods, {args.kueue_workloads} Workloads, {args.rounds} rounds"
          " (medians; max self RSS of this parent"
          f" {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB)")  # fmt: skip
    print("| answer | peak RSS above start (MiB) | CPU s | wall s |")
    print("|---|---|---|---|")
    for mode, results in runs.items():
        med = {k: statistics.median(x[k] for x in results) for k in ("peak_mib", "cpu_s", "wall_s")}
        print(f"| {mode} | {med['peak_mib']:.0f} | {med['cpu_s']:.2f} | {med['wall_s']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"pods": args.pods, "kueue_workloads": args.kueue_workloads, "runs": runs},
                      f, indent=1)  # fmt: skip


if __name__ == "__main__":
    exit_with(main)
