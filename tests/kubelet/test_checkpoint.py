"""The kubelet device-manager checkpoint: both real layouts, the writer, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.kubelet.checkpoint import (
    CheckpointEntry,
    CheckpointRead,
    dump_checkpoint,
    parse_checkpoint,
    parse_checkpoint_lenient,
    read_checkpoint,
    write_checkpoint,
)

UID = "7c0cbd2a-6c2e-4c1f-9a63-0f6f7e4b1a2d"
GPU0 = "GPU-5f8ed1a2-9c3b-4f7e-8d21-0a1b2c3d4e5f"
GPU1 = "GPU-0b7c6d5e-4f3a-2b1c-0d9e-8f7a6b5c4d3e"

# Shapes as real kubelets write them (compact Go JSON).
V2 = (
    '{"Data":{"PodDeviceEntries":[{"PodUID":"' + UID + '","ContainerName":"cuda",'
    '"ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["' + GPU0 + '"],"1":["' + GPU1 + '"]},'
    '"AllocResp":"CiIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSCEdQVS0xMjM0"}],'
    '"RegisteredDevices":{"nvidia.com/gpu":["' + GPU0 + '","' + GPU1 + '"]}},'
    '"Checksum":2765345134}'
)
PRE_1_20 = (
    '{"Data":{"PodDeviceEntries":[{"PodUID":"' + UID + '","ContainerName":"cuda",'
    '"ResourceName":"nvidia.com/gpu","DeviceIDs":["' + GPU0 + '","' + GPU1 + '"],'
    '"AllocResp":""}],"RegisteredDevices":{"nvidia.com/gpu":["' + GPU0 + '"]}},'
    '"Checksum":1}'
)
EXPECTED = (
    CheckpointEntry(
        pod_uid=UID, container_name="cuda", resource_name="nvidia.com/gpu", device_ids=(GPU0, GPU1)
    ),
)


def _v2_with_device_ids(device_ids: object) -> str:
    entry = {
        "PodUID": UID,
        "ContainerName": "cuda",
        "ResourceName": "nvidia.com/gpu",
        "DeviceIDs": device_ids,
        "AllocResp": "",
    }
    return json.dumps({"Data": {"PodDeviceEntries": [entry], "RegisteredDevices": {}}})


@pytest.mark.parametrize(
    ("text", "expected_ids"),
    [
        (V2, (GPU0, GPU1)),
        (PRE_1_20, (GPU0, GPU1)),
        (_v2_with_device_ids({"-1": [f"{GPU0}::0", f"{GPU0}::3"]}), (f"{GPU0}::0", f"{GPU0}::3")),
        # Devices spanning NUMA nodes are listed under each node by the kubelet.
        (_v2_with_device_ids({"1": [GPU1, GPU0], "0": [GPU0]}), (GPU0, GPU1)),
        # Keys sort numerically, not as Go's string-sorted JSON.
        (_v2_with_device_ids({"10": [GPU1], "2": [GPU0]}), (GPU0, GPU1)),
        (_v2_with_device_ids({"0": None}), ()),
        (_v2_with_device_ids(None), ()),
    ],
    ids=[
        "v2",
        "pre-1.20-list",
        "replicas-no-topology",
        "multi-numa-dedup",
        "numeric-keys",
        "null-node-list",
        "null-device-ids",
    ],
)
def test_parse_device_ids(text: str, expected_ids: tuple[str, ...]) -> None:
    (entry,) = parse_checkpoint(text, source="ckpt")
    assert entry.device_ids == expected_ids
    assert (entry.pod_uid, entry.container_name, entry.resource_name) == (
        UID,
        "cuda",
        "nvidia.com/gpu",
    )


def test_parse_v2_full() -> None:
    assert parse_checkpoint(V2, source="ckpt") == EXPECTED


def test_no_pods_yet() -> None:
    text = '{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}},"Checksum":0}'
    assert parse_checkpoint(text, source="ckpt") == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "ckpt: not JSON"),
        ("[]", "ckpt: top level: expected an object, got a list"),
        ('{"Checksum":1}', "ckpt: Data: missing"),
        ('{"Data":[]}', "ckpt: Data: expected an object, got a list"),
        ('{"Data":{}}', "ckpt: Data.PodDeviceEntries: missing"),
        ('{"Data":{"PodDeviceEntries":{}}}', "ckpt: Data.PodDeviceEntries: expected a list"),
        ('{"Data":{"PodDeviceEntries":[1]}}', "ckpt: Data.PodDeviceEntries[0]: expected an object"),
        (
            '{"Data":{"PodDeviceEntries":[{"PodUID":5}]}}',
            "ckpt: Data.PodDeviceEntries[0].PodUID: expected a string, got a number",
        ),
        (
            '{"Data":{"PodDeviceEntries":[{"PodUID":"u","ResourceName":"r"}]}}',
            "ckpt: Data.PodDeviceEntries[0].ContainerName: missing",
        ),
        (
            '{"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c","ResourceName":"r"}]}}',
            "ckpt: Data.PodDeviceEntries[0].DeviceIDs: missing",
        ),
        (
            _v2_with_device_ids("GPU-1"),
            "ckpt: Data.PodDeviceEntries[0].DeviceIDs: expected a list of device IDs or a map",
        ),
        (
            _v2_with_device_ids({"node0": ["GPU-1"]}),
            "ckpt: Data.PodDeviceEntries[0].DeviceIDs: NUMA node key 'node0' is not an integer",
        ),
        (
            _v2_with_device_ids({"0": [1]}),
            "ckpt: Data.PodDeviceEntries[0].DeviceIDs['0']: expected a list of strings",
        ),
        (
            _v2_with_device_ids([None]),
            "ckpt: Data.PodDeviceEntries[0].DeviceIDs: expected a list of strings",
        ),
    ],
    ids=[
        "not-json",
        "top-list",
        "no-data",
        "data-list",
        "no-entries",
        "entries-map",
        "entry-number",
        "uid-number",
        "no-container",
        "no-device-ids",
        "device-ids-string",
        "numa-key-text",
        "numa-list-numbers",
        "list-with-null",
    ],
)
def test_malformed(text: str, message: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        parse_checkpoint(text, source="ckpt")
    assert str(excinfo.value).startswith(message)


def test_dump_round_trip_and_shape() -> None:
    entries = (
        *EXPECTED,
        CheckpointEntry(
            pod_uid="u2",
            container_name="side",
            resource_name="nvidia.com/gpu.shared",
            device_ids=(f"{GPU0}::1",),
        ),
    )
    registered = {"nvidia.com/gpu.shared": [f"{GPU0}::0", f"{GPU0}::1"], "nvidia.com/gpu": [GPU0]}
    text = dump_checkpoint(entries, registered)
    assert parse_checkpoint(text, source="dumped") == entries
    document = json.loads(text)
    assert list(document) == ["Data", "Checksum"]
    assert isinstance(document["Checksum"], int)
    assert list(document["Data"]["RegisteredDevices"]) == [
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
    ]
    first = document["Data"]["PodDeviceEntries"][0]
    assert list(first) == ["PodUID", "ContainerName", "ResourceName", "DeviceIDs", "AllocResp"]
    assert first["DeviceIDs"] == {"-1": [GPU0, GPU1]}
    assert dump_checkpoint(entries, registered) == text, "output must be deterministic"


def test_read_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_checkpoint(tmp_path / "kubelet_internal_checkpoint") == CheckpointRead()


def test_write_then_read(tmp_path: Path) -> None:
    path = tmp_path / "kubelet_internal_checkpoint"
    write_checkpoint(path, EXPECTED, {"nvidia.com/gpu": [GPU0, GPU1]})
    assert read_checkpoint(path) == CheckpointRead(entries=EXPECTED)
    write_checkpoint(path, (), {})
    assert read_checkpoint(path) == CheckpointRead()
    assert [p.name for p in tmp_path.iterdir()] == ["kubelet_internal_checkpoint"]


def _with_bad_entry(good: str) -> str:
    """`good`'s entries with a malformed one (no PodUID) in front of them."""
    document = json.loads(good)
    document["Data"]["PodDeviceEntries"].insert(0, {"ContainerName": "c"})
    return json.dumps(document)


