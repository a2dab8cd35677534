"""The exporter: a drop-in for NVIDIA's dcgm-exporter, built on NVML.

Pipeline: gather (`nvml`: readers, GPM, processes, XIDs; `pods`: pod-resources, procfs) ->
decide (`core`: attribution, series, render) -> serve (`http`: server, store; TLS and basic
auth from `gpufleet.http.webconfig`).
`collector` runs that loop; `daemon` and `settings` wire it. Rule: wiring > adapters >
core, enforced by import-linter; the scrape path only serves the bytes the last collection
rendered.
"""
