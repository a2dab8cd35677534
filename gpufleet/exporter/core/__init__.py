"""The exporter's pure core: fields, counters CSVs, profiles, device selection, samples,
device placement, attribution, series, windows, rendering and self-metrics.

Rule: pure. No I/O, no clock, no logging, no NVML, gRPC or HTTP (import-linter enforces
it); adapters hand it plain samples and it returns plain series and bytes.
"""
