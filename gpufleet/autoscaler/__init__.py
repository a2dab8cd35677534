"""The autoscaler: telemetry and queue signals in, replica counts and node capacity out.

Pure core (no I/O, no clock, no logging; time arrives as `Observation.now`):
`observation`, `workload`, `policy`, `hpa` (+ `hpa_calc`, `hpa_metrics`,
`hpa_behavior`), `keda`, `predictive`, `capacity`, `forecast`,
`planner`. The trace-driven simulator in `sim/` calls exactly these policies, at their real
intervals, with the metric delays of a real pipeline; the live controller will too.
"""
