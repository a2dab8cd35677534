"""A cluster's custom objects, listed and watched by one call that takes what the typed
APIs' list methods take, `send_initial_events` included.

The official client's `CustomObjectsApi` has no `send_initial_events`, so a reflector of
custom resources (GPUAutoscalers, Kueue's Workloads) could only list them, one answer
decoded whole. A streaming list is asked here as that client would ask any watch: the
same request, built by its `ApiClient` (host, token, user agent), with the one option
more; a failure raises the same `ApiException`."""

from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

# a streaming list's keywords -> their query names (kube-apiserver's ListOptions)
_QUERY = {
    "watch": "watch",
    "resource_version": "resourceVersion",
    "resource_version_match": "resourceVersionMatch",
    "send_initial_events": "sendInitialEvents",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "timeout_seconds": "timeoutSeconds",
    "label_selector": "labelSelector",
    "field_selector": "fieldSelector",
}


def cluster_custom_objects(
    api: client.ApiClient, group: str, version: str, plural: str
) -> Callable[..., Any]:
    """The list method of one custom resource across the cluster, as
    `CustomObjectsApi.list_cluster_custom_object` with its path bound, that also takes
    `send_initial_events` (a watch's raw answer, `_preload_content=False`, only)."""
    custom = client.CustomObjectsApi(api)
    path = f"/apis/{group}/{version}/{plural}"

    def call(**kw: Any) -> Any:
        if "send_initial_events" not in kw:
            return custom.list_cluster_custom_object(group, version, plural, **kw)
        return _streaming_list(api, path, **kw)

    return call


def _streaming_list(
    api: client.ApiClient,
    path: str,
    *,
    _preload_content: bool = True,
    _request_timeout: Any = None,
    **kw: Any,
) -> Any:
    """The watch's raw answer (urllib3's), unread. Raises TypeError for a keyword it does not
    know, as the client's own methods do, and ApiException for an answer that is not 2xx."""
    unknown = sorted(set(kw) - set(_QUERY))
    if unknown or _preload_content or not kw.get("watch"):
        raise TypeError(f"a streaming list is a raw watch; not supported: {unknown or kw}")
    query = [(_QUERY[key], value) for key, value in kw.items() if value is not None]
    request = api.param_serialize(
        method="GET",
        resource_path=path,
        query_params=query,
        header_params={"Accept": "application/json;stream=watch"},
        auth_settings=["BearerToken"],
    )
    answer = api.call_api(*request, _request_timeout=_request_timeout)
    if not 200 <= answer.status <= 299:
        answer.read()
        raise ApiException.from_response(http_resp=answer, body=None, data=None)
    return answer.response
