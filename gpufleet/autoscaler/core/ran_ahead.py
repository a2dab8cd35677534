"""Which earlier ticks fetched steps that were still to come on Prometheus' clock.

A tick that ran on a clock ahead of Prometheus' (its clock not read yet, or Prometheus'
own stepped back) asked for steps still to come, and Prometheus answered them: a gauge
with the newest sample its lookback found, stamped at each future step. Those copies then
stood for samples in the history, and each query counted as fetched that far, so the real
samples of those times were never asked. Once the loop's time is known right (a tick that
read Prometheus' clock), the monotonic clock places each earlier tick on it: a tick's
copies are the steps after the time it ran, up to the newest it asked for. Pure.
"""

import math
from collections.abc import Iterable


def copied_steps(
    ticks: Iterable[tuple[float, float]], monotonic: float, now: float, *, step: float
) -> list[tuple[int, float, float]]:
    """For each of `ticks` ((its monotonic time, the newest step it asked for)) that asked
    for a step more than a `step` still to come, by Prometheus' clock `now` read at
    `monotonic`: (its index, the last step that had come when it ran, the newest it asked
    for). Its copies are the steps between. Within a step a tick holds at most one
    copied step, as a scrape that lands late does, and a lead of a second or two coming
    or going (`clock_lead`) takes back nothing."""
    out = []
    for i, (at, end) in enumerate(ticks):
        ran = now - (monotonic - at)
        if end > ran + step:
            out.append((i, math.floor(ran / step) * step, end))
    return out
