"""The plugin's NVML adapter: device discovery and the health-event watcher.

Rule: a GPU that fails is left out or marked unhealthy alone; the others are still served.
"""
