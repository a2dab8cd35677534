"""ran_ahead_since: which earlier tick asked for steps still to come on Prometheus' clock."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.autoscaler.core.ran_ahead import ran_ahead_since

STEP = 5.0


def ticks(*leads: float, every: float = 15.0) -> list[tuple[float, float]]:
    """A tick every `every` seconds from Prometheus' time 1000 (monotonic 0), each on a
    clock `lead` ahead of it: (monotonic time, the newest step it asked for)."""
    return [
        (i * every, math.floor((1000 + i * every + lead) / STEP) * STEP)
        for i, lead in enumerate(leads)
    ]


@pytest.mark.parametrize(
    ("leads", "since"),
    [
        pytest.param((), None, id="no-tick-yet"),
        pytest.param((0.0, 0.0, 0.0), None, id="on-time"),
        pytest.param((-60.0, -60.0), None, id="behind-asks-nothing-to-come"),
        pytest.param((0.0, 60.0, 60.0), 1015.0, id="a-minute-ahead-from-the-second"),
        pytest.param((60.0, 0.0, 60.0), 1000.0, id="the-first-of-them"),
        pytest.param((4.9, 4.9, 4.9), None, id="within-a-step"),
        pytest.param((1.5, 0.0, 1.5), None, id="a-lead-near-a-second-came-and-went"),
    ],
)
def test_where_the_copies_begin(leads, since) -> None:
    """Judged at monotonic 45, Prometheus' time 1045."""
    assert ran_ahead_since(ticks(*leads), 45.0, 1045.0, step=STEP) == since


@given(
    st.lists(st.floats(-120, 120), max_size=12),
    st.integers(1, 60),  # whole seconds: the times compared are exact
)
def test_every_tick_more_than_a_step_ahead_is_at_or_after_the_cut(leads, every) -> None:
    """Every tick that asked for a step more than a step to come ran at or after the
    time returned, and None means none did: no copy outlives the take-back."""
    past = ticks(*leads, every=every)
    monotonic = len(leads) * every
    since = ran_ahead_since(past, monotonic, 1000 + monotonic, step=STEP)
    ahead = [1000 + at for at, end in past if end > 1000 + at + STEP]
    assert (since is None) == (not ahead)
    if ahead:
        assert since == min(ahead)
