"""Which term of a policy bound its decision: named candidate replica counts, and the winner.

Issue 17: every decision names the term that set it, so an operator reading an event knows
whether the forecast, the usual peak, a standing reserve, the prompt tail, a surge, SLO
feedback, a floor or the workload's behavior put the count where it is. A sizing term
reports itself by adding one entry to the candidates; `binding` picks the largest, ties
going to the term listed first in `Term` (the most ordinary explanation wins a tie). Pure:
no I/O, no clock.
"""

from collections.abc import Mapping
from enum import StrEnum


class Term(StrEnum):
    """A term a decision can be bound by; the value is how messages name it."""

    # Sizing terms, in tie order.
    FORECAST = "forecast"  # the arrival rate forecast over the lead time, plus the backlog
    USUAL_PEAK = "usual peak"  # standing capacity for the bursts of the peak memory
    RESERVE = "reserve"  # standing capacity for bursts not yet seen, over the base rate
    PROMPT_TAIL = "prompt tail"  # a scale-down's floor for the waits behind long prefills
    SURGE = "surge"  # the newest sample alone, or a surge's hold (panic included)
    SLO_FEEDBACK = "SLO feedback"  # observed TTFT / queue wait correcting the capacity
    # Limits on the sizing.
    FLOOR = "floor"  # min replicas (or max replicas), a schedule's floor
    BEHAVIOR = "behavior"  # a rate policy, the scale-down window or the step delay
    ZERO = "scale to zero"  # activation from or deactivation to zero on (no) activity
    MISSING = "missing signals"  # held: never scale down on missing data


_ORDER = {term: i for i, term in enumerate(Term)}


def binding(candidates: Mapping[Term, int]) -> tuple[Term, int]:
    """The largest candidate and its term; ties go to the term listed first in `Term`.

    Raises ValueError on no candidates: a policy always has at least its forecast.
    """
    if not candidates:
        raise ValueError("no candidate replica counts")
    term = min(candidates, key=lambda t: (-candidates[t], _ORDER[t]))
    return term, candidates[term]
