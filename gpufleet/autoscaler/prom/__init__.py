"""The autoscaler's Prometheus adapter: range queries over the HTTP API, asynchronous, each
with its own timeout, answers parsed into plain samples.

Rule: a failed, slow or malformed answer is a `PromError` with a kind the controller counts
and turns into a MissingMetrics hold; it never raises anything else and never guesses a value.
"""
