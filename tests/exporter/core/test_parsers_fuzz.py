"""Fuzzing the exporter's pure parsers: the counters CSV and `-d`. Any exception other
than the parser's own error type fails (issue 15). Modest example counts keep them fast."""

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.exporter.core.counters import CountersError, parse_counters, select_fields
from gpufleet.exporter.core.fields import CATALOG
from gpufleet.exporter.core.samples import Entity, MigInstance
from gpufleet.exporter.core.selection import (
    DeviceSelectorError,
    missing,
    parse_devices,
    selected,
)

FUZZ = settings(max_examples=300, deadline=None)

_NAMES = st.sampled_from([*sorted(CATALOG)[:40], "dcgm_sm_clock", "DCGM_FI_NOPE", ""])
_TYPES = st.sampled_from(["gauge", "counter", "label", "histogram", "summary", "Gauge", ""])
_CELL = st.one_of(st.text(max_size=20), _NAMES, _TYPES, st.just('"a, b"'), st.just('"'))
_ROW = st.one_of(
    st.builds(lambda f, t, h: f"{f}, {t}, {h}", _NAMES, _TYPES, st.text(max_size=30)),
    st.lists(_CELL, max_size=5).map(",".join),
    st.text(max_size=60),
    st.sampled_from(["# comment", "", "  ", "\ufeff", "\x00", "\r"]),
)
_CSV = st.lists(_ROW, max_size=12).map("\n".join)


@FUZZ
@given(_CSV)
def test_counters_csv_raises_only_counters_error(text: str) -> None:
    try:
        rows = parse_counters(text, source="fuzz.csv")
    except CountersError as exc:
        assert str(exc).startswith("fuzz.csv:")
        return
    select_fields(rows, CATALOG, source="fuzz.csv")  # warnings, never an exception


def _entity(gpu: int, gi: int | None) -> Entity:
    mig = (
        MigInstance(profile="1g.10gb", gi_id=gi, ci_id=0, uuid=f"MIG-{gpu}-{gi}", dcgm_id=gi)
        if gi
        else None
    )
    return Entity(gpu=gpu, uuid=f"GPU-{gpu}", pci_bus_id="0", model_name="m", mig=mig)


_NODE = (_entity(0, None), _entity(1, None), _entity(1, 7), _entity(3, None))
_DEVICES = st.one_of(
    st.text(max_size=20),
    st.from_regex(r"\A[fgi]?:?[0-9,\- ²٣]{0,14}\Z"),
    st.builds(
        lambda kind, spans: f"{kind}:" + ",".join(spans),
        st.sampled_from("fgi"),
        st.lists(st.from_regex(r"\A[0-9]{1,8}(-[0-9]{1,8})?\Z"), min_size=1, max_size=4),
    ),
)


@FUZZ
@given(_DEVICES)
def test_devices_raise_only_device_selector_error(text: str) -> None:
    try:
        selector = parse_devices(text)
    except DeviceSelectorError as exc:
        assert repr(text.strip()) in str(exc) or repr(text) in str(exc)
        return
    chosen = selected(_NODE, selector)
    problem = missing(selector, _NODE)
    assert problem is None or problem.startswith("couldn't find requested GPU ")
    assert set(chosen) <= set(_NODE)
