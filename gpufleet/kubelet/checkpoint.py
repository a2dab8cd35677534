"""The kubelet device manager's checkpoint, `device-plugins/kubelet_internal_checkpoint`.

Why it matters: pod-resources `List` names pods but carries no pod UID, while the cgroups of
GPU processes carry only the UID. The checkpoint is where the kubelet records which devices
it gave to which (pod UID, container, resource), so the exporter joins the two through it.

Two layouts exist on real nodes and both are read:
- v2 (kubelet >= 1.20): `"DeviceIDs": {"<NUMA node>": [ids...]}`; node `-1` means "no
  topology", and a device spanning several nodes is listed under each of them;
- pre-1.20: `"DeviceIDs": [ids...]`.

The writer emits v2 in the kubelet's compact Go-JSON shape. Its `Checksum` is not the
kubelet's (a hash of Go's in-memory struct printout, not reproducible here): our readers
ignore the checksum, and only fakes write this file. `AllocResp` (the plugin's serialized
AllocateResponse) is written empty and never read. Parsing never guesses: a malformed file
raises ValueError naming the source and the JSON field. `read_checkpoint` (what runs on a
node) is lenient about single entries only: a malformed entry is skipped and reported in
its result, so one bad entry never costs the pod UIDs of all the others.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHECKPOINT_NAME = "kubelet_internal_checkpoint"
# The kubelet's key for devices whose plugin reported no NUMA topology.
NUMA_NODE_WITHOUT_TOPOLOGY = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointEntry:
    """Devices of one resource allocated to one container of one pod."""

    pod_uid: str
    container_name: str
    resource_name: str
    # Unique, in checkpoint order (NUMA nodes ascending, then the kubelet's list order).
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointRead:
    """What a lenient read found: the well-formed entries, in file order, and one message
    (naming the file and the JSON field) per malformed entry skipped."""

    entries: tuple[CheckpointEntry, ...] = ()
    skipped: tuple[str, ...] = ()


def parse_checkpoint(text: str, *, source: str) -> tuple[CheckpointEntry, ...]:
    """Parse checkpoint JSON (v2 or pre-1.20) into entries, in file order; strict.

    `source` (usually the path) prefixes every error message. Go's `null` for an empty
    slice or map is accepted wherever a list or map is expected. Raises ValueError on the
    first malformed part.
    """
    return tuple(
        _parse_entry(raw, source=source, where=where) for where, raw in _raw_entries(text, source)
    )


def parse_checkpoint_lenient(text: str, *, source: str) -> CheckpointRead:
    """Like `parse_checkpoint`, but a malformed entry is skipped and reported, not raised.

    Raises ValueError only when the document itself is malformed (not JSON, no
    `Data.PodDeviceEntries` list): then no entry can be trusted.
    """
    entries: list[CheckpointEntry] = []
    skipped: list[str] = []
    for where, raw in _raw_entries(text, source):
        try:
            entries.append(_parse_entry(raw, source=source, where=where))
        except ValueError as exc:
            skipped.append(str(exc))
    return CheckpointRead(entries=tuple(entries), skipped=tuple(skipped))


def _raw_entries(text: str, source: str) -> list[tuple[str, Any]]:
    """(JSON path, raw entry) of every entry; raises ValueError for a malformed document."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: not JSON: {exc}") from exc
    except RecursionError:  # nested deeper than the parser goes: no kubelet writes that
        raise ValueError(f"{source}: not JSON: nested too deep") from None
    data = _field(document, "Data", dict, source=source, where="")
    entries = _field(data, "PodDeviceEntries", list, source=source, where="Data.", nullable=True)
    return [(f"Data.PodDeviceEntries[{i}]", raw) for i, raw in enumerate(entries or ())]


