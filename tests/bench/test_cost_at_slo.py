"""Issue 17 section 4's verdicts, from numbers alone: which families are judged, the
oracle's validity, and each bound missed named."""

import pytest

from bench.cost_at_slo import PREDICTABLE, markdown, over_bound, verdict
from bench.heldout_bench import FAMILIES


def test_every_family_of_the_bench_is_classified_with_a_reason() -> None:
    assert set(PREDICTABLE) == set(FAMILIES)
    assert all(why for _, why in PREDICTABLE.values())


@pytest.mark.parametrize(
    ("family", "predictable"),
    [
        ("diurnal", True),  # rises over 15 minutes, slower than the 4-minute lead time
        ("quiet", True),
        ("longctx", True),  # constant rate: its tail is prompt sizes, not arrivals
        ("flash-short", False),  # a 180-s crowd, shorter than the 240-s lead time
        ("flash-long", False),  # its onset is a step no history announces
        ("onoff", False),  # 60-s bursts
        ("mix", False),  # carries a 180-s crowd
    ],
)
def test_predictable_families(family: str, predictable: bool) -> None:
    assert PREDICTABLE[family][0] is predictable


@pytest.mark.parametrize(
    ("family", "feasible", "after", "gpu_hours", "valid", "said"),
    [
        ("diurnal", 0.995, 0.996, 11.5, True, "met"),
        ("diurnal", 0.99, 0.99, 11.5, True, "met"),  # the bounds are inclusive
        ("diurnal", 0.995, 0.996, 12.0, True, "missed: cost 1.200x > 1.15x"),
        ("quiet", 0.9841, 0.985, 9.0, True, "missed: attainment 98.41% < 99%"),
        # Met by the requests after the lead time: the warm start's first minutes missed.
        ("quiet", 0.9858, 0.9995, 9.0, True, "missed: attainment 98.58% < 99% (the warm start's)"),
        ("quiet", 0.98, 0.98, 13.3, True, "missed: attainment 98.00% < 99%, cost 1.330x > 1.15x"),
        ("longctx", 0.90, 0.95, 30.0, False, "not judged: the oracle is not valid"),
        ("flash-short", 0.999, 0.999, 10.0, True, "not judged: not predictable"),
    ],
)
def test_verdict(family, feasible, after, gpu_hours, valid, said) -> None:
    assert (
        verdict(
            family,
            feasible_attainment=feasible,
            after_lead_time=after,
            gpu_hours=gpu_hours,
            oracle_gpu_hours=10.0,
            oracle_valid=valid,
        )
        == said
    )


def _result(family: str, scale: int, *, valid: bool) -> dict:
    default = {"knob": "target_attainment=0.99", "tuning": [0.99, 5.0]}
    default |= {"heldout": [0.995, 12.0], "heldout_feasible": 0.996}
    default |= {"heldout_feasible_after_lead_time": 0.998}
    return {
        "family": family,
        "scale": scale,
        "rows": [{"policy": "hpa"}, {"policy": "gpufleet", "default": default}],
        "oracle": {
            "heldout": [0.99, 10.0],
            "judged": [0.995, 0.992 if valid else 0.98],
            "valid": valid,
        },
    }


def test_markdown_rows_and_reasons() -> None:
    text = markdown([_result("diurnal", 10, valid=True), _result("longctx", 4, valid=False)])
    assert (
        "| diurnal | 10 | yes | 99.50%, 99.20% / 10.00 | 99.60% (99.80%) / 12.00 | 1.20x "
        "| missed: cost 1.200x > 1.15x |"
    ) in text
    assert (
        "| longctx | 4 | yes | 99.50%, 98.00% (not valid) / 10.00 | 99.60% (99.80%) / 12.00 "
        "| not meaningful | not judged: the oracle is not valid |"
    ) in text
    assert f"- diurnal: yes, {PREDICTABLE['diurnal'][1]}." in text
    assert text.count("- longctx: yes") == 1


@pytest.mark.parametrize(
    ("family", "gpu_hours", "valid", "ratio"),
    [
        ("quiet", 11.5, True, None),  # inclusive, as for the default
        ("quiet", 12.0, True, 1.2),
        ("longctx", 30.0, False, None),  # the oracle is not valid: nothing to hold it to
        ("flash-short", 30.0, True, None),  # not predictable: the target does not judge it
    ],
)
def test_the_bound_on_any_setting(family, gpu_hours, valid, ratio) -> None:
    got = over_bound(family, gpu_hours=gpu_hours, oracle_gpu_hours=10.0, oracle_valid=valid)
    assert got == (None if ratio is None else pytest.approx(ratio))
