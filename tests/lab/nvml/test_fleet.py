"""Fleet spec parsing: valid layouts and every kind of error."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.lab.nvml.fleet import parse_fleet

UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
MIG_UUID_RE = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@pytest.mark.parametrize(
    ("spec", "models", "mig"),
    [
        ("8xH100", ["H100"] * 8, [[]] * 8),
        ("2xa100", ["A100"] * 2, [[]] * 2),
        ("1xL4+1xH100", ["L4", "H100"], [[], []]),
        (
            "1xA100:mig=all-1g.10gb",
            ["A100"],
            [[("1g.10gb", gi) for gi in range(7, 14)]],
        ),
        ("1xH100:mig=7x1g.10gb", ["H100"], [[("1g.10gb", gi) for gi in range(7, 14)]]),
        (
            "1xH100:mig=3g.40gb,2g.20gb,1g.10gb",
            ["H100"],
            [[("3g.40gb", 1), ("2g.20gb", 5), ("1g.10gb", 13)]],
        ),
        ("1xH100:mig=2x3g.40gb", ["H100"], [[("3g.40gb", 1), ("3g.40gb", 2)]]),
        ("1xA100:mig=all-1g.20gb", ["A100"], [[("1g.20gb", gi) for gi in (3, 4, 5, 6)]]),
        ("1xA100:mig=4g.40gb,3g.40gb", ["A100"], [[("4g.40gb", 1), ("3g.40gb", 2)]]),
        ("1xH100:mig=7g.80gb", ["H100"], [[("7g.80gb", 0)]]),
        ("1xH100:mig=empty", ["H100"], [[]]),  # MIG mode on, no instances (issue 16 §1.4)
        (
            " 6xH100 + 2xH100:mig=7x1g.10gb ",
            ["H100"] * 8,
            [[]] * 6 + [[("1g.10gb", gi) for gi in range(7, 14)]] * 2,
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_valid_specs(spec: str, models: list[str], mig: list[list[tuple[str, int]]]) -> None:
    gpus = parse_fleet(spec, seed=3)
    assert [g.model for g in gpus] == models
    assert [[(m.profile, m.gi_id) for m in g.mig] for g in gpus] == mig
    assert [g.index for g in gpus] == list(range(len(gpus)))
    assert all(g.mig_enabled == (bool(g.mig) or "mig=empty" in spec) for g in gpus)
    for g in gpus:
        assert [m.index for m in g.mig] == list(range(len(g.mig)))
        assert all(m.ci_id == 0 for m in g.mig)


def test_identities_are_distinct_well_formed_and_seeded() -> None:
    gpus = parse_fleet("12xH100:mig=all-1g.10gb", seed=7)
    uuids = [g.uuid for g in gpus] + [m.uuid for g in gpus for m in g.mig]
    assert len(set(uuids)) == len(uuids)
    assert all(UUID_RE.match(g.uuid) for g in gpus)
    assert all(MIG_UUID_RE.match(m.uuid) for g in gpus for m in g.mig)
    assert len({g.pci_bus_id for g in gpus}) == 12
    assert gpus[0].pci_bus_id == "00000000:18:00.0"
    assert gpus[8].pci_bus_id == "00000001:18:00.0"
    assert len({g.serial for g in gpus}) == 12
    assert all(len(g.serial) == 13 and g.serial.isdigit() for g in gpus)
    assert [g.numa_node for g in gpus] == [0] * 6 + [1] * 6
    assert [g.minor for g in gpus] == list(range(12))
    assert parse_fleet("12xH100:mig=all-1g.10gb", seed=7) == gpus
    assert parse_fleet("12xH100:mig=all-1g.10gb", seed=8)[0].uuid != gpus[0].uuid


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty part"),
        ("8xH100+", "empty part"),
        ("H100", "bad fleet part 'H100'"),
        ("8xH200", "unknown GPU model 'H200' in '8xH200'; valid models: A100, H100, L4"),
        ("0xH100", "bad GPU count 0 in '0xH100'"),
        ("65xH100", "65 GPUs, at most 64"),
        ("2xH100:color=red", "unknown option 'color=red' in '2xH100:color=red'"),
        ("2xL4:mig=all-1g.10gb", "L4 does not support MIG"),
        ("1xH100:mig=all-1g.5gb", "unknown MIG profile '1g.5gb' for H100"),
        ("1xH100:mig=all-1g.5gb", "valid profiles: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb"),
        ("1xH100:mig=8x1g.10gb", "needs 8 compute slices; one H100 has 7"),
        ("1xH100:mig=2x4g.40gb", "needs 8 compute slices"),
        ("1xA100:mig=4g.40gb,3g.40gb,1g.10gb", "needs 8 compute slices"),
        ("1xA100:mig=4g.40gb,2x1g.20gb,1g.10gb", "no free placement for 1g.10gb"),
        ("1xA100:mig=3g.40gb,,1g.10gb", "bad MIG layout item ''"),
        ("1xA100:mig=big", "bad MIG layout item 'big'"),
    ],
    ids=lambda v: v or "empty",
)
def test_invalid_specs(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_fleet(spec)


_MODELS = st.sampled_from(["H100", "A100", "L4", "h100", "H999", "", "٣"])
_LAYOUTS = st.sampled_from(
    ["", ":mig=all-1g.10gb", ":mig=7x1g.10gb", ":mig=99999999x1g.10gb", ":mig=", ":mig=all-",
     ":mig=3g.40gb,2x2g.20gb", ":mog=1", ":mig=1x", ":mig=٣x1g.10gb"]
)  # fmt: skip
_PART = st.builds(
    lambda count, model, layout: f"{count}x{model}{layout}",
    st.one_of(st.integers(-2, 70).map(str), st.sampled_from(["", "1" * 5000, "²", "٣"])),
    _MODELS,
    _LAYOUTS,
)
_SPECS = st.one_of(st.lists(_PART, min_size=1, max_size=3).map("+".join), st.text(max_size=40))


@settings(max_examples=300, deadline=None)
@given(_SPECS)
def test_fleet_specs_raise_only_value_error(spec: str) -> None:
    """Issue 15 fuzz: `1xH100:mig=99999999x1g.10gb` built a list of 10^8 names."""
    try:
        gpus = parse_fleet(spec)
    except ValueError:
        return
    assert 1 <= len(gpus) <= 64
