"""Numbers typed by users: one parse, one wording, for every parser that takes them. Pure."""

import math


def finite_float(text: str) -> float:
    """`text` as a finite float; ValueError saying "is not a number" or "is not a finite
    number" (the caller names the key and the value)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError("is not a number") from None
    if not math.isfinite(value):
        raise ValueError("is not a finite number")
    return value


def ascii_int(text: str, *, max_digits: int) -> int | None:
    """`text` as a non-negative int where it is 1 to `max_digits` ASCII digits; else None.
    str.isdigit() also takes '²', which int() refuses, and int() of over 4,300 digits
    raises: an ID or a count from outside must fail neither way."""
    if text.isascii() and text.isdigit() and len(text) <= max_digits:
        return int(text)
    return None
