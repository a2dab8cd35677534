"""Pod labels and UIDs, and the DRA driver's devices, kept from the Kubernetes API.

As dcgm-exporter's informers do, each resource is listed once and then watched from the
list's resourceVersion, in a background thread of its own: this node's pods (field selector
`spec.nodeName`) and, with DRA, the `gpu.nvidia.com` ResourceSlices. Each change updates a
cache of plain records (`PodMeta`, `SliceDevice`, never the API objects) and publishes an
immutable `ApiView` by swapping one reference, only when the view changed (a pod's status
updates change nothing here), so the collector's attribution index is rebuilt only then.
Never per scrape or per collection.

A watch that ends is resumed from the last version seen; a 410 Expired relists; any other
failure is counted by kind, logged once per change of state, and retried after
`retry_seconds` with a fresh list. Meanwhile the last view is kept: labels and device names
change rarely, and they only decorate or place what the kubelet reports now.
"""

import contextlib
import json
import logging
import re
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any

from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines
from urllib3.exceptions import HTTPError

from gpufleet.exporter.core.dra import DRIVER, SliceDevice, slice_devices
from gpufleet.exporter.core.podmeta import PodMeta, pod_labels
from gpufleet.exporter.kube.view import EMPTY_API_VIEW, ApiView
from gpufleet.kube.errors import KubeError, KubeErrorKind, kube_call

log = logging.getLogger(__name__)
CALL_TIMEOUT_SECONDS = 10.0
# The server ends a watch after this; it is resumed at once from the last version seen.
WATCH_SECONDS = 300


def pod_meta(
    pod: Mapping[str, Any], *, labels: bool, allowlist: tuple[re.Pattern[str], ...]
) -> tuple[tuple[str, str], PodMeta] | None:
    """((namespace, name), PodMeta) of a Pod (JSON); labels only when `labels`; None when
    malformed (one bad object costs only itself)."""
    meta = pod.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None
    raw = meta.get("labels") if labels else None
    raw = raw if isinstance(raw, dict) else {}
    served = {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}
    uid = meta.get("uid")
    key = (str(meta.get("namespace") or ""), meta["name"])
    return key, PodMeta(
        uid=uid if isinstance(uid, str) and uid else None, labels=pod_labels(served, allowlist)
    )


def slice_entry(resource_slice: Mapping[str, Any]) -> tuple[str, tuple[SliceDevice, ...]] | None:
    """(name, its gpu.nvidia.com devices) of a ResourceSlice (JSON); None when malformed."""
    meta = resource_slice.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None
    return meta["name"], slice_devices(resource_slice)


class _Expired(Exception):
    """The watch's version is too old (410): list again."""


