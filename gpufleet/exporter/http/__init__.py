"""The exporter's HTTP edge: its routes on the daemons' shared server (`gpufleet.http`, with
the exporter-toolkit web config: TLS, basic auth) and the store of rendered expositions.

Rule: a request only serves bytes the last collection rendered; it never calls NVML or the
kubelet.
"""
