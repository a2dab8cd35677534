"""The fake API server's object store: CRUD with the API server's bookkeeping and checks.

Every write bumps one cluster-wide `resourceVersion` (a string, as clients must treat it);
an update or patch that carries a stale `metadata.resourceVersion` is a 409; a spec change
bumps `metadata.generation`; the main resource and its `/status` subresource write only
their own half, as for a resource with a status subresource. `uid`s are derived from a
counter, and timestamps come from the injected wall clock, so a run is reproducible.
Every write is also recorded as a watch event (ADDED, MODIFIED, DELETED with the object as
written); the last `EVENT_HISTORY` are kept, as the API server's watch cache keeps a window,
and a watch from a resourceVersion older than that window is told it is expired (410).
Single-threaded: the server's event loop owns it.
"""

import contextlib
import copy
import itertools
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpufleet.core.selectors import matches_fields, matches_labels, selector_string
from gpufleet.lab.kubeapi import validation
from gpufleet.lab.kubeapi.objects import (
    ApiError,
    bad_request,
    conflict,
    invalid,
    json_patch,
    merge_patch,
    not_found,
    selectors,
    strategic_merge_patch,
)
from gpufleet.lab.kubeapi.resources import Resource

_SUBDOMAIN_RULE = "a lowercase RFC 1123 subdomain is required"
GENERATED_BASE_MAX = 63 - 5  # apiserver/pkg/storage/names: a DNS label less 5 random
_UID_NAMESPACE = uuid.UUID("6f1c1b8e-63a4-4c4e-9a57-5bb1c6f0a001")
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
Key = tuple[str, str]  # namespace ("" if cluster-scoped), name
EVENT_HISTORY = 1000
Snapshot = list[tuple[tuple[str, str], dict[str, Any]]]  # ((namespace, name), object), sorted


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchEvent:
    """One write as a watch sees it: `object` is the object as written (deleted: as last
    stored, with the deletion's resourceVersion), `previous` as it was before (None when
    added), so a watch can tell an object entering or leaving its selectors."""

    version: int
    type: str  # ADDED, MODIFIED, DELETED
    group: str
    plural: str
    namespace: str
    object: dict[str, Any]
    previous: dict[str, Any] | None = None


