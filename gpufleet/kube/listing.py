"""Lists as client-go's pager makes them: in pages of PAGE_SIZE objects, each read and used
before the next is asked for, so a list of 100,000 pods is never decoded whole at once.

The API server pages a list from etcd (`resourceVersion` unset, or a resource without the
watch cache); its watch cache answers "0" whole, ignoring the limit. Every page shows the
version of the first; should the server no longer have it by the next page (410), the
list is read once more, whole, at the version asked, as client-go's pager falls back.
"""

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from gpufleet.kube.errors import KubeError, KubeErrorKind, kube_call

R = TypeVar("R")
PAGE_SIZE = 500  # client-go's pager


class _PagesExpired(Exception):
    """The server no longer has the list's version: the next page is 410."""


class Pages:
    """One list, page by page. The first page is asked for at once, so `version` (the
    list's resourceVersion) and `paged` (more pages follow) are known before iterating;
    iterating gives every object, asking for each next page as the last is used up."""

    def __init__(
        self,
        call: Callable[..., Any],
        *,
        resource_version: str,
        limit: int,
        timeout: float | None,
        stopped: Callable[[], bool] = lambda: False,
    ) -> None:
        self._call = call
        self._limit = limit
        self._timeout = timeout
        self._stopped = stopped
        self._first: dict[str, Any] | None = self._page(resource_version=resource_version)
        self.version = _meta(self._first, "resourceVersion")
        self.paged = bool(_meta(self._first, "continue"))

    def __iter__(self) -> Iterator[Any]:
        body, self._first = self._first, None
        if body is None:
            raise RuntimeError("a list's pages are read once")
        while True:
            items = body.get("items") or []
            if not isinstance(items, list):
                raise KubeError(KubeErrorKind.INVALID, "answer is not a list")
            token = _meta(body, "continue")
            yield from items
            if not token:
                return
            if self._stopped():  # its reader is stopping: no more pages asked for
                raise KubeError(KubeErrorKind.UNAVAILABLE, "stopped between pages")
            try:
                body = self._page(_continue=token)  # no resourceVersion: the token has it
            except KubeError as err:
                if err.status == 410:
                    raise _PagesExpired(str(err)) from None
                raise

    def _page(self, **query: str) -> dict[str, Any]:
        options: dict[str, Any] = {k: v for k, v in query.items() if v}
        if self._limit:
            options["limit"] = self._limit
        if self._timeout is not None:
            options["_request_timeout"] = self._timeout
        response = kube_call(lambda: self._call(_preload_content=False, **options))
        return json_object(response.data)


def list_in_pages(
    call: Callable[..., Any],
    use: Callable[[Pages], R],
    *,
    resource_version: str = "",
    limit: int = PAGE_SIZE,
    timeout: float | None = None,
    stopped: Callable[[], bool] = lambda: False,
) -> R:
    """`use(pages)` over the list `call` (a client's list method) answers, in pages of
    `limit` (0: whole) at `resource_version`; once more, whole, where the version is lost
    between pages. `timeout`: each call's, else the client's own; `stopped`: asked before
    each next page. Raises KubeError."""

    def pages(limit: int) -> Pages:
        return Pages(
            call, resource_version=resource_version, limit=limit, timeout=timeout, stopped=stopped
        )

    try:
        return use(pages(limit))
    except _PagesExpired:
        return use(pages(0))


def list_objects(
    call: Callable[..., Any], *, timeout: float | None = None
) -> tuple[list[Any], str]:
    """The newest objects of a list call, as plain JSON, and the list's resourceVersion.
    Raises KubeError. The client's models for a thousand pods cost more CPU than the rest
    of a tick."""
    return list_in_pages(call, lambda pages: (list(pages), pages.version), timeout=timeout)


def version_unavailable(err: KubeError) -> bool:
    """A list at a resourceVersion failed for the version: the server no longer has it
    (410) or has not reached it (504, ResourceVersionTooLarge). List the newest instead."""
    return err.status == 410 or "ResourceVersionTooLarge" in err.causes


def json_object(data: bytes | str) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except ValueError as err:
        raise KubeError(KubeErrorKind.INVALID, f"answer is not JSON: {err}") from None
    except RecursionError:  # nested deeper than the parser goes: no API server answers that
        raise KubeError(KubeErrorKind.INVALID, "answer is not JSON: nested too deep") from None
    if not isinstance(body, Mapping):
        raise KubeError(KubeErrorKind.INVALID, "answer is not a JSON object")
    return body  # type: ignore[return-value]


def _meta(body: Mapping[str, Any], key: str) -> str:
    meta = body.get("metadata") or {}
    value = meta.get(key) if isinstance(meta, Mapping) else None
    if value is None:
        return ""
    if not isinstance(value, str):
        raise KubeError(KubeErrorKind.INVALID, f"answer is not a list: metadata.{key}")
    return value
