"""The HTTP server's counters, shared by every daemon that serves one (`gpufleet.http`):
the server writes them, each daemon's self-metrics read them, with the one HELP text each."""

# HELP text of each counter's `<prefix>http_*` family, by ServerStats attribute: the
# exporter renders its own families, the other daemons through prometheus_client.
HELP = {
    "requests_total": "HTTP requests served, by route and status code.",
    "request_seconds_total": "Time spent serving HTTP requests, by route.",
    "write_timeouts_total": (
        "Responses abandoned because the client did not read them within the write timeout."
    ),
    "bad_requests_total": (
        "Requests refused before any route (4xx, 501 or 505) because their request line, "
        "headers or framing did not parse or are not supported; logged as rate-limited "
        "one-line warnings."
    ),
    "accept_errors_total": (
        "Connections that could not be accepted for want of file descriptors or memory "
        "(retried after 1 s); logged as rate-limited one-line warnings."
    ),
}


class ServerStats:
    """Counters for the daemon's self-metrics; the HTTP server's event loop writes them (and
    the autoscaler's signal-servers loop `accept_errors_total`: a lost increment at worst).

    `requests_total` is keyed by (route, status), the route being the matched path or
    "other" (unknown paths must not grow the key set); `request_seconds_total` by route.
    `bad_requests_total` counts requests that did not parse (they never reach a route);
    `accept_errors_total` connections that could not be accepted (no file descriptor).
    """

    __slots__ = (
        "accept_errors_total",
        "bad_requests_total",
        "request_seconds_total",
        "requests_total",
        "write_timeouts_total",
    )

    def __init__(self) -> None:
        self.requests_total: dict[tuple[str, int], int] = {}
        self.request_seconds_total: dict[str, float] = {}
        self.write_timeouts_total = 0
        self.bad_requests_total = 0
        self.accept_errors_total = 0