def test_lenient_skips_only_the_malformed_entry() -> None:
    """One bad entry must not cost every other pod its UID."""
    text = _with_bad_entry(V2)
    with pytest.raises(ValueError, match=r"^ckpt: Data.PodDeviceEntries\[0\].PodUID: missing"):
        parse_checkpoint(text, source="ckpt")
    assert parse_checkpoint_lenient(text, source="ckpt") == CheckpointRead(
        entries=EXPECTED, skipped=("ckpt: Data.PodDeviceEntries[0].PodUID: missing",)
    )


@pytest.mark.parametrize(
    "text",
    ["{not json", '{"Data":[]}', '{"Data":{"PodDeviceEntries":{}}}'],
    ids=["not-json", "data-list", "entries-map"],
)
def test_lenient_still_rejects_a_malformed_document(text: str) -> None:
    with pytest.raises(ValueError, match=r"^ckpt: "):
        parse_checkpoint_lenient(text, source="ckpt")


def test_read_names_the_path_and_skips_bad_entries(tmp_path: Path) -> None:
    path = tmp_path / "kubelet_internal_checkpoint"
    path.write_text(_with_bad_entry(V2))
    assert read_checkpoint(path) == CheckpointRead(
        entries=EXPECTED, skipped=(f"{path}: Data.PodDeviceEntries[0].PodUID: missing",)
    )
    path.write_text('{"Data":[]}')
    with pytest.raises(ValueError, match=f"^{path}: Data: expected an object"):
        read_checkpoint(path)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3)
    ),
    max_leaves=12,
)
_ENTRY_KEYS = ("PodUID", "ContainerName", "ResourceName", "DeviceIDs", "AllocResp")


@given(
    st.text(max_size=80)
    | st.integers(500, 200_000).map(lambda depth: "[" * depth)  # the parser's recursion
    | _JSON.map(json.dumps)
)
def test_any_checkpoint_text_parses_or_is_one_value_error(text: str) -> None:
    """The kubelet's file, whatever it holds: entries, or ValueError naming the source;
    nothing else."""
    for parse in (parse_checkpoint, parse_checkpoint_lenient):
        try:
            parse(text, source="ckpt")
        except ValueError as err:
            assert str(err).startswith("ckpt")


@given(st.lists(st.dictionaries(st.sampled_from(_ENTRY_KEYS), _JSON), max_size=4))
def test_a_well_formed_document_reads_leniently_whatever_its_entries(entries) -> None:
    """The lenient parser raises only for the document: each entry is read or skipped."""
    text = json.dumps({"Data": {"PodDeviceEntries": entries}, "Checksum": 1})
    read = parse_checkpoint_lenient(text, source="ckpt")
    assert len(read.entries) + len(read.skipped) == len(entries)
