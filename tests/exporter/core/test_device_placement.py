"""Device-plugin IDs: every form a GPU device plugin advertises, parsed (the table, then
hypothesis over arbitrary text and over every valid form), and which resources are kept.
Placing IDs on a node's entities is tested through the whole join in test_attribution."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.exporter.core.device_placement import DeviceId, keeps_resource, parse_device_id

PARSE_ROWS = [
    ("GPU-abc", DeviceId(gpu_uuid="GPU-abc")),
    ("GPU-abc::7", DeviceId(gpu_uuid="GPU-abc", replica=7)),
    ("MIG-def", DeviceId(mig_uuid="MIG-def")),
    ("MIG-def::12", DeviceId(mig_uuid="MIG-def", replica=12)),
    ("MIG-GPU-abc/3/0", DeviceId(gpu_uuid="GPU-abc", gi_id=3)),
    ("MIG-GPU-abc/3/0::1", DeviceId(gpu_uuid="GPU-abc", gi_id=3, replica=1)),
    ("nvidia3", DeviceId(gpu_index=3)),
    ("nvidia3/vgpu5", DeviceId(gpu_index=3, replica=5)),
    ("nvidia3/gi9", DeviceId(gpu_index=3, gi_id=9)),
    ("nvidia3/gi9/vgpu1", DeviceId(gpu_index=3, gi_id=9, replica=1)),
    ("GPU-", None),
    ("GPU-abc::", None),
    ("GPU-abc::x", None),
    ("GPU-abc::\u0661", None),  # a non-ASCII digit is not a replica index
    ("MIG-GPU-abc/3", None),
    ("nvidia", None),
    ("nvidia3/vgpu", None),
    ("nvidia3::1", None),
    ("0", None),
    ("", None),
    # int() raises past 4300 digits: one such ID stopped every collection on the node
    ("GPU-abc::" + "9" * 5000, None),
    ("nvidia" + "9" * 5000, None),
    ("nvidia3/vgpu" + "9" * 5000, None),
    ("MIG-GPU-abc/" + "9" * 5000 + "/0", None),
    ("GPU-abc::999999999", DeviceId(gpu_uuid="GPU-abc", replica=999_999_999)),
]


@pytest.mark.parametrize(("raw", "want"), PARSE_ROWS, ids=[repr(raw)[:40] for raw, _ in PARSE_ROWS])
def test_parse_device_id(raw: str, want: DeviceId | None) -> None:
    assert parse_device_id(raw) == want


@pytest.mark.parametrize(
    ("name", "extra", "kept"),
    [
        ("nvidia.com/gpu", (), True),
        ("nvidia.com/gpu.shared", (), True),
        ("nvidia.com/mig-1g.10gb", (), True),
        ("nvidia.com/mig-3g.40gb.me", (), True),
        ("nvidia.com/gpu-other", (), False),
        ("example.com/gpu", (), False),
        ("example.com/gpu", ("example.com/gpu",), True),
        ("cpu", (), False),
    ],
    ids=lambda v: repr(v) if isinstance(v, str) else None,
)
def test_keeps_resource(name: str, extra: tuple[str, ...], kept: bool) -> None:
    assert keeps_resource(name, extra) is kept


@given(st.text(max_size=40))
def test_any_text_parses_to_one_target_or_none(raw: str) -> None:
    got = parse_device_id(raw)
    if got is not None:
        targets = (got.gpu_uuid, got.gpu_index, got.mig_uuid)
        assert sum(t is not None for t in targets) == 1


_HEX = st.text(alphabet="0123456789abcdefABCDEF-", min_size=1, max_size=36).filter(
    lambda s: s[0] != "-"
)
_INDEX = st.integers(min_value=0, max_value=10**6)
_REPLICA = st.none() | _INDEX


@given(kind=st.sampled_from(["GPU", "MIG"]), uuid=_HEX, replica=_REPLICA)
def test_every_uuid_form_round_trips(kind: str, uuid: str, replica: int | None) -> None:
    base = f"{kind}-{uuid}"
    raw = base if replica is None else f"{base}::{replica}"
    want = DeviceId(replica=replica, **{"gpu_uuid" if kind == "GPU" else "mig_uuid": base})
    assert parse_device_id(raw) == want


@given(gpu=_INDEX, gi=st.none() | _INDEX, vgpu=_REPLICA)
def test_every_gke_form_round_trips(gpu: int, gi: int | None, vgpu: int | None) -> None:
    raw = (
        f"nvidia{gpu}"
        + ("" if gi is None else f"/gi{gi}")
        + ("" if vgpu is None else f"/vgpu{vgpu}")
    )
    assert parse_device_id(raw) == DeviceId(gpu_index=gpu, gi_id=gi, replica=vgpu)
