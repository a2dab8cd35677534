"""SignalHistory: the one window a policy sees, fed by the replay's scrapes or by Prometheus."""

import pytest

from gpufleet.autoscaler.core.history import SignalHistory
from gpufleet.autoscaler.core.observation import Buckets, PodTelemetry, Series


def filled(*, delay: float = 0.0) -> SignalHistory:
    h = SignalHistory(history_seconds=20.0, delay_seconds=delay)
    for t in (0.0, 5.0, 10.0, 15.0, 20.0, 25.0):
        h.add("queue_depth", t, t / 5)
        h.add_pods(t, (PodTelemetry(pod=f"p{int(t)}"),))
    return h


@pytest.mark.parametrize(
    ("now", "delay", "times"),
    [
        pytest.param(25.0, 0.0, (5.0, 10.0, 15.0, 20.0, 25.0), id="the-last-history-seconds"),
        pytest.param(25.0, 3.0, (5.0, 10.0, 15.0, 20.0), id="not-yet-visible-is-left-out"),
        pytest.param(60.0, 0.0, (), id="all-too-old-is-missing-not-zero"),
    ],
)
def test_the_window(now: float, delay: float, times: tuple[float, ...]) -> None:
    obs = filled(delay=delay).observe(now, ())
    assert obs.queue_depth == Series(times, tuple(t / 5 for t in times))
    assert obs.arrival_rate == Series()
    assert obs.pods == ((PodTelemetry(pod=f"p{int(times[-1])}"),) if times else ())


def test_a_sample_at_a_time_held_is_dropped() -> None:
    """Overlapping Prometheus ranges re-read samples; they must not count twice."""
    h = filled()
    h.add("queue_depth", 25.0, 99.0)
    h.add("queue_depth", 20.0, 99.0)
    assert h.observe(25.0, ()).queue_depth.values[-2:] == (4.0, 5.0)
    assert h.latest_time("queue_depth") == 25.0 and h.latest_time("in_flight") is None


def test_a_gap_behind_newer_samples_is_filled_in_time_order() -> None:
    """The live gather backfills a workload that joined a query others had fetched: those
    samples come after newer ones. They were dropped ("not newer"), and the forecast ran
    on what came after the join."""
    h = SignalHistory(history_seconds=20.0)
    for t in (15.0, 20.0, 25.0):
        h.add("queue_depth", t, t / 5)
    for t in (5.0, 10.0, 0.0):  # 0.0: older than any window from the newest sample reaches
        h.add("queue_depth", t, t / 5)
    h.add_buckets("prompt_tokens_buckets", 25.0, ((1.0, 2.0),))
    h.add_buckets("prompt_tokens_buckets", 20.0, ((1.0, 1.0),))
    obs = h.observe(25.0, ())
    assert obs.queue_depth == Series((5.0, 10.0, 15.0, 20.0, 25.0), (1.0, 2.0, 3.0, 4.0, 5.0))
    assert obs.prompt_tokens_buckets.times == (20.0, 25.0)
    assert h.latest_time("queue_depth") == 25.0


@pytest.mark.parametrize("delay", [0.0, 3.0], ids=["no-delay", "delayed"])
def test_a_history_that_runs_for_days_keeps_two_windows_and_sees_the_same(delay: float) -> None:
    # Issue 18: the live controller never forgot a sample (about 9 GB a day at 1,000
    # workloads). Every window at or after the newest sample must stay the same.
    kept = SignalHistory(history_seconds=20.0, delay_seconds=delay)
    for t in range(0, 1000, 5):
        kept.add("queue_depth", float(t), t / 5)
        kept.add_pods(float(t), (PodTelemetry(pod=f"p{t}"),))
        recent = SignalHistory(history_seconds=20.0, delay_seconds=delay)
        for old in range(max(0, t - 60), t + 5, 5):
            recent.add("queue_depth", float(old), old / 5)
            recent.add_pods(float(old), (PodTelemetry(pod=f"p{old}"),))
        for now in (float(t), t + 2.5, t + 10.0):
            assert kept.observe(now, ()) == recent.observe(now, ())
    # Forgotten: a window long before the newest sample finds nothing (memory is bounded).
    assert kept.observe(500.0, ()).queue_depth == Series()
    assert kept.observe(500.0, ()).pods == ()


def test_an_unknown_signal_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        SignalHistory(history_seconds=1.0).add("queue", 0.0, 1.0)


@pytest.mark.parametrize(("now", "delay"), [(25.0, 0.0), (25.0, 3.0), (60.0, 0.0), (2.0, 0.0)])
def test_latest_is_the_newest_value_observe_would_show(now: float, delay: float) -> None:
    h = filled(delay=delay)
    obs = h.observe(now, ())
    expected = {
        s: getattr(obs, s).latest()
        for s in ("queue_depth", "arrival_rate")
        if getattr(obs, s).latest() is not None
    }
    assert h.latest(now) == expected


@pytest.mark.parametrize(("now", "delay"), [(25.0, 0.0), (25.0, 3.0), (60.0, 0.0), (2.0, 0.0)])
def test_latest_samples_and_pods_carry_the_times_observe_would_show(
    now: float, delay: float
) -> None:
    h = filled(delay=delay)
    obs = h.observe(now, ())
    expected = {
        s: (getattr(obs, s).times[-1], getattr(obs, s).values[-1])
        for s in ("queue_depth", "arrival_rate")
        if getattr(obs, s).times
    }
    assert h.latest_samples(now) == expected
    pods = h.latest_pods(now)
    assert (pods[1] if pods else ()) == obs.pods


def test_histogram_samples_share_the_window_and_the_forgetting() -> None:
    h = SignalHistory(history_seconds=20.0, delay_seconds=3.0)
    for t in range(0, 200, 5):
        h.add_buckets("prompt_tokens_buckets", float(t), ((1000.0, t / 10), (float("inf"), t / 5)))
    h.add_buckets("prompt_tokens_buckets", 195.0, ((1000.0, 99.0),))  # held already: dropped
    obs = h.observe(198.0, ())
    assert obs.prompt_tokens_buckets == Buckets(
        (180.0, 185.0, 190.0, 195.0),
        tuple(((1000.0, t / 10), (float("inf"), t / 5)) for t in (180, 185, 190, 195)),
    )
    assert h.observe(50.0, ()).prompt_tokens_buckets == Buckets()  # forgotten, as any signal


def test_forget_between_drops_those_samples_and_takes_them_again() -> None:
    """What the live gather fetched while its times were still to come (copies of the
    newest sample) goes, from every signal, histogram and pod telemetry, and the real
    samples of those times are then taken, not dropped as held."""
    h = filled()
    h.add_buckets("prompt_tokens_buckets", 20.0, ((1.0, 1.0),))
    h.forget_between(12.0, 22.0)
    assert h.observe(25.0, ()).queue_depth.times == (5.0, 10.0, 25.0)
    assert h.observe(25.0, ()).prompt_tokens_buckets == Buckets()
    assert h.latest_pods(22.0) == (10.0, (PodTelemetry(pod="p10"),))
    h.add("queue_depth", 15.0, 9.0)
    assert h.observe(25.0, ()).queue_depth == Series((5.0, 10.0, 15.0, 25.0), (1.0, 2.0, 9.0, 5.0))
