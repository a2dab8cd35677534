"""Self-metric families from a hand-built `SelfStats`: exact names, types, labels, values."""

from dataclasses import replace

import pytest

from gpufleet.exporter.core.fields import MetricType
from gpufleet.exporter.core.selfmetrics import SelfStats, self_families

G, C = MetricType.GAUGE, MetricType.COUNTER

STATS = SelfStats(
    version="1.2.3",
    collections_total=7,
    collection_duration_seconds=0.25,
    collection_cpu_seconds_total=1.5,
    last_success_timestamp_seconds=1.7e9,
    series=123,
    entities_selected=11,
    errors_total={"timeout": 2, "gpu_lost": 1},
    kubelet_errors_total={"socket_missing": 3},
    kubelet_last_success_timestamp_seconds=1.6e9,
    kube_api_errors_total={"unavailable": 6},
    attribution={"unknown_device_ids": 4},
    requests_total={("/metrics", 200): 10, ("/health", 503): 1, ("/metrics", 401): 2},
    request_seconds_total={"/metrics": 0.5, "/health": 0.01},
    write_timeouts_total=5,
    bad_requests_total=6,
    accept_errors_total=8,
    resident_memory_bytes=64 << 20,
    process_cpu_seconds_total=9.0,
)

# (family name, type, ((labels, value), ...)) in exposition order.
EXPECTED = [
    ("gpufleet_exporter_build_info", G, (((("version", "1.2.3"),), 1),)),
    ("gpufleet_exporter_collections_total", C, (((), 7),)),
    ("gpufleet_exporter_collection_duration_seconds", G, (((), 0.25),)),
    ("gpufleet_exporter_collection_cpu_seconds_total", C, (((), 1.5),)),
    ("gpufleet_exporter_last_success_timestamp_seconds", G, (((), 1.7e9),)),
    ("gpufleet_exporter_series", G, (((), 123),)),
    ("gpufleet_exporter_entities", G, (((), 11),)),
    (
        "gpufleet_exporter_errors_total",
        C,
        (((("kind", "gpu_lost"),), 1), ((("kind", "timeout"),), 2)),
    ),
    ("gpufleet_exporter_kubelet_errors_total", C, (((("kind", "socket_missing"),), 3),)),
    ("gpufleet_exporter_kube_api_errors_total", C, (((("kind", "unavailable"),), 6),)),
    ("gpufleet_exporter_attribution_dropped", G, (((("reason", "unknown_device_ids"),), 4),)),
    (
        "gpufleet_exporter_http_requests_total",
        C,
        (
            ((("route", "/health"), ("code", "503")), 1),
            ((("route", "/metrics"), ("code", "200")), 10),
            ((("route", "/metrics"), ("code", "401")), 2),
        ),
    ),
    (
        "gpufleet_exporter_http_request_seconds_total",
        C,
        (((("route", "/health"),), 0.01), ((("route", "/metrics"),), 0.5)),
    ),
    ("gpufleet_exporter_http_write_timeouts_total", C, (((), 5),)),
    ("gpufleet_exporter_http_bad_requests_total", C, (((), 6),)),
    ("gpufleet_exporter_http_accept_errors_total", C, (((), 8),)),
    ("gpufleet_exporter_kubelet_last_success_timestamp_seconds", G, (((), 1.6e9),)),
    ("gpufleet_exporter_resident_memory_bytes", G, (((), 64 << 20),)),
    ("gpufleet_exporter_process_cpu_seconds_total", C, (((), 9.0),)),
]


def shape(stats: SelfStats) -> list:
    return [
        (f.name, f.type, tuple((s.labels, s.value) for s in f.samples))
        for f in self_families(stats)
    ]


def test_every_family_in_order_with_exact_labels_and_values() -> None:
    assert shape(STATS) == EXPECTED


def test_every_family_has_help() -> None:
    assert all(f.help for f in self_families(STATS))


@pytest.mark.parametrize(
    ("change", "missing"),
    [
        (
            {"kubelet_last_success_timestamp_seconds": None},
            "kubelet_last_success_timestamp_seconds",
        ),
        ({"resident_memory_bytes": None}, "resident_memory_bytes"),
        ({"process_cpu_seconds_total": None}, "process_cpu_seconds_total"),
        ({"errors_total": {}}, "errors_total"),
        ({"kubelet_errors_total": {}}, "kubelet_errors_total"),
        ({"attribution": {}}, "attribution_dropped"),
        ({"requests_total": {}}, "http_requests_total"),
        ({"request_seconds_total": {}}, "http_request_seconds_total"),
        ({"entities_selected": None}, "entities"),
    ],
    ids=[
        "no-kubelet-success-yet",
        "no-proc-rss",
        "no-process-cpu",
        "no-errors",
        "no-kubelet-errors",
        "nothing-dropped",
        "no-requests",
        "no-request-seconds",
        "no-discovery-yet",
    ],
)
def test_unknown_or_empty_values_leave_their_family_out(change: dict, missing: str) -> None:
    got = [name for name, _, _ in shape(replace(STATS, **change))]
    assert got == [name for name, _, _ in EXPECTED if name != "gpufleet_exporter_" + missing]


def test_zero_counters_are_still_reported() -> None:
    zero = replace(
        STATS,
        collections_total=0,
        write_timeouts_total=0,
        entities_selected=0,
        bad_requests_total=0,
        accept_errors_total=0,
    )
    values = {name: samples for name, _, samples in shape(zero)}
    for name in ("entities", "http_bad_requests_total", "http_accept_errors_total"):
        assert values["gpufleet_exporter_" + name] == (((), 0),)
    assert values["gpufleet_exporter_collections_total"] == (((), 0),)
    assert values["gpufleet_exporter_http_write_timeouts_total"] == (((), 0),)
