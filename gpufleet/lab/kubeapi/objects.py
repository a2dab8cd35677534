"""What the API server does to objects, as pure functions: patches and `Status` errors.

Semantics follow the API conventions the official client relies on:
- JSON merge patch (RFC 7386); JSON patch (RFC 6902: add, remove, replace, test, move,
  copy); strategic merge patch approximated as a merge patch whose lists of named objects
  (containers, env, ...) merge by `name`, which is what the controllers here send.
- Selectors are `gpufleet.core.selectors`, shared with the autoscaler's adapter.
- Errors are `Status` objects with the API server's reasons and codes.
"""

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.core.numbers import ascii_int
from gpufleet.core.selectors import Requirement, SelectorError, parse_selector


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiError(Exception):
    """An API error, answered as a `Status` object."""

    code: int
    reason: str  # NotFound, AlreadyExists, Conflict, Invalid, BadRequest, ...
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            out["details"] = dict(self.details)
        return out


def bad_request(message: str) -> ApiError:
    return ApiError(code=400, reason="BadRequest", message=message)


def selectors(
    label_selector: str, field_selector: str, fields: frozenset[str] | None = None
) -> tuple[tuple[Requirement, ...], tuple[Requirement, ...]]:
    """A request's label and field selectors, parsed; 400 for one that does not parse, or
    that selects on a field outside `fields` (None: any)."""
    try:
        labels, by_field = parse_selector(label_selector), parse_selector(field_selector)
    except SelectorError as err:
        raise bad_request(str(err)) from None
    for requirement in by_field:
        if fields is not None and requirement.key not in fields:
            raise bad_request(f"field label not supported: {requirement.key}")
    return labels, by_field


def not_found(kind_plural: str, name: str, group: str = "") -> ApiError:
    what = f"{kind_plural}.{group}" if group else kind_plural
    return ApiError(
        code=404,
        reason="NotFound",
        message=f'{what} "{name}" not found',
        details={"name": name, "group": group, "kind": kind_plural},
    )


def invalid(kind: str, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 naming each bad field, as the API server's validation does."""
    text = "; ".join(f"{f}: {m}" for f, m in causes)
    return ApiError(
        code=422,
        reason="Invalid",
        message=f'{kind} "{name}" is invalid: {text}',
        details={
            "name": name,
            "kind": kind,
            "causes": [
                {"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes
            ],
        },
    )


def conflict(plural: str, group: str, name: str) -> ApiError:
    what = f"{plural}.{group}" if group else plural
    return ApiError(
        code=409,
        reason="Conflict",
        message=(
            f'Operation cannot be fulfilled on {what} "{name}": the object has been modified; '
            "please apply your changes to the latest version and try again"
        ),
        details={"name": name, "group": group, "kind": plural},
    )


# --- patches ---


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, `null` deletes, anything else replaces."""
    return _merge(target, patch, by_name=False)


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A merge patch whose lists of objects that all carry `name` merge item by item."""
    return _merge(target, patch, by_name=True)


def _merge(target: Any, patch: Any, *, by_name: bool) -> Any:
    if not isinstance(patch, dict):
        if by_name and _named_list(patch) and _named_list(target):
            by = {item["name"]: item for item in target}
            merged = [_merge(by.get(i["name"]), i, by_name=True) for i in patch]
            patched = {i["name"] for i in patch}
            return [i for i in target if i["name"] not in patched] + merged
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value, by_name=by_name)
    return out


def _named_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, dict) and "name" in i for i in value)


