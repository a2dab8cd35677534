"""User-typed numbers: finite floats, one wording for the two ways to be wrong; bounded ASCII
integers."""

import pytest

from gpufleet.core.numbers import ascii_int, finite_float


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


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("0", 0),
        ("042", 42),
        ("999", 999),
        ("1000", None),
        ("", None),
        ("-1", None),
        ("\u00b2", None),
        ("\u0661", None),
        (" 1", None),
        ("9" * 5000, None),
    ],
)
def test_ascii_int_takes_a_bounded_run_of_ascii_digits_only(text: str, want: int | None) -> None:
    assert ascii_int(text, max_digits=3) == want
