"""Delegated authentication and authorization of an aggregated API server, as pure functions.

kube-apiserver publishes how its aggregator proxies requests in the ConfigMap
`kube-system/extension-apiserver-authentication`: the CA that signs the aggregator's
proxy client certificate (`requestheader-client-ca-file`), the certificate names allowed
to assert users (`requestheader-allowed-names`), and the headers that carry the user
(`requestheader-username-headers`, `-group-headers`, `-extra-headers-prefix`), each a JSON
array. A request whose client certificate that CA verified, with an allowed name, is
trusted for the user in those headers; what the user may do is a SubjectAccessReview.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

NAMESPACE = "kube-system"
CONFIGMAP = "extension-apiserver-authentication"


class AuthConfigError(ValueError):
    """The ConfigMap lacks what a request-header authenticator needs; names the key."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestHeaderConfig:
    client_ca: str  # PEM
    allowed_names: tuple[str, ...]  # empty: any certificate the CA signed
    username_headers: tuple[str, ...]
    group_headers: tuple[str, ...]
    extra_prefixes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class UserInfo:
    name: str
    groups: tuple[str, ...]
    extra: tuple[tuple[str, tuple[str, ...]], ...]  # sorted (key, values)


def parse_config(data: Mapping[str, str]) -> RequestHeaderConfig:
    where = f"ConfigMap {NAMESPACE}/{CONFIGMAP}"
    ca = data.get("requestheader-client-ca-file", "")
    if "BEGIN CERTIFICATE" not in ca:
        raise AuthConfigError(f"{where}: requestheader-client-ca-file holds no PEM certificate")
    config = RequestHeaderConfig(
        client_ca=ca,
        allowed_names=_list(data, "requestheader-allowed-names", where),
        username_headers=_list(data, "requestheader-username-headers", where),
        group_headers=_list(data, "requestheader-group-headers", where),
        extra_prefixes=_list(data, "requestheader-extra-headers-prefix", where),
    )
    if not config.username_headers:
        raise AuthConfigError(f"{where}: requestheader-username-headers is empty")
    return config


def _list(data: Mapping[str, str], key: str, where: str) -> tuple[str, ...]:
    text = data.get(key, "") or "[]"
    try:
        values = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise AuthConfigError(f"{where}: {key} is not a JSON array: {text[:200]!r}") from None
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise AuthConfigError(f"{where}: {key} is not a JSON array of strings: {text!r}")
    return tuple(values)


ANONYMOUS, AUTHENTICATED, UNAUTHENTICATED = (
    "system:anonymous",
    "system:authenticated",
    "system:unauthenticated",
)


def name_allowed(config: RequestHeaderConfig, common_name: str) -> bool:
    return not config.allowed_names or common_name in config.allowed_names


def user_from_headers(
    config: RequestHeaderConfig, headers: Mapping[str, list[str]]
) -> UserInfo | None:
    """The user the trusted proxy asserts; None when it names none. `headers`: lowercased
    name -> values (a header may repeat). Extra keys are lowercased and percent-decoded."""
    name = next(
        (v[0] for h in config.username_headers if (v := headers.get(h.lower())) and v[0]), ""
    )
    if not name:
        return None
    groups = tuple(g for h in config.group_headers for g in headers.get(h.lower(), ()))
    # As every Kubernetes API server's authenticator chain does (AuthenticatedGroupAdder):
    # the aggregator's own discovery and OpenAPI requests name no group, and RBAC grants
    # discovery to system:authenticated; without it they were 403, and discovery of the
    # group went stale (kubectl's warnings, namespaces stuck Terminating).
    if name != ANONYMOUS and not {AUTHENTICATED, UNAUTHENTICATED} & set(groups):
        groups += (AUTHENTICATED,)
    extra: dict[str, list[str]] = {}
    for prefix in (p.lower() for p in config.extra_prefixes):
        for header, values in headers.items():
            if header.startswith(prefix) and len(header) > len(prefix):
                extra.setdefault(unquote(header[len(prefix) :]).lower(), []).extend(values)
    return UserInfo(name, groups, tuple(sorted((k, tuple(v)) for k, v in extra.items())))


def resource_attributes(namespace: str, metric: str, group: str, version: str) -> dict[str, str]:
    """What a metric request asks: `list` (a GET with no name) on the metric as a resource."""
    return {
        "namespace": namespace,
        "verb": "list",
        "group": group,
        "version": version,
        "resource": metric,
    }


def access_review(user: UserInfo, attributes: Mapping[str, str], *, resource: bool) -> dict:
    """The SubjectAccessReview body for `user` doing `attributes`."""
    spec: dict[str, Any] = {
        "user": user.name,
        "groups": list(user.groups),
        "extra": {k: list(v) for k, v in user.extra},
    }
    spec["resourceAttributes" if resource else "nonResourceAttributes"] = dict(attributes)
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def forbidden_message(user: UserInfo, attributes: Mapping[str, str], *, resource: bool) -> str:
    """kube-apiserver's 403 text."""
    if not resource:
        return (
            f'forbidden: User "{user.name}" cannot {attributes["verb"]} path "{attributes["path"]}"'
        )
    res, group = attributes["resource"], attributes["group"]
    return (
        f'{res}.{group} is forbidden: User "{user.name}" cannot {attributes["verb"]} '
        f'resource "{res}" in API group "{group}" in the namespace "{attributes["namespace"]}"'
    )
