"""NVML access: the one place the NVML backend is chosen, the simulated NVML, and what both
daemons' NVML adapters share (`values`: text, handle addresses, error kinds;
`mig_profiles`: NVIDIA's MIG profile names).

`backend.open_nvml` returns either the real `pynvml` module or a `sim.SimulatedNvml` that
looks like it (same function names, signatures, ctypes structs and `NVMLError` classes), so
the exporter's NVML adapter runs unchanged on both. Nothing outside `backend` may pick a
backend; nothing here may call the real NVML library on behalf of the simulator.
"""
