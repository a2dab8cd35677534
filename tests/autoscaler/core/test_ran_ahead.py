"""copied_steps: which earlier ticks asked for steps still to come on Prometheus' clock."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.autoscaler.core.ran_ahead import copied_steps

STEP = 5.0


def ticks(*leads: float, every: float = 15.0) -> list[tuple[float, float]]:
    """A tick every `every` seconds from Prometheus' time 1000 (monotonic 0), each on a
    clock `lead` ahead of it: (monotonic time, the newest step it asked for)."""
    return [
        (i * every, math.floor((1000 + i * every + lead) / STEP) * STEP)
        for i, lead in enumerate(leads)
    ]


@pytest.mark.parametrize(
    ("leads", "copied"),
    [
        pytest.param((), [], id="no-tick-yet"),
        pytest.param((0.0, 0.0, 0.0), [], id="on-time"),
        pytest.param((-60.0, -60.0), [], id="behind-asks-nothing-to-come"),
        pytest.param(
            (0.0, 60.0, 60.0),
            [(1, 1015.0, 1075.0), (2, 1030.0, 1090.0)],
            id="a-minute-ahead-from-the-second",
        ),
        pytest.param((60.0, 0.0, 12.0), [(0, 1000.0, 1060.0), (2, 1030.0, 1040.0)], id="each"),
        pytest.param((4.9, 4.9, 4.9), [], id="within-a-step"),
        pytest.param((1.5, 0.0, 1.5), [], id="a-lead-near-a-second-came-and-went"),
    ],
)
def test_the_steps_each_tick_asked_ahead(leads, copied) -> None:
    """Judged at monotonic 45, Prometheus' time 1045."""
    assert copied_steps(ticks(*leads), 45.0, 1045.0, step=STEP) == copied


@given(
    st.lists(st.floats(-120, 120), max_size=12),
    st.integers(1, 60),  # whole seconds: the times compared are exact
)
def test_every_step_asked_before_its_time_is_among_the_copies(leads, every) -> None:
    """A step more than a step past the time its tick ran lies in that tick's copies, and
    no step at or before that time does: what is taken back is the copies, and only them
    give or take a step."""
    past = ticks(*leads, every=every)
    monotonic = len(leads) * every
    copied = {
        i: (came, asked)
        for i, came, asked in copied_steps(past, monotonic, 1000 + monotonic, step=STEP)
    }
    for i, (at, end) in enumerate(past):
        ran = 1000 + at
        if end > ran + STEP:
            came, asked = copied[i]
            assert asked == end and ran - STEP < came <= ran
        else:
            assert i not in copied