class _Reflector:
    """List, then watch, one resource into `items` (key -> record); calls `changed(name)`
    after each list and change. Runs in its own thread until `stopping` is set."""

    def __init__(
        self,
        name: str,
        call: Callable[..., Any],
        parse: Callable[[Mapping[str, Any]], tuple[Hashable, Any] | None],
        *,
        changed: Callable[[str], None],
        failed: Callable[[str, KubeError], None],
        stopping: threading.Event,
        retry_seconds: float,
    ) -> None:
        self.name = name
        self.items: dict[Hashable, Any] = {}
        self._call = call
        self._parse = parse
        self._changed = changed
        self._failed = failed
        self._stopping = stopping
        self._retry_seconds = retry_seconds
        self._response: Any = None
        self.thread = threading.Thread(target=self._run, name=f"kube-{name}", daemon=True)

    def interrupt(self) -> None:
        """Unblock a watch read in progress (stop)."""
        response = self._response
        if response is not None:
            with contextlib.suppress(OSError, HTTPError):  # it may have just ended itself
                response.shutdown()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                version = self._list()
                while not self._stopping.is_set():
                    version = self._watch(version)
            except _Expired:
                continue
            except Exception as exc:  # never let the thread die: labels would freeze
                if self._stopping.is_set():
                    return
                if not isinstance(exc, KubeError):
                    exc = KubeError(KubeErrorKind.INVALID, f"{type(exc).__name__}: {exc}")
                self._failed(self.name, exc)
                self._stopping.wait(self._retry_seconds)

    def _list(self) -> str:
        response = kube_call(
            lambda: self._call(_preload_content=False, _request_timeout=CALL_TIMEOUT_SECONDS)
        )
        body = _json_object(response.data)
        items = body.get("items")
        parsed = (self._parse(item) for item in items if isinstance(item, dict)) if items else ()
        self.items = dict(entry for entry in parsed if entry is not None)
        self._changed(self.name)
        return str((body.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, version: str) -> str:
        """Apply the events of one watch; returns the last version seen."""
        self._response = kube_call(
            lambda: self._call(
                watch=True,
                resource_version=version,
                timeout_seconds=WATCH_SECONDS,
                allow_watch_bookmarks=True,
                _preload_content=False,
                _request_timeout=(CALL_TIMEOUT_SECONDS, WATCH_SECONDS + CALL_TIMEOUT_SECONDS),
            )
        )
        try:
            if self._stopping.is_set():  # stop() came before there was a response to shut
                return version
            for event in self._events():
                version = self._apply(event) or version
        finally:
            self._response.release_conn()
            self._response = None
        return version

    def _events(self) -> Iterator[Mapping[str, Any]]:
        try:
            for line in iter_resp_lines(self._response):
                if line:
                    yield _json_object(line)
        except (HTTPError, OSError) as err:
            raise KubeError(KubeErrorKind.UNAVAILABLE, f"watch broken: {err}") from None

    def _apply(self, event: Mapping[str, Any]) -> str:
        kind, obj = event.get("type"), event.get("object")
        if not isinstance(obj, dict):
            return ""
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise _Expired()
            raise KubeError(KubeErrorKind.UNAVAILABLE, f"watch error {code}: {obj.get('message')}")
        entry = self._parse(obj)
        if entry is not None and kind in ("ADDED", "MODIFIED"):
            self.items[entry[0]] = entry[1]
            self._changed(self.name)
        elif entry is not None and kind == "DELETED":
            self.items.pop(entry[0], None)
            self._changed(self.name)
        return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _json_object(data: bytes | str) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except ValueError as err:
        raise KubeError(KubeErrorKind.INVALID, f"answer is not JSON: {err}") from None
    except RecursionError:  # nested deeper than the parser goes: no API server answers that
        raise KubeError(KubeErrorKind.INVALID, "answer is not JSON: nested too deep") from None
    if not isinstance(body, dict):
        raise KubeError(KubeErrorKind.INVALID, "answer is not a JSON object")
    return body


class KubeMetadataWatcher:
    """Keeps an `ApiView` current from background threads; `view()` is lock-free."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        node_name: str,
        labels: bool,
        allowlist: tuple[re.Pattern[str], ...] = (),
        dra: bool,
        retry_seconds: float = 5.0,
    ) -> None:
        self._node_name = node_name
        self._view = EMPTY_API_VIEW
        self._errors = dict.fromkeys(KubeErrorKind, 0)
        self._lock = threading.Lock()  # publishing and the error counts
        self._states: dict[str, str] = {}  # reflector -> "ok" or the failure kind logged
        self._stopping = threading.Event()
        core = client.CoreV1Api(api)
        selector = f"spec.nodeName={node_name}" if node_name else ""
        common = dict(
            changed=self._publish,
            failed=self._failed,
            stopping=self._stopping,
            retry_seconds=retry_seconds,
        )
        self._pods = _Reflector(
            "pods",
            lambda **kw: core.list_pod_for_all_namespaces(field_selector=selector, **kw),
            lambda pod: pod_meta(pod, labels=labels, allowlist=allowlist),
            **common,  # type: ignore[arg-type]
        )
        self._slices: _Reflector | None = None
        if dra:
            resource = client.ResourceV1Api(api)
            self._slices = _Reflector(
                "resourceslices",
                lambda **kw: resource.list_resource_slice(
                    field_selector=f"spec.driver={DRIVER}", **kw
                ),
                slice_entry,
                **common,  # type: ignore[arg-type]
            )

    def view(self) -> ApiView:
        return self._view

    def errors(self) -> dict[str, int]:
        """Failures so far by kind (every kind present, from 0)."""
        with self._lock:
            return {str(kind): count for kind, count in self._errors.items()}

    def start(self) -> None:
        if not self._node_name:
            log.warning("NODE_NAME is not set: watching the pods of every node for their labels")
        for reflector in self._reflectors():
            reflector.thread.start()

    def stop(self, timeout_seconds: float = CALL_TIMEOUT_SECONDS) -> None:
        self._stopping.set()
        for reflector in self._reflectors():
            reflector.interrupt()
        for reflector in self._reflectors():
            if reflector.thread.is_alive():
                reflector.thread.join(timeout_seconds)

    def _reflectors(self) -> tuple[_Reflector, ...]:
        return (self._pods,) if self._slices is None else (self._pods, self._slices)

    def _publish(self, name: str) -> None:
        """Swap in the view the caches give now, if it differs (called by `name`)."""
        with self._lock:
            devices = {}
            if self._slices is not None:
                # the other reflector's thread may be writing: copy in one C call first
                for found in tuple(self._slices.items.values()):
                    devices.update(((d.pool, d.name), d) for d in found)
            view = ApiView(pods=dict(self._pods.items), devices=devices)
            if view != self._view:
                self._view = view
            state, self._states[name] = self._states.get(name), "ok"
        if state not in (None, "ok"):
            log.info("Kubernetes API %s ok again", name)

    def _failed(self, name: str, err: KubeError) -> None:
        with self._lock:
            self._errors[err.kind] += 1
            state, self._states[name] = self._states.get(name), err.kind
        if state != err.kind:
            log.warning(
                "Kubernetes API %s failing; keeping the last pod labels and DRA devices",
                name,
                extra={"fields": {"kind": str(err.kind), "error": str(err)}},
            )
