"""The shared HTTP server's counters (`ServerStats`) as prometheus_client families, for the
daemons that serve their own metrics through prometheus_client (the autoscaler, the plugin)."""

from collections.abc import Iterator

from prometheus_client import generate_latest
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, Metric

from gpufleet.core.server_stats import HELP, ServerStats
from gpufleet.http.server import Response
from gpufleet.http.wire import TEXT_CONTENT_TYPE


def exposition(registry: CollectorRegistry) -> Response:
    """The registry's metrics in Prometheus' text format 0.0.4."""
    return Response(200, generate_latest(registry), {"Content-Type": TEXT_CONTENT_TYPE})


def http_families(prefix: str, server: ServerStats) -> Iterator[Metric]:
    """A server's counters as `<prefix>http_*` families, named as the exporter's
    `gpufleet_exporter_http_*` (which renders its own, without prometheus_client)."""
    requests = CounterMetricFamily(
        f"{prefix}http_requests", HELP["requests_total"], labels=["route", "code"]
    )
    for (route, code), value in sorted(server.requests_total.items()):
        requests.add_metric([route, str(code)], value)
    yield requests
    seconds = CounterMetricFamily(
        f"{prefix}http_request_seconds", HELP["request_seconds_total"], labels=["route"]
    )
    for route, value in sorted(server.request_seconds_total.items()):
        seconds.add_metric([route], value)
    yield seconds
    yield CounterMetricFamily(
        f"{prefix}http_write_timeouts",
        HELP["write_timeouts_total"],
        value=server.write_timeouts_total,
    )
    yield CounterMetricFamily(
        f"{prefix}http_bad_requests", HELP["bad_requests_total"], value=server.bad_requests_total
    )
    yield CounterMetricFamily(
        f"{prefix}http_accept_errors",
        HELP["accept_errors_total"],
        value=server.accept_errors_total,
    )
