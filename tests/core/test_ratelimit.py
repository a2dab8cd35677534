"""The shared token bucket: x/time/rate `Allow` semantics on an injected clock."""

import pytest
from helpers.clock import ManualClock

from gpufleet.core.ratelimit import TokenBucket


# Each step: seconds to advance the clock, then whether take() grants.
@pytest.mark.parametrize(
    ("rate_per_second", "burst", "steps"),
    [
        (1.0, 2, [(0, True), (0, True), (0, False)]),
        (1.0, 2, [(0, True), (0, True), (0, False), (1, True), (0, False)]),
        (100.0, 10, [(0, True)] * 10 + [(0, False), (0.015, True), (0, False)]),
        (1.0, 2, [(0, True), (0, True), (60, True), (0, True), (0, False)]),
        (0.1, 1, [(0, True), (5, False), (5, True)]),
        (1.0, 0, [(0, False), (100, False)]),
        (0.0, 2, [(0, True), (0, True), (1e9, False)]),
        (1.0, 1, [(0, True), (-50, False), (1, True)]),
    ],
    ids=[
        "starts full with burst tokens",
        "refills one token per 1/rate seconds",
        "kubelet default 100 qps burst 10, half tokens carry over",
        "idle time refills at most burst",
        "exporter-toolkit interval 10s burst 1",
        "burst 0 refuses everything",
        "rate 0 grants the burst once",
        "clock stepping back refills nothing and takes nothing",
    ],
)
def test_take(rate_per_second, burst, steps):
    clock = ManualClock()
    bucket = TokenBucket(rate_per_second=rate_per_second, burst=burst, clock=clock)
    granted = []
    for advance_seconds, _ in steps:
        clock.now += advance_seconds
        granted.append(bucket.take())
    assert granted == [expected for _, expected in steps]


@pytest.mark.parametrize(
    ("rate_per_second", "burst", "message"),
    [(-1.0, 1, "rate_per_second must be >= 0"), (1.0, -1, "burst must be >= 0")],
    ids=["negative rate", "negative burst"],
)
def test_rejects_negative_parameters(rate_per_second, burst, message):
    with pytest.raises(ValueError, match=message):
        TokenBucket(rate_per_second=rate_per_second, burst=burst, clock=ManualClock())
