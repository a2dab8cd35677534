"""How far this machine's clock leads Prometheus', from one reading."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.autoscaler.core.clock_lead import MIN_LEAD_SECONDS, clock_lead


@pytest.mark.parametrize(
    ("sent", "received", "server", "lead"),
    [
        pytest.param(100.0, 100.002, 100.001, 0.0, id="clocks-agree"),
        pytest.param(100.0, 100.002, 40.001, 60.0, id="a-minute-ahead"),
        pytest.param(100.0, 100.002, 160.001, -60.0, id="a-minute-behind"),
        pytest.param(100.0, 100.002, 99.4, 0.0, id="within-a-second"),
        # 1.5 s ahead by the midpoint, but the answer took 2 s: it may be 0.5 or 2.5
        pytest.param(100.0, 102.0, 99.5, 0.0, id="within-half-the-round-trip"),
        pytest.param(100.0, 102.0, 96.0, 5.0, id="beyond-half-the-round-trip"),
    ],
)
def test_a_lead_is_taken_beyond_a_second_and_half_the_round_trip(
    sent: float, received: float, server: float, lead: float
) -> None:
    assert clock_lead(sent, received, server) == pytest.approx(lead, abs=1e-6)


_SECONDS = st.floats(-1e4, 1e4, allow_nan=False)


@given(
    true_lead=_SECONDS,
    sent=st.floats(1e9, 2e9),
    round_trip=st.floats(0, 10),
    answered_at=st.floats(0, 1),
)
def test_a_lead_taken_is_within_half_the_round_trip_of_the_true_one(
    true_lead: float, sent: float, round_trip: float, answered_at: float
) -> None:
    """Prometheus read its clock at some moment between the ask and the answer."""
    received = sent + round_trip
    server = sent + answered_at * round_trip - true_lead
    lead = clock_lead(sent, received, server)
    if lead:
        assert abs(lead - true_lead) <= round_trip / 2 + 1e-6
        assert abs(lead) > MIN_LEAD_SECONDS
    else:
        assert abs(true_lead) <= MIN_LEAD_SECONDS + round_trip + 1e-6


@given(
    true_lead=st.floats(0.5, 1.5),
    trips=st.lists(st.tuples(st.floats(0, 0.2), st.floats(0, 1)), min_size=2, max_size=30),
)
def test_a_lead_near_a_second_read_with_a_jittery_round_trip_does_not_come_and_go(
    true_lead: float, trips: list[tuple[float, float]]
) -> None:
    """Each reading taken as it came switched a lead of 1.3 s on and off: the loop's time
    went back and forth by a second. Once taken, a lead moves only on a reading that
    disagrees with it by more than its uncertainty and half a second."""
    sent, last, changes = 1.7e9, 0.0, 0
    for round_trip, answered_at in trips:
        server = sent + answered_at * round_trip - true_lead
        lead = clock_lead(sent, sent + round_trip, server, last=last)
        changes += lead != last
        last, sent = lead, sent + 5
    assert changes <= 1
    assert abs(last - true_lead) <= 0.6 or last == 0.0


@pytest.mark.parametrize(
    ("server", "last", "lead"),
    [
        pytest.param(40.0, 60.2, 60.2, id="agrees-keeps"),
        pytest.param(40.0, 58.0, 60.0, id="moved-takes-the-new"),
        pytest.param(100.0, 60.0, 0.0, id="agrees-again"),
        pytest.param(98.9, 1.3, 1.3, id="near-a-second-kept"),
    ],
)
def test_a_lead_is_kept_while_readings_agree_with_it(
    server: float, last: float, lead: float
) -> None:
    assert clock_lead(100.0, 100.002, server, last=last) == pytest.approx(lead, abs=1e-2)
