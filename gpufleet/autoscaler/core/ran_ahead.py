"""Whether earlier ticks fetched steps that were still to come on Prometheus' clock.

A tick that ran on a clock ahead of Prometheus' (its clock not read yet, or Prometheus'
own stepped back) asked for steps still to come, and Prometheus answered them: a gauge
with the newest sample its lookback found, stamped at each future step. Those copies then
stood for samples in the history, and each query counted as fetched that far, so the real
samples of those times were never asked. Once the loop's time is right again, the monotonic
clock places each earlier tick on it; the first that fetched past its own time marks where
the copies begin. Pure.
"""

from collections.abc import Iterable


def ran_ahead_since(
    ticks: Iterable[tuple[float, float]], monotonic: float, now: float, *, step: float
) -> float | None:
    """Where the copies begin: the time, on Prometheus' clock `now` read at `monotonic`,
    at which the first of `ticks` ((its monotonic time, the newest step it asked for)) that
    asked for a step more than a `step` still to come ran; None if none did. Within a
    step, a tick holds at most one copied step, as a scrape that lands late does; and a
    lead of a second or two coming or going (`clock_lead`) takes back nothing."""
    for at, end in ticks:
        ran = now - (monotonic - at)
        if end > ran + step:
            return ran
    return None
