"""Pure helpers more than one daemon uses: listen addresses, token buckets, MIG geometry,
device IDs.

Rule: pure. No I/O, no clock, no logging, no NVML, gRPC or HTTP (an import-linter contract
in pyproject.toml enforces it); time arrives as an argument.
"""
