"""The exporter's HTTP edge: the aiohttp server, the store of rendered expositions, and the
exporter-toolkit web config (TLS, basic auth).

Rule: a request only serves bytes the last collection rendered; it never calls NVML or the
kubelet.
"""
