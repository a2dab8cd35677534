"""Lists on the fake API server: which version of the collection an answer shows, and its
pages, as kube-apiserver serves them (its watch cache in front of etcd).

- `resourceVersion` unset: the newest objects (a quorum read from etcd), in pages when
  `limit` is set.
- "0": any version; with the watch cache (the default) the newest objects, whole, whatever
  the `limit`, as the watch cache ignores it; without one, as unset.
- a number N: not older than N, whole (the watch cache serves it); with `limit`, exactly
  N, in pages (etcd does). With `resourceVersionMatch` `NotOlderThan` or `Exact` so.
- N newer than the server has: 504 with the cause `ResourceVersionTooLarge`; N older than
  the store's event window (etcd's compaction) for an exact read: 410 Expired.
- A page with more after it carries `continue`; the next page, asked with that token and
  no `resourceVersion`, shows the same version of the collection, and is 410 Expired once
  the window has moved past it: the client must list again.
- Options kube-apiserver's validation refuses (`resourceVersionMatch` without a version,
  with `continue`, or unknown; `sendInitialEvents` on a list) are 422 Invalid; a
  resourceVersion or `continue` that does not parse, or a version with `continue`, 400.
"""

import base64
import binascii
import bisect
import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any

from gpufleet.core.numbers import ascii_int
from gpufleet.core.selectors import matches_fields, matches_labels
from gpufleet.lab.kubeapi.objects import ApiError, bad_request, invalid, selectors
from gpufleet.lab.kubeapi.resources import Resource, selectable_fields
from gpufleet.lab.kubeapi.store import ObjectStore

TOO_OLD = "The resourceVersion for the provided list is too old."
FORBIDDEN = "Forbidden: resourceVersionMatch is forbidden "
CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter."
)


def resource_version(value: str) -> int | None:
    """A query's `resourceVersion`: None when unset, 0 for "0"; 400 when not a version."""
    if value == "":
        return None
    version = ascii_int(value, max_digits=20)  # a uint64's, as etcd's revisions
    if version is None:
        raise bad_request(f"invalid resourceVersion {value!r}")
    return version


def too_large(wanted: int, current: int) -> ApiError:
    return ApiError(
        code=504,
        reason="Timeout",
        message=f"Too large resource version: {wanted}, current: {current}",
        details={
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
    )


@dataclass(frozen=True, slots=True)
class _Query:
    version: int | None  # None: unset
    match: str  # "", NotOlderThan or Exact
    limit: int  # 0: no limit
    after: tuple[int, tuple[str, str]] | None  # from `continue`: the version, the last key


def list_answer(
    store: ObjectStore,
    res: Resource,
    namespace: str | None,
    query: Mapping[str, str],
    *,
    watch_cache: bool = True,
) -> dict[str, Any]:
    """The List object a GET of the collection answers; ApiError for what the server refuses."""
    q = _parse(query, res)
    labels, fields = selectors(
        query.get("labelSelector", ""), query.get("fieldSelector", ""), selectable_fields(res)
    )
    current = int(store.resource_version)
    if q.version is not None and q.version > current:
        raise too_large(q.version, current)
    # etcd serves a page at an exact version; the watch cache, or a whole list, the newest
    if q.after is not None:
        at = q.after[0]
    elif q.version and (q.match == "Exact" or (q.limit and not q.match)):
        at = q.version
    else:
        at = current
    whole = not q.limit or (q.version == 0 and watch_cache)
    found = store.objects_at(res, namespace, at)
    if found is None:
        raise ApiError(code=410, reason="Expired", message=CONTINUE_TOO_OLD if q.after else TOO_OLD)
    if q.after is not None:  # the page starts after the last key of the one before
        found = found[bisect.bisect_right(found, q.after[1], key=lambda kv: kv[0]) :]
    selected = labels or fields
    # a page stops at the first match past its limit; what remains is counted only
    # without selectors, as the API server does
    wanted = len(found) if whole else q.limit + 1
    chosen = list(
        islice(
            (
                (key, obj)
                for key, obj in found
                if not selected or (matches_labels(obj, labels) and matches_fields(obj, fields))
            ),
            wanted,
        )
    )
    meta: dict[str, Any] = {"resourceVersion": str(at)}
    if not whole and len(chosen) > q.limit:
        chosen = chosen[: q.limit]
        meta["continue"] = _token(at, chosen[-1][0], res)
        if not selected:
            meta["remainingItemCount"] = len(found) - q.limit
    return {
        "kind": res.list_kind,
        "apiVersion": res.group_version,
        "metadata": meta,
        "items": [copy.deepcopy(obj) for _, obj in chosen],
    }


def _parse(query: Mapping[str, str], res: Resource) -> _Query:
    version = resource_version(query.get("resourceVersion", ""))
    match = query.get("resourceVersionMatch", "")
    token = query.get("continue", "")
    causes = []  # what kube-apiserver's ValidateListOptions refuses, 422
    if match and version is None:
        causes.append(("resourceVersionMatch", FORBIDDEN + "unless resourceVersion is provided"))
    if match and token:
        causes.append(("resourceVersionMatch", FORBIDDEN + "when continue is provided"))
    if match == "Exact" and version == 0:
        causes.append(
            (
                "resourceVersionMatch",
                'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
            )
        )
    elif match not in ("", "NotOlderThan", "Exact"):
        causes.append(
            (
                "resourceVersionMatch",
                f'Unsupported value: "{match}": supported values: "Exact", "NotOlderThan", ""',
            )
        )
    if "sendInitialEvents" in query:
        causes.append(("sendInitialEvents", "Forbidden: sendInitialEvents is forbidden for list"))
    if causes:
        raise invalid("ListOptions.meta.k8s.io", "", causes)
    try:
        limit = max(0, int(query.get("limit") or 0))
        if limit >= 2**63:  # an int64 there
            raise ValueError(limit)
    except ValueError:
        raise bad_request(f"invalid limit {query['limit']!r}") from None
    if not token:
        return _Query(version, match, limit, None)
    if version:  # etcd's check: "" and "0" are no version
        raise bad_request("specifying resource version is not allowed when using continue")
    return _Query(None, "", limit, _untoken(token, res))


def _token(version: int, last: tuple[str, str], res: Resource) -> str:
    """An opaque `continue`, shaped as the API server's: its version and the etcd key the
    next page starts after."""
    key = f"{last[0]}/{last[1]}" if res.namespaced else last[1]
    body = {"v": "meta.k8s.io/v1", "rv": version, "start": key + "\x00"}
    return base64.urlsafe_b64encode(json.dumps(body).encode()).decode().rstrip("=")


def _untoken(token: str, res: Resource) -> tuple[int, tuple[str, str]]:
    try:
        body = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        version, start = body["rv"], body["start"]
        if body["v"] != "meta.k8s.io/v1" or not isinstance(version, int) or version < 1:
            raise ValueError("not a continue token of this server")
        key = start.removesuffix("\x00")
        namespace, _, name = key.rpartition("/") if res.namespaced else ("", "", key)
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as err:
        raise bad_request(f"continue key is not valid: {err}") from None
    return version, (namespace, name)
