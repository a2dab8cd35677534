"""The plugin's pure core: NVIDIA's config file (model, parser, derived options), the
devices each resource advertises, allocation, preferred allocation, health policy and CDI
specs.

Rule: pure. No I/O, no clock, no logging, no NVML or gRPC (import-linter enforces it).
"""