def dump_checkpoint(
    entries: Iterable[CheckpointEntry], registered: Mapping[str, Sequence[str]]
) -> str:
    """Render entries and the registered devices per resource as v2 checkpoint JSON.

    All devices go under the no-topology NUMA key `-1`. Deterministic: the same input gives
    the same bytes (map keys sorted as Go sorts them, compact separators).
    """
    empty_alloc_resp = base64.b64encode(b"").decode("ascii")
    data = {
        "PodDeviceEntries": [
            {
                "PodUID": entry.pod_uid,
                "ContainerName": entry.container_name,
                "ResourceName": entry.resource_name,
                "DeviceIDs": {str(NUMA_NODE_WITHOUT_TOPOLOGY): list(entry.device_ids)},
                "AllocResp": empty_alloc_resp,
            }
            for entry in entries
        ],
        "RegisteredDevices": {name: list(ids) for name, ids in sorted(registered.items())},
    }
    body = json.dumps(data, separators=(",", ":"))
    # Any integer passes our readers; a content hash keeps the output deterministic.
    checksum = zlib.crc32(body.encode("utf-8"))
    return f'{{"Data":{body},"Checksum":{checksum}}}'


def read_checkpoint(path: Path | str) -> CheckpointRead:
    """Read the checkpoint at `path` leniently (`parse_checkpoint_lenient`); a missing file
    means no allocations yet. Raises OSError, or ValueError for a malformed document."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return CheckpointRead()
    return parse_checkpoint_lenient(text, source=str(path))


def write_checkpoint(
    path: Path | str,
    entries: Iterable[CheckpointEntry],
    registered: Mapping[str, Sequence[str]],
) -> None:
    """Write the checkpoint atomically (temp file in the same directory, then rename).

    A concurrent reader sees the old file or the new one, never a partial write.
    """
    target = Path(path)
    text = dump_checkpoint(entries, registered)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as tmp:
            tmp.write(text)
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def _parse_entry(raw: Any, *, source: str, where: str) -> CheckpointEntry:
    if not isinstance(raw, dict):
        raise ValueError(f"{source}: {where}: expected an object, got {_kind(raw)}")
    pod_uid, container, resource = (
        _field(raw, name, str, source=source, where=f"{where}.")
        for name in ("PodUID", "ContainerName", "ResourceName")
    )
    if "DeviceIDs" not in raw:
        raise ValueError(f"{source}: {where}.DeviceIDs: missing")
    device_ids = _parse_device_ids(raw["DeviceIDs"], source=source, where=f"{where}.DeviceIDs")
    return CheckpointEntry(
        pod_uid=pod_uid, container_name=container, resource_name=resource, device_ids=device_ids
    )


def _parse_device_ids(raw: Any, *, source: str, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, list):  # pre-1.20: a flat list
        return tuple(dict.fromkeys(_string_list(raw, source=source, where=where)))
    if not isinstance(raw, dict):
        raise ValueError(
            f"{source}: {where}: expected a list of device IDs or a map of NUMA node to "
            f"device IDs, got {_kind(raw)}"
        )
    per_node: list[tuple[int, list[str]]] = []
    for key, ids in raw.items():
        try:
            node = int(key)
        except ValueError:
            raise ValueError(
                f"{source}: {where}: NUMA node key {key!r} is not an integer"
            ) from None
        ids = [] if ids is None else ids
        per_node.append((node, _string_list(ids, source=source, where=f"{where}[{key!r}]")))
    # A device on several NUMA nodes is listed once per node; report it once.
    ordered = (device for _, ids in sorted(per_node, key=lambda item: item[0]) for device in ids)
    return tuple(dict.fromkeys(ordered))


def _string_list(raw: Any, *, source: str, where: str) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise ValueError(f"{source}: {where}: expected a list of strings, got {_kind(raw)}")
    return raw


def _field(
    obj: Any, name: str, kind: type, *, source: str, where: str, nullable: bool = False
) -> Any:
    if not isinstance(obj, dict):
        raise ValueError(f"{source}: {where or 'top level'}: expected an object, got {_kind(obj)}")
    if name not in obj:
        raise ValueError(f"{source}: {where}{name}: missing")
    value = obj[name]
    if value is None and nullable:
        return None
    if not isinstance(value, kind):
        raise ValueError(
            f"{source}: {where}{name}: expected {_JSON_KINDS[kind]}, got {_kind(value)}"
        )
    return value


_JSON_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}


def _kind(value: Any) -> str:
    return "null" if value is None else _JSON_KINDS.get(type(value), "a number")
