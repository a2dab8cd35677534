"""The simulated NVML: a fleet of GPUs behind pynvml's own API, for laptops, CI and the lab.

`SimulatedNvml` implements pynvml's functions with pynvml's signatures, returns pynvml's own
ctypes structs and raises pynvml's own `NVMLError` subclasses, so real adapter code runs
against it unchanged. Values come from a seeded, deterministic load model driven by an
injected clock; scenario controls (processes, XIDs, lost GPUs, NotSupported and hangs) are
plain methods beside the API. It must never load or call the real NVML library.

Layout: `models` (GPU model tables), `fleet` (spec parsing, identities; pure), `workload`
(load model math; pure), `procfs` (cgroup files), `handles` (opaque ctypes handles),
`machine` (mutable state, faults), `api.SimulatedNvml` built from the call mixins
`devicecalls`, `counters`, `migcalls`, `gpm` and `events`.
"""
