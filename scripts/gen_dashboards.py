"""Write the Grafana dashboards in dashboards/ from scripts/gpufleet_dashboards/.

Generated, not hand-written, so every panel has the same datasource variable, ids, units and
a layout that cannot overlap; tests/dashboards/ checks the committed JSON equals this output.
Queries follow the exporter's true-sum semantics (README, "The invariant"): device fields
appear once per GPU or MIG instance, GPU_UTIL and FB_USED are split among the pods sharing a
GPU, and `gpufleet_pod_gpu_share` / `gpufleet_pod_power_usage` are per pod.

Run from the repo root: python scripts/gen_dashboards.py [--out DIR]
"""

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from gpufleet_dashboards import autoscaler, cost, fleet, node

DASHBOARDS: dict[str, Callable[[], dict]] = {
    "fleet-overview.json": fleet.fleet,
    "node-detail.json": node.node,
    "cost-chargeback.json": cost.cost,
    "autoscaler.json": autoscaler.autoscaler,
}


def render(build: Callable[[], dict]) -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parents[1] / "dashboards"
    )
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    for name, build in DASHBOARDS.items():
        (out / name).write_text(render(build))