# kube-apiserver's bounds on a JSON patch: its operations (maxJSONPatchOperations), and
# what `copy` operations may add up to, which else doubles an object per operation.
MAX_JSON_PATCH_OPERATIONS = 10_000
MAX_COPIED_BYTES = 3 << 20


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902. Raises ApiError 400 on an operation that does not decode, 413 past
    kube-apiserver's bounds, 422 on one that does not apply or a failed `test`."""
    if not isinstance(operations, list):
        raise ApiError(code=400, reason="BadRequest", message="json patch must be a list")
    if len(operations) > MAX_JSON_PATCH_OPERATIONS:
        raise ApiError(
            code=413,
            reason="RequestEntityTooLarge",
            message=(
                f"The allowed maximum operations in a JSON patch is "
                f"{MAX_JSON_PATCH_OPERATIONS}, got {len(operations)}"
            ),
        )
    doc = copy.deepcopy(target)
    copied = 0
    for op in operations:
        if not (
            isinstance(op, dict)
            and isinstance(op.get("op"), str)
            and isinstance(op.get("path"), str)
            and (op["op"] not in ("move", "copy") or isinstance(op.get("from"), str))
        ):
            raise ApiError(code=400, reason="BadRequest", message=f"bad json patch operation {op}")
        if op["op"] == "copy":
            copied += len(json.dumps(_get(doc, _pointer(op["from"]))))
            if copied > MAX_COPIED_BYTES:
                raise ApiError(
                    code=422,
                    reason="Invalid",
                    message=(
                        f"Unable to copy, accumulated size of copied values {copied} exceeds "
                        f"the limit {MAX_COPIED_BYTES}"
                    ),
                )
        doc = _apply_op(doc, op)
    return doc


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(code=400, reason="BadRequest", message=f"bad json pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _apply_op(doc: Any, op: Mapping[str, Any]) -> Any:
    kind, parts = op["op"], _pointer(op["path"])
    if kind == "test":
        if _get(doc, parts) != op.get("value"):
            raise ApiError(code=422, reason="Invalid", message=f"test failed at {op['path']}")
        return doc
    if kind in ("move", "copy"):
        value = copy.deepcopy(_get(doc, _pointer(op["from"])))
        if kind == "move":
            doc = _remove(doc, _pointer(op["from"]))
        return _add(doc, parts, value)
    if kind == "remove":
        return _remove(doc, parts)
    if kind == "add":
        return _add(doc, parts, copy.deepcopy(op.get("value")))
    if kind == "replace":
        _get(doc, parts)  # must exist
        if not parts:  # the whole document
            return copy.deepcopy(op.get("value"))
        return _add(_remove(doc, parts), parts, copy.deepcopy(op.get("value")))
    raise ApiError(code=400, reason="BadRequest", message=f"unknown json patch op {kind!r}")


_INDEX_DIGITS = 20  # a uint64's


def _index(parts: list[str], size: int) -> int:
    """A pointer's last step into a list of `size` places: a plain index within it."""
    index = ascii_int(parts[-1], max_digits=_INDEX_DIGITS)
    if index is None or index >= size:
        raise ApiError(code=422, reason="Invalid", message=f"bad list index at /{'/'.join(parts)}")
    return index


def _get(doc: Any, parts: list[str]) -> Any:
    for part in parts:
        try:
            if isinstance(doc, list):
                index = ascii_int(part, max_digits=_INDEX_DIGITS)  # a pointer's: plain digits
                if index is None:
                    raise KeyError(part)
                doc = doc[index]
            else:
                doc = doc[part]
        except (KeyError, IndexError, TypeError):
            raise ApiError(
                code=422, reason="Invalid", message=f"path /{'/'.join(parts)} does not exist"
            ) from None
    return doc


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _get(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else _index(parts, len(parent) + 1)
        parent.insert(index, value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise ApiError(code=422, reason="Invalid", message=f"cannot add at /{'/'.join(parts)}")
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    if not parts:
        raise ApiError(code=422, reason="Invalid", message="cannot remove the whole document")
    parent = _get(doc, parts[:-1])
    _get(doc, parts)  # must exist
    if isinstance(parent, list):
        del parent[_index(parts, len(parent))]
    else:
        del parent[parts[-1]]
    return doc
