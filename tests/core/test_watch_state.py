"""The watch store: a list, then events, give what a fresh list of the end state gives."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.core.watch_state import Skipped, WatchExpired, WatchFailed, WatchState


def obj(ns: str, name: str, value: Any = 0, version: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": version}
    if ns:
        meta["namespace"] = ns
    return {"metadata": meta, "value": value}


def value_of(o: dict[str, Any]) -> tuple[str, int]:
    if not isinstance(o["value"], int):
        raise TypeError("value is no int")
    return o["metadata"]["name"], o["value"]


def test_a_list_then_events() -> None:
    state = WatchState(value_of)
    assert state.replace([obj("b", "x", 1), obj("a", "y", 2)], "10") == []
    assert state.version == "10"
    assert state.values() == (("y", 2), ("x", 1))  # by namespace, then name, as a list is
    state.apply({"type": "MODIFIED", "object": obj("b", "x", 5, "11")})
    state.apply({"type": "ADDED", "object": obj("a", "z", 3, "12")})
    state.apply({"type": "DELETED", "object": obj("a", "y", 2, "13")})
    assert state.values() == (("z", 3), ("x", 5))
    assert state.version == "13"
    state.apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}})
    assert state.version == "20" and len(state) == 2
    assert state.mapping() == {("a", "z"): ("z", 3), ("b", "x"): ("x", 5)}


def test_a_pod_made_again_under_its_name_is_the_new_one() -> None:
    state = WatchState(value_of)
    state.replace([obj("a", "p", 1)], "1")
    state.apply({"type": "DELETED", "object": obj("a", "p", 1, "2")})
    state.apply({"type": "ADDED", "object": obj("a", "p", 2, "3")})
    assert state.values() == (("p", 2),)


def test_an_object_that_does_not_reduce_is_left_out_and_said() -> None:
    state = WatchState(value_of)
    skipped = state.replace([obj("a", "p", "bad"), obj("a", "q", 1), {"metadata": {}}], "1")
    assert [s.key for s in skipped] == [("a", "p"), ("", "")]
    assert skipped[0].reason == "TypeError: value is no int"
    assert state.values() == (("q", 1),)
    # an object that stops reducing goes: what it was is no longer so
    assert state.apply({"type": "MODIFIED", "object": obj("a", "q", "bad")}) == Skipped(
        ("a", "q"), "TypeError: value is no int"
    )
    assert state.values() == ()


@pytest.mark.parametrize(
    ("event", "raised", "says"),
    [
        ({"type": "ERROR", "object": {"code": 410, "message": "too old"}}, WatchExpired, "410"),
        ({"type": "ERROR", "object": {"code": 500, "message": "boom"}}, WatchFailed, "500: boom"),
        ({"type": "SOMETHING", "object": {}}, WatchFailed, "'SOMETHING'"),
        ({"type": "ADDED"}, WatchFailed, "without an object"),
        ([], WatchFailed, "without an object"),
        ({"type": "DELETED", "object": {"metadata": {}}}, WatchFailed, "metadata.name"),
    ],
)
def test_events_that_end_the_watch(event: Any, raised: type[Exception], says: str) -> None:
    state = WatchState(value_of)
    state.replace([obj("a", "p", 1)], "1")
    with pytest.raises(raised, match=says):
        state.apply(event)
    assert state.values() == (("p", 1),)  # left as it was, to be listed again


names = st.tuples(st.sampled_from(["", "a", "b"]), st.sampled_from(["p", "q", "r", "s"]))
changes = st.lists(st.tuples(st.sampled_from(["put", "delete"]), names, st.integers(0, 9)))


@given(st.dictionaries(names, st.integers(0, 9)), changes)
def test_events_after_a_list_equal_a_list_of_the_end_state(
    start: dict[tuple[str, str], int], steps: list[tuple[str, tuple[str, str], int]]
) -> None:
    state = WatchState(value_of)
    state.replace([obj(ns, n, v) for (ns, n), v in start.items()], "1")
    end = dict(start)
    for version, (change, key, value) in enumerate(steps, start=2):
        if change == "delete" and key in end:
            state.apply({"type": "DELETED", "object": obj(*key, end.pop(key), str(version))})
        elif change == "put":
            kind = "MODIFIED" if key in end else "ADDED"
            end[key] = value
            state.apply({"type": kind, "object": obj(*key, value, str(version))})
    fresh = WatchState(value_of)
    fresh.replace([obj(ns, n, v) for (ns, n), v in end.items()], "")
    assert state.values() == fresh.values()
