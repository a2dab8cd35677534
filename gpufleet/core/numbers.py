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
