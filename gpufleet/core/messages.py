"""Pieces of the one-line error messages users read: did-you-mean hints and bounded reprs.

Every parser that names a bad key, flag, command or value uses these, so hints read the same
everywhere and no input (an alias-expanded YAML value, a megabyte header) can make a message
larger than a line. Pure.
"""

import reprlib
from collections.abc import Iterable

MAX_SHOWN_CHARS = 120

_REPR = reprlib.Repr()
_REPR.maxlevel = 2
_REPR.maxstring = MAX_SHOWN_CHARS
_REPR.maxother = MAX_SHOWN_CHARS
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = _REPR.maxfrozenset = 4


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the closest choice, or "" when none is close."""
    import difflib  # only on a bad input: a running daemon need not hold it (issue 15)

    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def shown(value: object) -> str:
    """`repr(value)`, cut to about MAX_SHOWN_CHARS characters whatever its size or depth."""
    return cut(_REPR.repr(value), MAX_SHOWN_CHARS)


def cut(text: str, limit: int) -> str:
    """`text`, or its first `limit` - 3 characters and "..." where it is longer."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
