"""The binding term: the largest named candidate, ties to the most ordinary term (issue 17)."""

import pytest

from gpufleet.autoscaler.core.binding import Term, binding


@pytest.mark.parametrize(
    ("candidates", "want"),
    [
        pytest.param({Term.FORECAST: 3, Term.USUAL_PEAK: 5}, (Term.USUAL_PEAK, 5), id="largest"),
        pytest.param({Term.SURGE: 4, Term.FORECAST: 4}, (Term.FORECAST, 4), id="tie-forecast"),
        pytest.param(
            {Term.FORECAST: 2, Term.SLO_FEEDBACK: 6, Term.SURGE: 6},
            (Term.SURGE, 6),
            id="tie-in-listed-order",
        ),
        pytest.param({Term.SLO_FEEDBACK: 7, Term.FORECAST: 2}, (Term.SLO_FEEDBACK, 7), id="slo"),
    ],
)
def test_the_largest_candidate_binds(candidates: dict[Term, int], want: tuple[Term, int]) -> None:
    assert binding(candidates) == want


def test_no_candidates_is_a_bug() -> None:
    with pytest.raises(ValueError, match="no candidate"):
        binding({})
