"""Pod labels and UIDs, and the DRA driver's devices, from the Kubernetes API.

Lists this node's pods (field selector `spec.nodeName`, as dcgm-exporter's informer) and,
with DRA, the `gpu.nvidia.com` ResourceSlices, every `refresh_seconds` in a background
thread, and publishes an immutable `ApiView` by swapping one reference. A view equal to the
last one is not republished, so the collector's attribution index is rebuilt only when
something changed. Never per scrape or per collection (dcgm-exporter's informers are the
model; a list every few seconds costs one request per node where a watch would cost a held
connection).

On failure the last good view is kept: labels and device names change rarely, and they only
decorate or place what the kubelet reports now. Failures are counted by kind and logged once
per change of state.
"""

import json
import logging
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from gpufleet.exporter.core.dra import DRIVER, SliceDevice, slice_devices
from gpufleet.exporter.core.podmeta import PodMeta, pod_labels
from gpufleet.kube.errors import KubeError, KubeErrorKind, kube_call

log = logging.getLogger(__name__)
CALL_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiView:
    """One successful refresh: this node's pods and the DRA driver's devices."""

    pods: Mapping[tuple[str, str], PodMeta] = field(default_factory=dict)  # (ns, name)
    devices: Mapping[tuple[str, str], SliceDevice] = field(default_factory=dict)  # (pool, name)


EMPTY_API_VIEW = ApiView()


def pods_of(
    pod_list: Mapping[str, Any], *, labels: bool, allowlist: tuple[re.Pattern[str], ...]
) -> dict[tuple[str, str], PodMeta]:
    """(namespace, name) -> PodMeta from a PodList (JSON); labels only when `labels`."""
    pods = {}
    for item in pod_list.get("items") or ():
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict):
            continue  # one malformed item costs only itself
        raw = meta.get("labels") if labels else None
        raw = raw if isinstance(raw, dict) else {}
        served = {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}
        uid = meta.get("uid")
        pods[(str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = PodMeta(
            uid=uid if isinstance(uid, str) and uid else None,
            labels=pod_labels(served, allowlist),
        )
    return pods


def devices_of(slice_list: Mapping[str, Any]) -> dict[tuple[str, str], SliceDevice]:
    """(pool, device name) -> SliceDevice from a ResourceSliceList (JSON)."""
    return {
        (device.pool, device.name): device
        for item in slice_list.get("items") or ()
        for device in slice_devices(item)
    }


class KubeMetadataWatcher:
    """Keeps an `ApiView` fresh from a background thread; `view()` is lock-free."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        node_name: str,
        labels: bool,
        allowlist: tuple[re.Pattern[str], ...] = (),
        dra: bool,
        refresh_seconds: float = 5.0,
    ) -> None:
        self._core = client.CoreV1Api(api)
        self._resource = client.ResourceV1Api(api)
        self._node_name = node_name
        self._labels = labels
        self._allowlist = allowlist
        self._dra = dra
        self._refresh_seconds = refresh_seconds
        self._view = EMPTY_API_VIEW
        self._errors = dict.fromkeys(KubeErrorKind, 0)
        self._errors_lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._state = "starting"  # "ok" or the failure kind last logged
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def view(self) -> ApiView:
        return self._view

    def errors(self) -> dict[str, int]:
        """Failures so far by kind (every kind present, from 0)."""
        with self._errors_lock:
            return {str(kind): count for kind, count in self._errors.items()}

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("KubeMetadataWatcher already started")
        if not self._node_name:
            log.warning("NODE_NAME is not set: listing the pods of every node for their labels")
        self._thread = threading.Thread(target=self._run, name="kube-metadata", daemon=True)
        self._thread.start()

    def stop(self, timeout_seconds: float = CALL_TIMEOUT_SECONDS) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout_seconds)

    def refresh_now(self) -> ApiView:
        """Refresh in the caller's thread and return the view. Never raises."""
        with self._refresh_lock:
            self._refresh_locked()
        return self._view

    def _run(self) -> None:
        wait = 0.0
        while not self._stopping.wait(wait):
            with self._refresh_lock:
                self._refresh_locked()
            wait = self._refresh_seconds

    def _refresh_locked(self) -> None:
        try:
            pods = self._list_pods()
            devices = self._list_devices() if self._dra else {}
        except KubeError as err:
            with self._errors_lock:
                self._errors[err.kind] += 1
            if self._state != err.kind:
                log.warning(
                    "Kubernetes API list failing; keeping the last pod labels and DRA devices",
                    extra={"fields": {"kind": str(err.kind), "error": str(err)}},
                )
                self._state = err.kind
            return
        view = ApiView(pods=pods, devices=devices)
        if view != self._view:
            self._view = view
        if self._state != "ok":
            log.info("Kubernetes API list ok", extra={"fields": {"after": self._state}})
            self._state = "ok"

    def _list_pods(self) -> dict[tuple[str, str], PodMeta]:
        selector = f"spec.nodeName={self._node_name}" if self._node_name else ""
        body = self._get_json(
            lambda: self._core.list_pod_for_all_namespaces(
                field_selector=selector,
                _preload_content=False,
                _request_timeout=CALL_TIMEOUT_SECONDS,
            )
        )
        return pods_of(body, labels=self._labels, allowlist=self._allowlist)

    def _list_devices(self) -> dict[tuple[str, str], SliceDevice]:
        body = self._get_json(
            lambda: self._resource.list_resource_slice(
                field_selector=f"spec.driver={DRIVER}",
                _preload_content=False,
                _request_timeout=CALL_TIMEOUT_SECONDS,
            )
        )
        return devices_of(body)

    @staticmethod
    def _get_json(call: Any) -> Mapping[str, Any]:
        """The raw JSON body: lighter than the client's models, and a field the models
        would reject (a newer API version's) does not cost the whole list."""
        response = kube_call(call)
        try:
            body = json.loads(response.data)
        except ValueError as err:
            raise KubeError(KubeErrorKind.INVALID, f"list answer is not JSON: {err}") from None
        if not isinstance(body, dict):
            raise KubeError(KubeErrorKind.INVALID, "list answer is not a JSON object")
        return body
