"""gpufleet's Grafana dashboards as Python: one module per dashboard, built with the helpers
in `grafana`. scripts/gen_dashboards.py writes them to dashboards/."""
