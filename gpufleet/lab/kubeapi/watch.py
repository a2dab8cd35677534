"""Watches on the fake API server: `GET <collection>?watch=1`, as kube-apiserver streams them.

The answer is one JSON object per line, `{"type": ..., "object": ...}`, kept open until
`timeoutSeconds` (default 30 min) or the server stops. Semantics the official client and
informers rely on:
- `resourceVersion` unset or "0": first an ADDED event for every object that matches now,
  then the changes after them; any other value: only the changes after that version (a
  version the server has not reached: 504 `ResourceVersionTooLarge`, as from the watch
  cache);
- an object entering the selectors is ADDED, one leaving them DELETED (as the watch cache
  does), otherwise the event's own type;
- a version older than the store's event window gets an ERROR event carrying a 410
  `Expired` Status, and the stream ends: the client must list again;
- with `allowWatchBookmarks=true`, a BOOKMARK carrying only the newest resourceVersion
  the watch has passed (any resource's write moves it) each `bookmark_seconds` without
  an event, as kube-apiserver's watch cache sends one about a minute apart: a client
  resumes from there, not from its last event older than the store's window;
- a streaming list (`sendInitialEvents=true`, which needs `resourceVersionMatch=
  NotOlderThan`): an ADDED event for every object that matches now, whatever the
  `resourceVersion`, then, where bookmarks are allowed, a BOOKMARK annotated
  `k8s.io/initial-events-end: "true"` at their version, then the changes after it. A
  watch from "" or "0" asking neither option is one too, as kube-apiserver defaults it;
  `sendInitialEvents=false` sends no ADDED events. With `watch_list` off (the WatchList
  gate, off by default in 1.33) the option is 422 Invalid, and a watch from "" or "0"
  starts with the ADDED events and no bookmark marking their end.
"""

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from gpufleet.core.selectors import matches_fields, matches_labels
from gpufleet.lab.kubeapi.listing import resource_version, too_large
from gpufleet.lab.kubeapi.objects import ApiError, bad_request, invalid, selectors
from gpufleet.lab.kubeapi.resources import Resource, selectable_fields
from gpufleet.lab.kubeapi.store import ObjectStore

DEFAULT_TIMEOUT_SECONDS = 1800.0
POLL_SECONDS = 0.02  # how soon a write reaches the open watches
BOOKMARK_SECONDS = 60.0
INITIAL_EVENTS_END = {"k8s.io/initial-events-end": "true"}


def is_watch(request: web.Request) -> bool:
    return request.method == "GET" and _flag(request.query.get("watch", ""))


async def serve_watch(
    store: ObjectStore,
    request: web.Request,
    res: Resource,
    namespace: str | None,
    *,
    closing: Callable[[], bool],
    bookmark_seconds: float = BOOKMARK_SECONDS,
    watch_list: bool = True,
    started: Callable[[], None] = lambda: None,
    served: Callable[[], bool] = lambda: True,
) -> web.StreamResponse:
    """Stream the watch; ApiError (400, 422) before anything is sent for a bad query."""
    query = request.query
    labels, fields = selectors(
        query.get("labelSelector", ""), query.get("fieldSelector", ""), selectable_fields(res)
    )
    version = resource_version(query.get("resourceVersion", ""))
    if version and version > int(store.resource_version):
        raise too_large(version, int(store.resource_version))
    timeout = _timeout(query.get("timeoutSeconds", ""))
    bookmarks = _flag(query.get("allowWatchBookmarks", ""))
    send, marked = _initial_events(query, legacy=not version, enabled=watch_list)

    def matches(obj: dict[str, Any] | None) -> bool:
        return obj is not None and matches_labels(obj, labels) and matches_fields(obj, fields)

    initial: list[dict[str, Any]] = []
    if send:
        initial = [o for o in store.list(res, namespace) if matches(o)]
    since = version if version and not send else int(store.resource_version)
    started()
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    sent_at = loop.time()
    try:
        for obj in initial:
            await _send(response, "ADDED", obj)
        if marked and bookmarks:
            await _send(response, "BOOKMARK", _bookmark(res, since, INITIAL_EVENTS_END))
        while not closing() and served() and loop.time() < deadline and _connected(request):
            events = store.events_since(since)
            if events is None:
                expired = ApiError(
                    code=410, reason="Expired", message=f"too old resource version: {since}"
                )
                await _send(response, "ERROR", expired.status())
                break
            for event in events:
                since = event.version
                if (event.group, event.plural) != (res.group, res.plural):
                    continue
                if namespace is not None and event.namespace != namespace:
                    continue
                kind = _visible(event.type, matches(event.previous), matches(event.object))
                if kind:
                    await _send(response, kind, event.object)
                    sent_at = loop.time()
            if bookmarks and loop.time() - sent_at >= bookmark_seconds:
                await _send(response, "BOOKMARK", _bookmark(res, since))
                sent_at = loop.time()
            await asyncio.sleep(POLL_SECONDS)
        await response.write_eof()
    except (ConnectionResetError, asyncio.CancelledError):
        pass  # the client went away, or the server is stopping
    return response


def _connected(request: web.Request) -> bool:
    """Whether the client is still there: aiohttp cancels no handler when it goes, and a
    quiet collection writes nothing that would fail, so a watch would outlive it."""
    transport = request.transport
    return transport is not None and not transport.is_closing()


def _bookmark(res: Resource, version: int, annotations: dict[str, str] | None = None) -> dict:
    meta: dict[str, Any] = {"resourceVersion": str(version)}
    if annotations:
        meta["annotations"] = annotations
    return {"kind": res.kind, "apiVersion": res.group_version, "metadata": meta}


def _flag(value: str) -> bool:
    return value in ("1", "true", "True")


def _initial_events(query: Mapping[str, str], *, legacy: bool, enabled: bool) -> tuple[bool, bool]:
    """Whether a watch starts with an ADDED event for each object, and whether a bookmark
    marks their end (where bookmarks are allowed); 422 where kube-apiserver's validation
    of a watch's options refuses them. With the WatchList gate on, a watch from "" or "0"
    asking neither is defaulted to a streaming list, as SetListOptionsDefaults does."""
    match = query.get("resourceVersionMatch", "")
    asked = "sendInitialEvents" in query
    causes = []
    if asked and not enabled:
        causes.append(
            (
                "sendInitialEvents",
                "Forbidden: sendInitialEvents is forbidden for watch unless the WatchList "
                "feature gate is enabled",
            )
        )
    elif asked and match != "NotOlderThan":
        causes.append(
            (
                "resourceVersionMatch",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to "
                "NotOlderThan",
            )
        )
    elif match and not asked:
        causes.append(
            (
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden for watch unless "
                "sendInitialEvents is provided",
            )
        )
    if causes:
        raise invalid("ListOptions.meta.k8s.io", "", causes)
    if asked:
        send = _flag(query["sendInitialEvents"])
        return send, send
    if enabled and legacy:
        return True, True
    return legacy, False


def _visible(kind: str, matched_before: bool, matches_now: bool) -> str:
    """The event type a watch shows for a write, "" for none (see the module docstring)."""
    if kind == "DELETED":
        return kind if matched_before else ""
    if matched_before and matches_now:
        return kind
    if matches_now:
        return "ADDED"
    return "DELETED" if matched_before else ""


def _timeout(value: str) -> float:
    if not value:
        return DEFAULT_TIMEOUT_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        raise bad_request(f"invalid timeoutSeconds {value!r}") from None
    return seconds if seconds > 0 else DEFAULT_TIMEOUT_SECONDS


async def _send(response: web.StreamResponse, kind: str, obj: dict[str, Any]) -> None:
    await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
