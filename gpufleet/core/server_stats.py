"""The HTTP server's counters, shared by every daemon that serves one (`gpufleet.http`):
the server writes them, each daemon's self-metrics read them."""


class ServerStats:
    """Counters for the daemon's self-metrics; only the HTTP server's event loop writes them.

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
