"""The device plugin: a drop-in for NVIDIA's k8s-device-plugin on the kubelet's v1beta1 API.

Pipeline: discover (`nvml` adapter: GPUs, MIG devices, topology; `host_devices`: MIG
capability and IMEX channel nodes) -> decide (pure: `config`, `devices`, `allocate`,
`preferred`, `health` decisions, `cdi` specs) -> serve (`server`, `registration`,
`cdi_dirs`, `daemon`). Pure modules do no I/O, read no clock and never log; the
import-linter contract in pyproject.toml enforces it. Health and allocation never fail
because one GPU is lost.
"""
