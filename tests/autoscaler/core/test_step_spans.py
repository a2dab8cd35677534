"""StepSpans: which step times a workload was handed, and which it lacks."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.autoscaler.core.step_spans import StepSpans


def spans(*runs: tuple[float, float], step: float = 5.0) -> StepSpans:
    s = StepSpans(step)
    for first, last in runs:
        s.add(first, last)
    return s


@pytest.mark.parametrize(
    ("runs", "gaps"),
    [
        pytest.param([], [(100.0, 200.0)], id="nothing-handed"),
        pytest.param([(100.0, 200.0)], [], id="all-handed"),
        pytest.param([(150.0, 200.0)], [(100.0, 145.0)], id="joined-late"),
        pytest.param([(100.0, 120.0), (160.0, 200.0)], [(125.0, 155.0)], id="sat-ticks-out"),
        pytest.param([(100.0, 120.0), (125.0, 200.0)], [], id="adjacent-runs-join"),
        pytest.param([(0.0, 90.0), (210.0, 300.0)], [(100.0, 200.0)], id="around-not-in"),
        pytest.param([(100.0, 100.0)], [(105.0, 200.0)], id="one-step"),
    ],
)
def test_gaps(runs, gaps) -> None:
    assert spans(*runs).gaps(100.0, 200.0) == gaps


def test_float_drift_is_the_same_step() -> None:
    """Steps summed as floats drift: 0.1 * 3 is not 0.3."""
    s = spans((0.1, 0.1 + 0.1 + 0.1), step=0.1)
    assert s.holds(0.3) and s.gaps(0.1, 0.3) == []
    [(first, last)] = s.gaps(0.1, 0.5)
    assert first == pytest.approx(0.4) and last == 0.5


def test_forget_before_drops_only_runs_that_end_before() -> None:
    s = spans((0.0, 50.0), (100.0, 200.0))
    s.forget_before(120.0)
    assert not s.holds(50.0) and s.holds(100.0)


HALF = 0.5  # a fraction: the steps are sums of floats


def handed_runs(runs: list[tuple[int, int]]) -> tuple[StepSpans, set[int]]:
    """StepSpans at a half-second step handed each (first step, length) of `runs`, and the
    steps (as multiples of the step) handed."""
    s, handed = StepSpans(HALF), set()
    for first, length in runs:
        s.add(first * HALF, (first + length) * HALF)
        handed.update(range(first, first + length + 1))
    return s, handed


@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 10)), max_size=8),
    st.integers(0, 60),
    st.integers(0, 60),
)
def test_gaps_and_what_was_handed_are_every_step_once(runs, lo, width) -> None:
    """Every step from first to last is either handed (`holds`) or in exactly one gap."""
    step = HALF
    s, handed = handed_runs(runs)
    hi = lo + width
    in_gaps = [
        k
        for a, b in s.gaps(lo * step, hi * step)
        for k in range(round(a / step), round(b / step) + 1)
    ]
    assert len(in_gaps) == len(set(in_gaps))
    assert set(in_gaps) == set(range(lo, hi + 1)) - handed
    assert all(s.holds(k * step) == (k in handed) for k in range(lo, hi + 1))
    assert s.holds_any(lo * step, hi * step) == bool(handed & set(range(lo, hi + 1)))
    assert s.covers(lo * step, hi * step) == (set(range(lo, hi + 1)) <= handed)


@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 10)), max_size=8),
    st.integers(-5, 70),
    st.integers(0, 20),
)
def test_forget_between_keeps_exactly_the_times_outside(runs, first, width) -> None:
    """Times fetched while still to come are handed again: after `forget_between`, a
    time is held if and only if it was handed and lies outside the range."""
    step = HALF
    s, handed = handed_runs(runs)
    s.forget_between(first * step, (first + width) * step)
    dropped = set(range(first, first + width + 1))
    assert all(s.holds(k * step) == (k in handed - dropped) for k in range(-5, 95))
    assert all(a <= b for a, b in s._spans)
