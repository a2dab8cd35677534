"""CPU per collection, stage by stage, on the issue-2 node (in one process, no server).

The end-to-end benchmark (exporter_bench.py) measures a separate exporter process, where
the client and the kubelet compete for the same cores; this one isolates the pipeline:
NVML reading (simulator included), attribution, series building and rendering, each the
best of several rounds of thread CPU time, for the encodings each configuration builds.

Run: python3 -m bench.collection_bench [--rounds 7] [--per-round 20]
"""

import argparse
import platform
import time
from collections.abc import Callable

from bench.entry import exit_with
from gpufleet.exporter.core import attribution
from gpufleet.exporter.core.render import render
from gpufleet.exporter.core.samples import NodeSample
from gpufleet.exporter.core.series import build_families
from gpufleet.exporter.daemon import build, prepare
from gpufleet.lab.node import NodeLayout, SimNode


def best_ms(fn: Callable[[], object], *, rounds: int, per_round: int) -> float:
    """Best (least disturbed) mean thread CPU of `fn`, in ms."""
    results = []
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(per_round):
            fn()
        results.append((time.thread_time() - start) / per_round * 1000)
    return min(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--per-round", type=int, default=20)
    args = parser.parse_args()
    timing = {"rounds": args.rounds, "per_round": args.per_round}

    with SimNode(NodeLayout()) as node:
        node.sim.nvmlInit()
        prepared = prepare(node.exporter_settings(address="127.0.0.1:0", collect_interval_ms=1000))
        parts = build(prepared, node.sim)
        collector, reader, kubelet = parts.collector, parts.collector._reader, parts.kubelet
        assert kubelet is not None
        view = kubelet.refresh_now()
        for _ in range(3):  # GPM and NVLink rates need two samples
            collector.collect_once()
        config = collector._config
        index = attribution.build_index(
            view.containers,
            view.checkpoint,
            reader.entities,
            extra_resource_names=config.extra_resource_names,
        )
        samples, _ = reader.collect(time.monotonic())
        pid_pods = collector._pid_pods.resolve({p.pid for s in samples for p in s.processes or ()})
        pods = attribution.attribute(index, samples, pid_pods).pods
        node_sample = NodeSample(entities=samples, node_labels=reader.node_labels, xid={})
        families = build_families(
            node_sample, selection=config.selection, pods=pods, options=config.options
        )
        rows = [
            ("NVML read (simulator included)", lambda: reader.collect(time.monotonic())),
            ("pid -> pod (cached)", lambda: collector._pid_pods.resolve(set(pid_pods))),
            ("attribution join", lambda: attribution.attribute(index, samples, pid_pods)),
            (
                "series",
                lambda: build_families(
                    node_sample, selection=config.selection, pods=pods, options=config.options
                ),
            ),
            (
                "render, text gzipped, no OpenMetrics (default)",
                lambda: render(families, collected_at=0, collected_monotonic=0, openmetrics=False),
            ),
            (
                "render, OpenMetrics gzip only (--openmetrics, Prometheus only)",
                lambda: render(families, collected_at=0, collected_monotonic=0, text_gzip=False),
            ),
            (
                "render, both gzipped (--openmetrics)",
                lambda: render(families, collected_at=0, collected_monotonic=0, text_gzip=True),
            ),
            ("whole collect_once (Prometheus demand: gzip text)", collector.collect_once),
        ]
        collector._store.want_text_gzip(time.monotonic())  # as a Prometheus scrape does
        print(
            f"# collection CPU by stage ({platform.python_implementation()} "
            f"{platform.python_version()}, {sum(len(f.samples) for f in families)} series, "
            f"best of {args.rounds} rounds x {args.per_round})\n"
        )
        print("| stage | CPU ms |\n|---|---:|")
        for name, fn in rows:
            print(f"| {name} | {best_ms(fn, **timing):.2f} |")
        collector.close()


if __name__ == "__main__":
    exit_with(main)
