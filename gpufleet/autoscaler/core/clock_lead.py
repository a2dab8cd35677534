"""How far this machine's clock leads Prometheus', from one reading of Prometheus' time.

Sample times are Prometheus'. A controller clock ahead of it asked for steps still to come:
their `irate` signals were missing for good (those times counted as fetched), and past the
policies' 20 s the newest sample looked stale, so every count held. A clock behind it saw
each sample that much late. A reading bounds Prometheus' time between the ask and the
answer: the lead is known to within half the round trip, and only what lies beyond that
and beyond a second is taken, so clocks NTP keeps leave every time as it was. A lead the
reading agrees with, give or take half a second, is kept as it was: a lead near a second
read with a jittery round trip would otherwise come and go, moving the loop's time back
and forth by a second from tick to tick. Pure.
"""

MIN_LEAD_SECONDS = 1.0
KEEP_WITHIN_SECONDS = 0.5


def clock_lead(sent: float, received: float, server: float, *, last: float = 0.0) -> float:
    """The lead (negative: how far it trails) of the clock that read `sent` when it asked
    and `received` when Prometheus answered `server` as its time: `last` where the reading
    agrees with it within its uncertainty and half a second, else 0 within the reading's
    uncertainty or a second."""
    lead, half_trip = (sent + received) / 2 - server, (received - sent) / 2
    if abs(lead - last) <= half_trip + KEEP_WITHIN_SECONDS:
        return last
    if abs(lead) - half_trip <= MIN_LEAD_SECONDS:
        return 0.0
    return lead
