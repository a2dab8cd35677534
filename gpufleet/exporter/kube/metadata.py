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
`retry_seconds` with a fresh list (`gpufleet.kube.reflector`). Meanwhile the last view is
kept: labels and device names change rarely, and they only decorate or place what the
kubelet reports now.
"""

import logging
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kubernetes import client

from gpufleet.exporter.core.dra import DRIVER, SliceDevice, slice_devices
from gpufleet.exporter.core.podmeta import PodMeta, pod_labels
from gpufleet.exporter.kube.view import EMPTY_API_VIEW, ApiView
from gpufleet.kube.errors import KubeError, KubeErrorKind
from gpufleet.kube.reflector import CALL_TIMEOUT_SECONDS, Reflector, stop_all

log = logging.getLogger(__name__)
T = TypeVar("T")


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


def _kept(entry: tuple[Any, T] | None) -> T:
    """The record of a (key, record) entry; a malformed object is left out."""
    if entry is None:
        raise ValueError("malformed")
    return entry[1]


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
        core = client.CoreV1Api(api)
        selector = f"spec.nodeName={node_name}" if node_name else ""

        def reflector(name: str, call: Callable[..., Any], reduce: Any) -> Reflector[Any]:
            return Reflector(
                name,
                call,
                reduce,
                on_change=lambda: self._publish(name),
                on_failure=lambda err: self._failed(name, err),
                retry_seconds=retry_seconds,
                max_retry_seconds=retry_seconds,
                list_timeout=CALL_TIMEOUT_SECONDS,
            )

        self._pods = reflector(
            "pods",
            lambda **kw: core.list_pod_for_all_namespaces(field_selector=selector, **kw),
            lambda pod: _kept(pod_meta(pod, labels=labels, allowlist=allowlist)),
        )
        self._slices: Reflector[tuple[SliceDevice, ...]] | None = None
        if dra:
            resource = client.ResourceV1Api(api)
            self._slices = reflector(
                "resourceslices",
                lambda **kw: resource.list_resource_slice(
                    field_selector=f"spec.driver={DRIVER}", **kw
                ),
                lambda found: _kept(slice_entry(found)),
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
            reflector.start()

    def stop(self, timeout_seconds: float = CALL_TIMEOUT_SECONDS) -> None:
        stop_all(self._reflectors(), timeout_seconds)

    def _reflectors(self) -> tuple[Reflector[Any], ...]:
        return (self._pods,) if self._slices is None else (self._pods, self._slices)

    def _publish(self, name: str) -> None:
        """Swap in the view the caches give now, if it differs (called by `name`)."""
        with self._lock:
            devices: dict[tuple[str, str], SliceDevice] = {}
            if self._slices is not None:
                for found in self._slices.mapping().values():
                    devices.update(((d.pool, d.name), d) for d in found)
            view = ApiView(pods=self._pods.mapping(), devices=devices)
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
