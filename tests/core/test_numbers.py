"""User-typed numbers: finite floats, one wording for the two ways to be wrong."""

import pytest

from gpufleet.core.numbers import finite_float


def test_finite_floats_parse() -> None:
    assert finite_float("2.5") == 2.5 and finite_float(" 3 ") == 3.0


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("tall", "is not a number"),
        ("inf", "is not a finite number"),
        ("nan", "is not a finite number"),
    ],
)
def test_anything_else_says_why(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=f"^{problem}$"):
        finite_float(text)
