"""Scheduled windows: CronJob-style cron, durations and zones, and the floors they set
merged with the forecast."""

import contextlib
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.autoscaler.core.schedules import (
    Floor,
    ScheduleError,
    Window,
    floor_at,
    parse_cron,
    parse_duration,
    zone,
)

BERLIN = ZoneInfo("Europe/Berlin")


def at(text: str, tz: ZoneInfo = BERLIN) -> float:
    """Unix seconds of a wall-clock time in `tz`."""
    return datetime.fromisoformat(text).replace(tzinfo=tz).timestamp()


def window(schedule: str, duration: str = "9h", **kw) -> Window:
    return Window(
        name=kw.pop("name", "office"),
        cron=parse_cron(schedule),
        duration_seconds=parse_duration(duration),
        time_zone=kw.pop("time_zone", BERLIN),
        **kw,
    )


@pytest.mark.parametrize(
    ("expr", "field", "want"),
    [
        pytest.param("*/15 * * * *", "minutes", {0, 15, 30, 45}, id="step"),
        pytest.param("0 9-17/4 * * *", "hours", {9, 13, 17}, id="range-step"),
        pytest.param("0 8 * * mon-fri", "weekdays", {1, 2, 3, 4, 5}, id="day-names"),
        pytest.param("0 8 * * 0,7", "weekdays", {0}, id="sunday-is-0-and-7"),
        pytest.param("0 0 1 jan,jul *", "months", {1, 7}, id="month-names"),
        pytest.param("5/20 * * * *", "minutes", {5, 25, 45}, id="start-step"),
        pytest.param("@hourly", "minutes", {0}, id="macro"),
    ],
)
def test_parse_cron(expr: str, field: str, want: set[int]) -> None:
    assert getattr(parse_cron(expr), field) == frozenset(want)


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        pytest.param("0 9 * *", "5 fields", id="four-fields"),
        pytest.param("60 * * * *", "out of range 0-59", id="minute-60"),
        pytest.param("0 24 * * *", "out of range 0-23", id="hour-24"),
        pytest.param("0 9 * * fri-mon", "empty range", id="backwards-range"),
        pytest.param("*/0 * * * *", "empty range", id="zero-step"),
        pytest.param("0 9 * * funday", "not a number", id="bad-name"),
    ],
)
def test_a_bad_cron_says_why(expr: str, why: str) -> None:
    with pytest.raises(ScheduleError, match=why):
        parse_cron(expr)


# Long digit runs too: int() refuses over 4,300 digits with its own ValueError.
_DIGITS = st.integers(1, 6000).map(lambda n: "9" * n)


@given(
    st.text(max_size=40)
    | st.text(alphabet="0123456789*/-, monfrijaul@²", max_size=40)
    | st.tuples(st.sampled_from(["", "*/", "1-"]), _DIGITS).map(lambda p: f"{p[0]}{p[1]} * * * *")
)
def test_parse_cron_fails_only_with_schedule_error(text: str) -> None:
    with contextlib.suppress(ScheduleError):
        parse_cron(text)


@given(st.text(max_size=40) | _DIGITS.map(lambda d: f"{d}h") | _DIGITS.map(lambda d: f"1h{d}s"))
def test_parse_duration_fails_only_with_schedule_error(text: str) -> None:
    with contextlib.suppress(ScheduleError):
        parse_duration(text)


@given(st.text(max_size=300) | st.sampled_from(["Europe", "America", "", ".", "/", "a" * 300]))
def test_zone_fails_only_with_schedule_error(name: str) -> None:
    """A folder of the tz database, or a name too long for a path, is an unknown zone."""
    with contextlib.suppress(ScheduleError):
        zone(name)


@pytest.mark.parametrize(
    ("text", "seconds"), [("8h", 28800), ("90m", 5400), ("1h30m", 5400), ("45s", 45)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0s", "8", "1d", "-1h", "h"])
def test_a_bad_duration_says_why(text: str) -> None:
    with pytest.raises(ScheduleError):
        parse_duration(text)


def test_an_unknown_zone_says_why() -> None:
    with pytest.raises(ScheduleError, match="unknown time zone"):
        zone("Mars/Olympus")


OFFICE = window("0 8 * * mon-fri", "10h", min_replicas=4, headroom_replicas=1)
LEAD = 240.0  # node provisioning plus a cold start


@pytest.mark.parametrize(
    ("now", "want"),
    [
        pytest.param(at("2026-11-24T12:00"), Floor(replicas=4, headroom=1), id="tuesday-noon-open"),
        pytest.param(
            at("2026-11-24T08:00"), Floor(replicas=4, headroom=1), id="opens-on-the-minute"
        ),
        pytest.param(at("2026-11-24T18:00"), Floor(), id="closed-at-the-end"),
        pytest.param(at("2026-11-24T07:57"), Floor(upcoming=4), id="within-the-lead-before"),
        pytest.param(at("2026-11-24T07:55"), Floor(), id="before-the-lead"),
        pytest.param(at("2026-11-28T12:00"), Floor(), id="saturday-closed"),
        pytest.param(
            at("2026-11-24T11:00", ZoneInfo("UTC")),
            Floor(replicas=4, headroom=1),
            id="utc-now-berlin-window",
        ),
        pytest.param(
            at("2026-11-24T17:30", ZoneInfo("UTC")), Floor(), id="utc-1730-is-berlin-1830"
        ),
    ],
)
def test_floor_at(now: float, want: Floor) -> None:
    got = floor_at([OFFICE], now, lead_seconds=LEAD)
    assert (got.replicas, got.headroom, got.upcoming) == (
        want.replicas,
        want.headroom,
        want.upcoming,
    )


def test_the_floor_names_the_windows() -> None:
    assert (
        floor_at([OFFICE], at("2026-11-24T12:00"), lead_seconds=LEAD).why == "schedule office open"
    )


def test_a_window_crossing_midnight_is_open_after_it() -> None:
    night = window("0 22 * * *", "8h", name="batch", min_replicas=2)
    assert floor_at([night], at("2026-11-25T03:00"), lead_seconds=0).replicas == 2


def test_overlapping_windows_take_the_highest_floor() -> None:
    peak = window("0 11 * * *", "2h", name="peak", min_replicas=8)
    assert floor_at([OFFICE, peak], at("2026-11-24T12:00"), lead_seconds=0).replicas == 8


@pytest.mark.parametrize(
    ("floor", "forecast", "want"),
    [
        pytest.param(Floor(replicas=4, headroom=1), (2, 0), (4, 1), id="floors-raise"),
        pytest.param(Floor(replicas=4, headroom=1), (6, 3), (6, 3), id="never-lowers"),
        pytest.param(Floor(replicas=20), (2, 0), (10, 0), id="within-max-replicas"),
        pytest.param(Floor(upcoming=4), (1, 0), (1, 3), id="upcoming-needs-capacity-beyond"),
        pytest.param(Floor(upcoming=4), (5, 0), (5, 0), id="upcoming-already-covered"),
    ],
)
def test_merge_with_the_forecast(floor: Floor, forecast: tuple[int, int], want: tuple) -> None:
    desired, headroom = forecast
    assert floor.merge(desired=desired, headroom=headroom, maximum=10) == want
