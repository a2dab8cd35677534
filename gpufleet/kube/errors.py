"""The official client's failures as a few kinds a daemon counts and acts on."""

import json
from collections.abc import Callable
from enum import StrEnum
from typing import TypeVar

from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

T = TypeVar("T")


class KubeErrorKind(StrEnum):
    """The `kind` label of a daemon's Kubernetes error counter."""

    NOT_FOUND = "not_found"  # 404
    CONFLICT = "conflict"  # 409: stale resourceVersion or already exists
    INVALID = "invalid"  # 400/415/422: the request is wrong
    FORBIDDEN = "forbidden"  # 401/403: RBAC
    UNAVAILABLE = "unavailable"  # 5xx, 429, connection refused, timeout


class KubeError(Exception):
    """`causes`: the reasons of the Status's `details.causes` (ResourceVersionTooLarge)."""

    def __init__(
        self,
        kind: KubeErrorKind,
        message: str,
        *,
        status: int = 0,
        causes: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.causes = causes


_BY_STATUS = {
    404: KubeErrorKind.NOT_FOUND,
    409: KubeErrorKind.CONFLICT,
    400: KubeErrorKind.INVALID,
    415: KubeErrorKind.INVALID,
    422: KubeErrorKind.INVALID,
    401: KubeErrorKind.FORBIDDEN,
    403: KubeErrorKind.FORBIDDEN,
}


def kube_call(fn: Callable[[], T]) -> T:
    """Run one client call; its failure becomes a KubeError with a kind and the API's message."""
    try:
        return fn()
    except ApiException as err:
        kind = _BY_STATUS.get(err.status or 0, KubeErrorKind.UNAVAILABLE)
        raise KubeError(kind, _message(err), status=err.status or 0, causes=_causes(err)) from None
    except (HTTPError, OSError) as err:
        raise KubeError(KubeErrorKind.UNAVAILABLE, f"{type(err).__name__}: {err}") from None
    except RecursionError:  # an object nested thousands deep (a preserve-unknown field)
        raise KubeError(KubeErrorKind.UNAVAILABLE, "an answer nested too deeply to read") from None


def _message(err: ApiException) -> str:
    try:
        return f"{err.status}: {json.loads(err.body or '')['message']}"
    except (ValueError, KeyError, TypeError):
        return f"{err.status}: {err.reason}"


def _causes(err: ApiException) -> tuple[str, ...]:
    try:
        causes = json.loads(err.body or "")["details"]["causes"]
        return tuple(c["reason"] for c in causes if isinstance(c.get("reason"), str))
    except (ValueError, KeyError, TypeError, AttributeError):
        return ()