def timestamp(seconds: float) -> str:
    """RFC 3339 in UTC with second precision, as `metav1.Time` serialises."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ObjectStore:
    """Objects by resource, namespace and name, as plain JSON dicts."""

    def __init__(
        self, *, clock: Callable[[], float] = time.time, event_history: int = EVENT_HISTORY
    ) -> None:
        self._clock = clock
        # By (group, plural), then Key: a list or a page reads its resource's objects only,
        # not every object the store holds.
        self._objects: dict[tuple[str, str], dict[Key, dict[str, Any]]] = {}
        self._version = 0
        self._events: deque[WatchEvent] = deque(maxlen=event_history)

    @property
    def resource_version(self) -> str:
        return str(self._version)

    # --- reads ---

    def get(self, res: Resource, namespace: str, name: str) -> dict[str, Any]:
        obj = self._of(res).get(self._key(res, namespace, name))
        if obj is None:
            raise not_found(res.plural, name, res.group)
        return copy.deepcopy(obj)

    def list(
        self,
        res: Resource,
        namespace: str | None,
        *,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[dict[str, Any]]:
        """Objects of `res` (in `namespace`, or everywhere when None), by namespace and name."""
        labels, fields = selectors(label_selector, field_selector)
        out = []
        for (ns, _), obj in sorted(self._of(res).items()):
            if namespace is not None and ns != namespace:
                continue
            if matches_labels(obj, labels) and matches_fields(obj, fields):
                out.append(copy.deepcopy(obj))
        return out

    def objects_at(self, res: Resource, namespace: str | None, version: int) -> "Snapshot | None":
        """The objects of `res` (in `namespace`, or everywhere when None) as they were at
        `version`, by (namespace, name), as etcd keeps past revisions; None once the event
        window no longer reaches back that far (etcd has compacted it). Not copies."""
        events = self.events_since(version)
        if events is None:
            return None
        found = {
            (ns, name): obj
            for (ns, name), obj in self._of(res).items()
            if namespace is None or ns == namespace
        }
        for event in reversed(events):  # undo each later write, newest first
            if (event.group, event.plural) != (res.group, res.plural):
                continue
            if namespace is not None and event.namespace != namespace:
                continue
            key = (event.namespace, event.object["metadata"]["name"])
            if event.previous is None:
                found.pop(key, None)
            else:
                found[key] = event.previous
        return sorted(found.items())

    def events_since(self, version: int) -> tuple[WatchEvent, ...] | None:
        """Every event after `version`, oldest first; None when some of them are no longer
        kept (the watch must list again: 410 Expired)."""
        # Every write is one event, one version after the last: the newest `newer` events
        # are the ones after `version`, read from the end (an open watch asks each poll).
        newer = self._version - version
        if newer <= 0:
            return ()
        if newer > len(self._events):
            return None
        return tuple(reversed(tuple(itertools.islice(reversed(self._events), newer))))

    def _record(
        self, kind: str, res: Resource, obj: dict[str, Any], previous: dict[str, Any] | None
    ) -> None:
        namespace = obj["metadata"].get("namespace", "") if res.namespaced else ""
        self._events.append(
            WatchEvent(
                version=self._version,
                type=kind,
                group=res.group,
                plural=res.plural,
                namespace=namespace,
                object=copy.deepcopy(obj),
                previous=previous,
            )
        )

    @contextlib.contextmanager
    def rolled_back(self) -> Iterator[None]:
        """Every write made within is undone at its end: a dry run's."""
        objects = {kind: dict(each) for kind, each in self._objects.items()}
        version, events = self._version, self._events.copy()
        try:
            yield
        finally:
            self._objects, self._version, self._events = objects, version, events

    # --- writes ---

    def create(self, res: Resource, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a new object. 409 AlreadyExists, 404 for a missing namespace, 422 for a bad
        name or kind."""
        _decodes(res, obj)
        obj = copy.deepcopy(obj)
        meta = obj["metadata"] = obj.get("metadata") or {}
        if res.namespaced and meta.get("namespace") not in (None, "", namespace):
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        generate = meta.get("generateName")
        if generate and not validation.generate_name_fits(generate):
            raise invalid(
                res.kind,
                "",
                [("metadata.generateName", f"Invalid value: {generate!r}: {_SUBDOMAIN_RULE}")],
            )
        if not meta.get("name") and generate:
            # The apiserver's name generator keeps at most 58 characters of the base.
            base = generate[:GENERATED_BASE_MAX]
            meta["name"] = f"{base}{self._version + 1:05x}"
        name = meta.get("name") or ""
        self._check_new(res, namespace, name, obj)
        _refused(res, name, obj)  # decoded above
        self._version += 1
        meta.update(
            name=name,
            uid=str(uuid.uuid5(_UID_NAMESPACE, str(self._version))),
            resourceVersion=str(self._version),
            creationTimestamp=timestamp(self._clock()),
            generation=1,
        )
        if res.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        obj["apiVersion"], obj["kind"] = res.group_version, res.kind
        self._of(res)[self._key(res, namespace, name)] = obj
        self._record("ADDED", res, obj, None)
        return copy.deepcopy(obj)

    def replace(
        self,
        res: Resource,
        namespace: str,
        name: str,
        obj: dict[str, Any],
        *,
        subresource: str = "",
    ) -> dict[str, Any]:
        """PUT: the whole object (or its status). 409 on a stale resourceVersion; 422
        without one where the kind allows no unconditional update (a Lease, a custom
        resource: `AllowUnconditionalUpdate` is false in their strategies)."""
        _decodes(res, obj)
        current = self.get(res, namespace, name)
        meta = obj.get("metadata") or {}
        if meta.get("name") not in (None, "", name):
            raise bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL "
                f"({name})"
            )
        wanted = meta.get("resourceVersion")
        if not wanted and (not res.builtin or res.plural == "leases"):
            raise invalid(
                res.kind,
                name,
                [
                    (
                        "metadata.resourceVersion",
                        "Invalid value: 0x0: must be specified for an update",
                    )
                ],
            )
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            raise conflict(res.plural, res.group, name)
        return self._write(res, current, obj, subresource=subresource)

    def patch(
        self,
        res: Resource,
        namespace: str,
        name: str,
        patch: Any,
        *,
        content_type: str,
        subresource: str = "",
    ) -> dict[str, Any]:
        """PATCH with one of the three patch types; 415 for strategic merge on a CRD."""
        current = self.get(res, namespace, name)
        if content_type == JSON_PATCH:
            patched = json_patch(current, patch)
        elif content_type == MERGE_PATCH:
            patched = merge_patch(current, patch)
        elif content_type == STRATEGIC_MERGE_PATCH and res.builtin:
            patched = strategic_merge_patch(current, patch)
        else:
            raise ApiError(
                code=415,
                reason="UnsupportedMediaType",
                message=(
                    f"the body of the request was in an unknown format - accepted media types "
                    f"include: {JSON_PATCH}, {MERGE_PATCH}"
                    + (f", {STRATEGIC_MERGE_PATCH}" if res.builtin else "")
                ),
            )
        meta = patch.get("metadata") if isinstance(patch, dict) else None
        wanted = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            raise conflict(res.plural, res.group, name)
        return self._write(res, current, patched, subresource=subresource)

    def mark_deleting(self, res: Resource, namespace: str, name: str) -> dict[str, Any]:
        """Graceful deletion: set `metadata.deletionTimestamp` (once) and keep the object
        until its owner (the lab's kubelet) deletes it, as the API server does for pods."""
        current = self.get(res, namespace, name)
        if current["metadata"].get("deletionTimestamp"):
            return current
        previous = copy.deepcopy(current)
        self._version += 1
        current["metadata"]["deletionTimestamp"] = timestamp(self._clock())
        current["metadata"]["resourceVersion"] = str(self._version)
        self._of(res)[self._key(res, namespace, name)] = current
        self._record("MODIFIED", res, current, previous)
        return copy.deepcopy(current)

    def delete(self, res: Resource, namespace: str, name: str) -> dict[str, Any]:
        previous = self.get(res, namespace, name)
        del self._of(res)[self._key(res, namespace, name)]
        self._version += 1
        obj = copy.deepcopy(previous)
        obj["metadata"]["resourceVersion"] = str(self._version)
        self._record("DELETED", res, obj, previous)
        return obj

    # --- the scale subresource ---

    def get_scale(self, res: Resource, namespace: str, name: str) -> dict[str, Any]:
        """The object's autoscaling/v1 `Scale`, as the API server builds it."""
        return _scale_of(self.get(res, namespace, name))

    def update_scale(
        self, res: Resource, namespace: str, name: str, scale: Any, *, patch_type: str = ""
    ) -> dict[str, Any]:
        """PUT or PATCH a `Scale`: only `spec.replicas` is written through to the object."""
        current = self.get(res, namespace, name)
        before = _scale_of(current)
        if patch_type:
            apply = {
                JSON_PATCH: json_patch,
                MERGE_PATCH: merge_patch,
                STRATEGIC_MERGE_PATCH: strategic_merge_patch,
            }.get(patch_type)
            if apply is None:
                raise ApiError(code=415, reason="UnsupportedMediaType", message=patch_type)
            scale = apply(before, scale)
        if why := validation.misfit(validation.SCALE_SHAPE, scale):  # the body, or patched
            raise bad_request(f"Scale {name!r}: {why}")
        wanted = (scale.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != before["metadata"]["resourceVersion"]:
            raise conflict(res.plural, res.group, name)
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise invalid(
                "Scale",
                name,
                [
                    (
                        "spec.replicas",
                        f"Invalid value: {replicas!r}: must be greater than or equal to 0",
                    )
                ],
            )
        updated = copy.deepcopy(current)
        updated.setdefault("spec", {})["replicas"] = replicas
        return _scale_of(self._write(res, current, updated))

    # --- internals ---

    def _write(
        self, res: Resource, current: dict[str, Any], obj: dict[str, Any], *, subresource: str = ""
    ) -> dict[str, Any]:
        name = current["metadata"]["name"]
        namespace = current["metadata"].get("namespace", "")
        _decodes(res, obj, name)
        _refused(res, name, obj)
        new = copy.deepcopy(obj)
        if res.group == "apps" and subresource != "status":
            selector = (new.get("spec") or {}).get("selector")
            if selector != (current.get("spec") or {}).get("selector"):
                raise invalid(
                    res.kind,
                    name,
                    [("spec.selector", f"Invalid value: {selector}: field is immutable")],
                )
        if res.status and subresource == "status":
            new = {**current, "status": new.get("status")}
        elif res.status:
            new["status"] = current.get("status")  # the main resource never writes status
        meta = dict(current["metadata"])
        for key in ("labels", "annotations", "finalizers", "ownerReferences"):
            if key in (new.get("metadata") or {}):
                meta[key] = new["metadata"][key]
            else:
                meta.pop(key, None)
        if new.get("spec") != current.get("spec"):
            meta["generation"] = meta.get("generation", 1) + 1
        self._version += 1
        meta["resourceVersion"] = str(self._version)
        new["metadata"] = meta
        new["apiVersion"], new["kind"] = res.group_version, res.kind
        if new.get("status") is None:
            new.pop("status", None)
        self._of(res)[self._key(res, namespace, name)] = new
        self._record("MODIFIED", res, new, current)
        return copy.deepcopy(new)

    def _check_new(self, res: Resource, namespace: str, name: str, obj: dict[str, Any]) -> None:
        if res.group == "rbac.authorization.k8s.io":
            # RBAC names are path segments ("system:discovery"), not DNS subdomains.
            if name in ("", ".", "..") or "/" in name or "%" in name:
                raise invalid(
                    res.kind,
                    name,
                    [("metadata.name", f"Invalid value: {name!r}: may not contain '/' or '%'")],
                )
        elif not validation.is_subdomain(name):
            raise invalid(
                res.kind, name, [("metadata.name", f"Invalid value: {name!r}: {_SUBDOMAIN_RULE}")]
            )
        if res.plural == "pods" and not ((obj.get("spec") or {}).get("containers")):
            raise invalid(res.kind, name, [("spec.containers", "Required value")])
        kind = obj.get("kind")
        if kind and kind != res.kind:
            raise ApiError(
                code=400,
                reason="BadRequest",
                message=f"the kind {kind!r} does not match {res.kind!r}",
            )
        namespaces = self._objects.get(("", "namespaces"), {})
        if res.namespaced and ("", namespace) not in namespaces:
            raise not_found("namespaces", namespace)
        if self._key(res, namespace, name) in self._of(res):
            raise ApiError(
                code=409,
                reason="AlreadyExists",
                message=f'{res.plural} "{name}" already exists',
                details={"name": name, "group": res.group, "kind": res.plural},
            )

    @staticmethod
    def _key(res: Resource, namespace: str, name: str) -> Key:
        return (namespace if res.namespaced else "", name)

    def _of(self, res: Resource) -> dict[Key, dict[str, Any]]:
        return self._objects.setdefault((res.group, res.plural), {})


def _decodes(res: Resource, obj: Any, name: str | None = None) -> None:
    """400 for a body the API server cannot decode as the kind; `name` (else the body's
    own) names it."""
    if why := validation.undecodable(res.plural, res.group, obj, builtin=res.builtin):
        if name is None:
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            named = meta.get("name") if isinstance(meta, dict) else None
            name = named if isinstance(named, str) else ""
        raise bad_request(f"{res.kind} {name!r}: {why}")


def _refused(res: Resource, name: str, obj: dict[str, Any]) -> None:
    """422 for what the API server refuses in a body it decoded."""
    if bad := validation.causes(res.plural, res.group, obj):
        raise invalid(res.kind, name, bad)


def _scale_of(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    selector = spec.get("selector") or {}
    if obj.get("kind") == "ReplicationController":  # a plain map, not a LabelSelector
        selector = {"matchLabels": selector}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": spec.get("replicas", 1)},
        "status": {
            "replicas": status.get("replicas", 0),
            # A CRD's scale subresource names its selector path; LeaderWorkerSet's is
            # status.hpaPodSelector.
            "selector": status.get("hpaPodSelector")
            or selector_string(
                selector.get("matchLabels") or {}, selector.get("matchExpressions") or ()
            ),
        },
    }
