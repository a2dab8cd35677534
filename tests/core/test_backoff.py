"""The reflector's backoff: doubling waits for failures in a row, capped; a failure after a
minute of working, or an attempt that lasted, starts the count over; and a count of any
length still gives a wait (a float overflowed at the 1,025th failure in a row)."""

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.core.backoff import HEALTHY_SECONDS, SHORT_SECONDS, Backoff


def test_failures_in_a_row_double_the_wait_up_to_the_cap() -> None:
    backoff = Backoff(0.5, 30.0)
    assert [backoff.failed(0.1) for _ in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]


def test_a_failure_after_a_minute_of_working_is_a_first_one_again() -> None:
    backoff = Backoff(0.5, 30.0)
    for _ in range(5):
        backoff.failed(0.1)
    assert backoff.failed(HEALTHY_SECONDS) == 0.5
    assert backoff.failed(HEALTHY_SECONDS - 1) == 1.0


def test_an_end_counts_only_where_it_came_at_once() -> None:
    """A watch the server ends after minutes is opened again at once; one answered 410 at
    once is a failure in a row, or a hot loop of lists."""
    backoff = Backoff(0.5, 30.0)
    assert backoff.ended(SHORT_SECONDS) == 0.0
    assert [backoff.ended(0.01) for _ in range(3)] == [0.5, 1.0, 2.0]
    assert backoff.failed(0.01) == 4.0  # the same count, whatever ended each attempt
    assert backoff.ended(300.0) == 0.0 and backoff.failures == 0


def test_reset() -> None:
    backoff = Backoff(0.5, 30.0)
    backoff.failed(0.1)
    backoff.reset()
    assert backoff.delay() == 0.0 and backoff.failed(0.1) == 0.5


@given(
    st.floats(1e-3, 60.0),
    st.floats(1e-3, 600.0),
    st.lists(st.tuples(st.booleans(), st.floats(0, 1e6)), max_size=50),
    st.integers(0, 10**6),
)
def test_any_count_gives_a_wait_within_the_cap(base, cap, attempts, failures) -> None:
    backoff = Backoff(base, cap, failures)
    for failed, lasted in attempts:
        delay = backoff.failed(lasted) if failed else backoff.ended(lasted)
        assert 0.0 <= delay <= cap
    assert 0.0 <= backoff.delay() <= cap
