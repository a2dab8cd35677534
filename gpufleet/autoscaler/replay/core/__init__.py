"""The replay's pure core: the world model, engine, cluster, metrics pipeline, oracle,
statistics, sweep and report text.

Rule: pure. No I/O, no clock, no logging (import-linter enforces it).
"""
