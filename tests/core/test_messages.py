"""Did-you-mean hints and bounded reprs shared by every parser's error messages."""

import pytest

from gpufleet.core.messages import MAX_SHOWN_CHARS, did_you_mean, shown


@pytest.mark.parametrize(
    ("word", "choices", "expected"),
    [
        ("--colectors", ("--collectors", "--address"), " (did you mean '--collectors'?)"),
        ("exportr", ("exporter", "plugin"), " (did you mean 'exporter'?)"),
        ("zzz", ("exporter", "plugin"), ""),
        ("x", (), ""),
    ],
    ids=["flag typo", "command typo", "nothing close", "no choices"],
)
def test_did_you_mean(word, choices, expected):
    assert did_you_mean(word, choices) == expected


def _alias_bomb(depth: int) -> list:
    """What YAML aliases build from a few hundred bytes: 9**depth leaves, shared."""
    level: list = ["lol"] * 9
    for _ in range(depth):
        level = [level] * 9
    return level


@pytest.mark.parametrize(
    "value",
    [
        "x" * 10_000_000,
        _alias_bomb(8),
        {f"k{i}": "v" * 1000 for i in range(1000)},
        list(range(10**6)),
        10**4000,
    ],
    ids=[
        "long string",
        "alias bomb (issue 15: 358 MB message)",
        "wide mapping",
        "long list",
        "huge int",
    ],
)
def test_shown_is_bounded(value):
    assert len(shown(value)) <= MAX_SHOWN_CHARS


def test_shown_is_repr_when_small():
    assert shown("a\0b") == repr("a\0b")
    assert shown({"burst": [1, 2]}) == "{'burst': [1, 2]}"
