"""`gpufleet simulate`: replays request traces through the autoscaling policies.

Deterministic and seeded: the same trace, config and seed give the same result, byte for
byte. `core` replays arrivals through a model of replicas (batch slots, prefill, decode),
cold starts and node provisioning, ticks the real policy objects, and builds results and
the report text; it is pure. The edges: `trace_file` reads CSVs, `plots` draws PNGs,
`settings` reads flags, `main` runs it and writes files. Rule: main > settings, plots >
trace_file > core.
"""
