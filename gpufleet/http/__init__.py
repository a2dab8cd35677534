"""The HTTP(S) edge the daemons share: a small HTTP/1.1 server on asyncio streams with the
exporter-toolkit web config (TLS, basic auth, headers, rate limit), dcgm-exporter's read
and write timeouts, and bounded logging of what clients send; each daemon adds its own
routes. It imports no HTTP framework: aiohttp stays with the clients and API servers that
need one (the autoscaler's Prometheus client and external metrics API, the lab).

Rule: daemon-neutral. It never imports a daemon (exporter, plugin, autoscaler); the web
config's YAML, bcrypt and TLS modules load only when a daemon is given a web config.
"""
