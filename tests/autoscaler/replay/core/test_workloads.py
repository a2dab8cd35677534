"""Workload families: parsing specs into one clear error, and seeded traces whose shape is
what each family promises (rates, crowds, silences, long-prompt tails)."""

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.autoscaler.replay.core.workloads import (
    FAMILIES,
    WorkloadError,
    generate,
    parse_workload,
)


def _trace(spec: str, seed: int = 1):
    return generate(parse_workload(spec), seed=seed)


def _per_second(trace, duration: int) -> np.ndarray:
    return np.bincount(trace.arrival_seconds.astype(int), minlength=duration)[:duration]


def test_defaults_fill_every_key() -> None:
    workload = parse_workload("flash:height=20")
    assert workload.family == "flash"
    assert workload.params["height"] == 20 and workload.params["length"] == 180
    assert workload.params["rate"] == 2 and workload.params["duration"] == 3600


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("flsh", "unknown family 'flsh' (did you mean 'flash'?)"),
        ("flash:hieght=3", "unknown key 'hieght' for flash (did you mean 'height'?)"),
        ("flash:height", "'height' is not key=value"),
        ("flash:height=tall", "height='tall' is not a number"),
        ("flash:height=inf", "height='inf' is not a finite number"),
        ("flash:rate=-1", "rate=-1 must be > 0"),
        ("diurnal:duration=0", "duration=0 must be > 0"),
        ("longctx:tail=2", "tail is a fraction (0-1)"),
        ("mix:of=diurnal+flsh", "unknown family 'flsh' in of=diurnal+flsh (did you mean"),
        ("mix", "a mix needs of=FAMILY+FAMILY"),
        ("mix:of=diurnal,onoff.height=3", "'onoff.height' names no family of the mix"),
        # int64 overflow: "token counts must be >= 0" from deep in the generator
        ("flash:max_prompt=1e30", "max_prompt=1e+30 is over 10,000,000"),
        ("onoff:on=1e-9", "on=1e-09 must be >= 1 s"),  # billions of sojourns: a hang
    ],
)
def test_a_bad_spec_is_one_error_naming_the_key(spec: str, message: str) -> None:
    with pytest.raises(WorkloadError) as raised:
        parse_workload(spec)
    assert str(raised.value).startswith(f"workload {spec!r}: ")
    assert message in str(raised.value)


@pytest.mark.parametrize(
    "spec", ["flash:rate=1e9", "flash:rate=1e20", "mix:of=flash+onoff,flash.rate=1e300"]
)
def test_a_trace_too_large_to_replay_is_one_error(spec: str) -> None:
    """numpy's 'lam value too large' or a 38 TiB allocation, as tracebacks."""
    with pytest.raises(WorkloadError, match=r"requests, more than 100,000,000: lower its rate"):
        _trace(spec, 0)


@given(st.text(max_size=60))
@settings(max_examples=300, deadline=None)
def test_any_spec_parses_or_is_a_workload_error(spec: str) -> None:
    with contextlib.suppress(WorkloadError):
        parse_workload(spec)


@pytest.mark.parametrize("family", [*FAMILIES, "mix:of=diurnal+flash"])
def test_the_same_seed_gives_the_same_trace(family: str) -> None:
    spec = f"{family}:duration=600" if ":" not in family else f"{family},duration=600"
    a, b, c = _trace(spec, 3), _trace(spec, 3), _trace(spec, 4)
    assert np.array_equal(a.arrival_seconds, b.arrival_seconds)
    assert np.array_equal(a.prompt_tokens, b.prompt_tokens)
    assert not np.array_equal(a.prompt_tokens[:50], c.prompt_tokens[:50])
    assert (
        a.name
        == f"{spec.replace(':', '-').replace('=', '-').replace(',', '-').replace('+', '-')}-s3"
    )


def test_a_flash_crowd_is_its_height_for_its_length_where_placed() -> None:
    trace = _trace("flash:rate=5,height=10,length=300,at=1000,ramp=1,duration=2000")
    per_second = _per_second(trace, 2000)
    assert per_second[1001:1300].mean() == pytest.approx(50, rel=0.05)
    assert per_second[:1000].mean() == pytest.approx(5, rel=0.05)
    assert per_second[1301:].mean() == pytest.approx(5, rel=0.05)


def test_quiet_periods_have_no_requests_at_all() -> None:
    trace = _trace("quiet:rate=3,busy=100,idle=400,duration=2000")
    per_second = _per_second(trace, 2000)
    # A trace's clock starts at its first request, up to a second into the first one.
    for start in range(0, 2000, 500):
        assert per_second[start + 100 : start + 499].sum() == 0
        assert per_second[start : start + 100].mean() == pytest.approx(3, rel=0.2)


def test_diurnal_rises_from_the_base_to_its_peak() -> None:
    trace = _trace("diurnal:rate=4,peak=3,duration=3600")
    per_second = _per_second(trace, 3600)
    assert per_second[:120].mean() == pytest.approx(4, rel=0.1)
    assert per_second[1740:1860].mean() == pytest.approx(12, rel=0.1)


def test_onoff_is_on_for_its_share_of_the_time() -> None:
    trace = _trace("onoff:rate=1,height=20,on=30,off=90,duration=86400")
    # Expected rate: 1/4 of the time at 20/s, 3/4 at 1/s.
    assert len(trace) / 86400 == pytest.approx(0.25 * 20 + 0.75 * 1, rel=0.1)


def test_long_context_prompts_have_a_heavy_tail_up_to_128k() -> None:
    trace = _trace("longctx:rate=20,duration=3600")
    prompts = trace.prompt_tokens
    assert 10_000 < prompts.mean() < 14_000
    assert 0.02 < (prompts > 30_000).mean() < 0.10
    assert prompts.max() == 131_072  # the tail reaches the cap
    assert prompts.min() >= 1 and trace.output_tokens.min() >= 1


def test_a_mix_superposes_its_families() -> None:
    alone = len(_trace("diurnal:rate=2,duration=3600"))
    mixed = _trace("mix:of=diurnal+quiet,rate=2,duration=3600,quiet.busy=3600,quiet.idle=0")
    assert len(mixed) == pytest.approx(alone + 2 * 3600, rel=0.1)
