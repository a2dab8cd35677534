"""The trace-driven cluster simulator behind `gpufleet simulate`.

Deterministic and seeded: the same trace, config and seed give the same result, byte for
byte. It replays arrivals through a model of replicas (batch slots, prefill, decode), cold
starts and node provisioning, and ticks the real policy objects at their real intervals on
observations delayed the way a real metrics pipeline delays them. The engine, model and
oracle are pure (no clock, no I/O); `trace` reads files and `report` writes them.
"""
