"""The exporter: a drop-in for NVIDIA's dcgm-exporter, built on NVML.

Pipeline: gather (`nvml`, `podresources`, `procfs`, `xid` adapters) -> decide (pure:
`attribution`, `series`, `render`) -> serve (`server`). Pure modules (`fields`, `counters`,
`snapshot`, `attribution`, `series`, `render`) do no I/O, read no clock and never log;
an import-linter contract in pyproject.toml enforces it. The scrape path only serves the
bytes the last collection rendered.
"""
