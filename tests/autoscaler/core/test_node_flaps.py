"""A node given back and taken back within the window holds the nodes taken back (issue 17)."""

import math

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.autoscaler.core.node_flaps import NodeFlaps, held_nodes, note

WINDOW = 300.0


def test_a_release_taken_back_within_the_window_is_a_flap() -> None:
    s = note(NodeFlaps(), now=1000.0, before=4, after=2, window=WINDOW)
    assert s.releases == ((1000.0, 4),) and s.flapped == -math.inf
    s = note(s, now=1100.0, before=2, after=3, window=WINDOW)
    assert s.flapped == 1100.0 and s.level == 3
    assert held_nodes(s, now=1100.0 + 1799.0, hold=1800.0) == 3
    assert held_nodes(s, now=1100.0 + 1800.0, hold=1800.0) == 0


def test_the_flap_holds_only_the_nodes_it_took_back() -> None:
    """Taken back past what was given up (a crowd on top): only the nodes given up are
    shown to come back. Two releases: the highest given up."""
    s = note(NodeFlaps(), now=1000.0, before=5, after=1, window=WINDOW)
    assert note(s, now=1100.0, before=1, after=13, window=WINDOW).level == 5
    assert note(s, now=1100.0, before=1, after=3, window=WINDOW).level == 3
    s = note(
        note(s, now=1010.0, before=7, after=2, window=WINDOW),
        now=1020.0,
        before=2,
        after=9,
        window=WINDOW,
    )
    assert s.level == 7


def test_a_scale_up_after_the_window_or_within_the_kept_nodes_is_none() -> None:
    released = note(NodeFlaps(), now=1000.0, before=4, after=2, window=WINDOW)
    late = note(released, now=1000.0 + WINDOW, before=2, after=3, window=WINDOW)
    assert late.flapped == -math.inf and late.releases == ()
    # Back up to the nodes kept after a second release, not past them: 4 -> 3 -> 2 -> 3.
    twice = note(
        note(NodeFlaps(), now=1000.0, before=4, after=3, window=WINDOW),
        now=1010.0,
        before=3,
        after=2,
        window=WINDOW,
    )
    assert note(twice, now=1020.0, before=2, after=3, window=WINDOW).flapped == 1020.0
    once = note(NodeFlaps(), now=1000.0, before=3, after=2, window=WINDOW)
    assert note(once, now=1010.0, before=2, after=2, window=WINDOW) is once


def test_a_crowd_released_for_good_never_holds() -> None:
    s = NodeFlaps()
    for i, (before, after) in enumerate([(2, 10), (10, 6), (6, 3), (3, 2)]):
        s = note(s, now=1000.0 + 60.0 * i, before=before, after=after, window=WINDOW)
    assert s.flapped == -math.inf
    assert held_nodes(s, now=1200.0, hold=1800.0) == 0


@given(st.lists(st.tuples(st.floats(0, 100), st.integers(0, 20), st.integers(0, 20)), max_size=40))
def test_only_a_scale_up_past_a_recent_release_flaps(steps) -> None:
    s, now = NodeFlaps(), 0.0
    for dt, before, after in steps:
        now += dt
        recent = [n for t, n in s.releases if now - t < WINDOW]
        new = note(s, now=now, before=before, after=after, window=WINDOW)
        given_up = [n for n in recent if n > before]
        flapped = after > before and bool(given_up)
        assert new.flapped == (now if flapped else s.flapped)
        assert new.level == (min(after, max(given_up)) if flapped else s.level)
        assert 0 <= held_nodes(new, now=now, hold=1800.0) <= max(before, after, s.level)
        assert all(now - t < WINDOW for t, _ in new.releases)
        s = new
