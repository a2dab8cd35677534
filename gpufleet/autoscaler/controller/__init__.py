"""The live controller: gather → decide → act against a real cluster, every tick.

`loop` runs the tick; `prom_gather` reads Prometheus into each workload's history; the
policies in `core` decide on it; `headroom` and `status_writer` act, and the loop writes
the scale; `steps` runs each workload's steps so that a slow one holds up no other, and
both it and the gather wait for their work as `deadline` says. Rule: only the leader
writes, and a failure on one workload (a query, an API call) holds or reports that
workload and never stops another.
"""

from gpufleet.autoscaler.controller.loop import Controller, ControllerConfig
from gpufleet.autoscaler.controller.stats import Stats

__all__ = ["Controller", "ControllerConfig", "Stats"]
