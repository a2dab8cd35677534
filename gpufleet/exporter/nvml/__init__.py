"""The exporter's NVML adapter: discovery, per-field readers, GPM, per-process data and the
XID watcher, read into the core's plain samples.

Rule: failures are per GPU, per instance or per field, counted by kind; a hung call is a
timeout, never a stuck collection. Imports only the core and shared adapters.
"""
