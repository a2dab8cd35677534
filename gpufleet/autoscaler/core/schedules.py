"""Scheduled windows: cron-started floors on replicas and node headroom.

`spec.schedules` lists windows such as business hours: each starts at every time its
5-field cron `schedule` fires (in its `timeZone`) and lasts `duration`. While one is open
the workload runs at least its `minReplicas` and holds at least `headroomReplicas` of
node capacity; before it opens, within the workload's lead time (node provisioning plus
a cold start), headroom for the window's `minReplicas` is held already, so the nodes are
there when the window begins. Floors merge with the forecast by `max`: a window never
lowers what the policy asks.

Cron as in Kubernetes CronJobs (robfig/cron's standard parser): minute, hour, day of
month, month, day of week (0-7, 7 and 0 Sunday, names like `mon`, `jan`); `*`, lists,
ranges and `/step`; day of month and day of week both restricted match either. Pure:
`now` is an argument; zone data comes from the stdlib's zoneinfo.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_NAMES = {
    "month": ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
    "dow": ["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
}
_BOUNDS = {"minute": (0, 59), "hour": (0, 23), "dom": (1, 31), "month": (1, 12), "dow": (0, 7)}
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MAX_DIGITS = 9  # more in a cron field or duration is out of range, not a number to parse
MAX_DURATION_SECONDS = 366 * 86400  # a window longer than a year is a typo
_DURATION = re.compile(r"^(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")
MAX_LOOKBACK_DAYS = 400  # a schedule that fires less often than yearly never opens


class ScheduleError(ValueError):
    """A schedule, duration or time zone that cannot be read; the message says why."""


@dataclass(frozen=True, slots=True)
class Cron:
    """The times a 5-field cron expression fires, as sets per field."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 Sunday .. 6 Saturday
    either_day: bool  # both day fields restricted: a day matching either fires

    def fires_on(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        in_month, in_week = day.day in self.days, (day.isoweekday() % 7) in self.weekdays
        return (in_month or in_week) if self.either_day else (in_month and in_week)


def parse_cron(text: str) -> Cron:
    """A cron expression -> Cron; raises ScheduleError naming the bad field."""
    fields = _MACROS.get(text.strip(), text).split()
    if len(fields) != 5:
        raise ScheduleError(f"{text!r}: want 5 fields (minute hour day month weekday)")
    names = ("minute", "hour", "dom", "month", "dow")
    sets = {name: _field(name, value) for name, value in zip(names, fields, strict=True)}
    return Cron(
        minutes=sets["minute"],
        hours=sets["hour"],
        days=sets["dom"],
        months=sets["month"],
        weekdays=frozenset(d % 7 for d in sets["dow"]),
        either_day=not fields[2].startswith("*") and not fields[4].startswith("*"),
    )


def _field(name: str, text: str) -> frozenset[int]:
    lo, hi = _BOUNDS[name]
    out: set[int] = set()
    for part in text.lower().split(","):
        span, _, step_text = part.partition("/")
        if span == "*":
            first, last = lo, hi
        elif "-" in span:
            a, _, b = span.partition("-")
            first, last = _value(name, a), _value(name, b)
        else:
            first = _value(name, span)
            last = hi if step_text else first
        step = _value(name, step_text, bounded=False) if step_text else 1
        if first > last or step < 1:
            raise ScheduleError(f"{name} {part!r}: empty range")
        out.update(range(first, last + 1, step))
    return frozenset(out)


def _value(name: str, text: str, *, bounded: bool = True) -> int:
    names = _NAMES.get(name, [])
    if text in names:
        return names.index(text) + (1 if name == "month" else 0)
    if not (text.isascii() and text.isdigit()):  # int() reads other scripts' digits too
        raise ScheduleError(f"{name} {text!r}: not a number")
    if len(text) > _MAX_DIGITS:  # int() refuses thousands of digits with a ValueError
        raise ScheduleError(f"{name} {text[:_MAX_DIGITS]}...: out of range")
    value = int(text)
    lo, hi = _BOUNDS[name]
    if bounded and not lo <= value <= hi:
        raise ScheduleError(f"{name} {value}: out of range {lo}-{hi}")
    return value


def parse_duration(text: str) -> float:
    """ "8h", "90m", "1h30m", "45s" -> seconds (more than 0); raises ScheduleError."""
    match = _DURATION.match(text.strip())
    if not text.strip() or match is None:
        raise ScheduleError(f"{text!r}: want a duration like 8h, 90m or 1h30m")
    if any(len(g or "") > _MAX_DIGITS for g in match.groups()):
        raise ScheduleError(f"{text[:40]!r}: too long a duration")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise ScheduleError(f"{text!r}: must be longer than 0s")
    if total > MAX_DURATION_SECONDS:  # 999999999h put its start before year 1: OverflowError
        raise ScheduleError(f"{text!r}: at most {MAX_DURATION_SECONDS // 3600}h (366 days)")
    return float(total)


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    # OSError: a folder of the tz database ("Europe"), or a name too long for a path
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(f"{name[:80]!r}: unknown time zone") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """One `spec.schedules` item, checked."""

    name: str
    cron: Cron
    duration_seconds: float
    time_zone: ZoneInfo
    min_replicas: int = 0
    headroom_replicas: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Floor:
    """What the windows ask for at one moment; `why` names them (empty: none apply)."""

    replicas: int = 0  # open windows' minReplicas
    headroom: int = 0  # open windows' headroomReplicas
    upcoming: int = 0  # minReplicas of windows opening within the lead time
    why: str = ""

    def merge(self, *, desired: int, headroom: int, maximum: int) -> tuple[int, int]:
        """The forecast's (desired, headroom) raised to the floors, never lowered: the
        replicas to at least the open windows' (within maxReplicas); the headroom to their
        headroomReplicas, and to what an upcoming window needs beyond those replicas."""
        raised = max(desired, min(self.replicas, maximum))
        return raised, max(headroom, self.headroom, self.upcoming - raised)


def floor_at(windows: Sequence[Window], now: float, *, lead_seconds: float) -> Floor:
    """The floors at unix time `now`: open windows' minReplicas and headroomReplicas, and
    the minReplicas of windows opening within `lead_seconds` (held as headroom, so the
    capacity is ready when they open)."""
    replicas = headroom = upcoming = 0
    why = []
    for w in windows:
        if _last_start(w, now, w.duration_seconds) is not None:
            replicas = max(replicas, w.min_replicas)
            headroom = max(headroom, w.headroom_replicas)
            why.append(f"schedule {w.name} open")
        elif lead_seconds > 0 and _next_start(w, now, lead_seconds) is not None:
            upcoming = max(upcoming, w.min_replicas)
            why.append(f"schedule {w.name} opens within {lead_seconds:g}s")
    return Floor(replicas=replicas, headroom=headroom, upcoming=upcoming, why=", ".join(why))


def _last_start(w: Window, now: float, within_seconds: float) -> datetime | None:
    """The latest fire time in (now - within, now], or None."""
    at = datetime.fromtimestamp(now, tz=UTC).astimezone(w.time_zone)
    earliest = at - timedelta(seconds=within_seconds)
    day = at.date()
    for _ in range(MAX_LOOKBACK_DAYS):
        if day < earliest.date():
            return None
        if w.cron.fires_on(day):
            for hour in sorted(w.cron.hours, reverse=True):
                for minute in sorted(w.cron.minutes, reverse=True):
                    fire = datetime(day.year, day.month, day.day, hour, minute, tzinfo=w.time_zone)
                    if fire <= at:
                        return fire if fire > earliest else None
        day -= timedelta(days=1)
    return None


def _next_start(w: Window, now: float, within_seconds: float) -> datetime | None:
    """The earliest fire time in (now, now + within], or None."""
    at = datetime.fromtimestamp(now, tz=UTC).astimezone(w.time_zone)
    latest = at + timedelta(seconds=within_seconds)
    day = at.date()
    while day <= latest.date():
        if w.cron.fires_on(day):
            for hour in sorted(w.cron.hours):
                for minute in sorted(w.cron.minutes):
                    fire = datetime(day.year, day.month, day.day, hour, minute, tzinfo=w.time_zone)
                    if fire > at:
                        return fire if fire <= latest else None
        day += timedelta(days=1)
    return None
