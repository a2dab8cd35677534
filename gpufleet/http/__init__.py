"""The HTTP(S) edge the daemons share: an aiohttp server with the exporter-toolkit web
config (TLS, basic auth, headers, rate limit), dcgm-exporter's read and write timeouts,
and bounded logging of what clients send; each daemon adds its own routes.

Rule: daemon-neutral. It never imports a daemon (exporter, plugin, autoscaler); the web
config's YAML, bcrypt and TLS modules load only when a daemon is given a web config.
"""
