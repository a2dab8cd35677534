"""The real NVML adapter both daemons share, and the one place an NVML backend is chosen.

`backend` returns either the real `pynvml` module or the lab's simulated NVML that looks
like it (same functions, ctypes structs and `NVMLError` classes), so every adapter runs
unchanged on both; it is the only product module that may import `gpufleet.lab`.
`discovery` is the one discovery of GPUs and MIG devices (with NVIDIA's profile names) that
both daemons build their own views on; `values` decodes what pynvml hands back and names
failures.

Rule: adapters call NVML only through an injected `lib`, never branch on which backend
they got, and never call `nvmlInit`/`nvmlShutdown` (the daemon owns NVML's lifetime).
"""
