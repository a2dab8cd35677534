"""SubjectAccessReviews answered from the RBAC objects in the store, as kube-apiserver does.

The authorizer chain of a kube-apiserver, minus Node and webhook authorizers: members of
`system:masters` are allowed everything (the privileged-groups authorizer), then RBAC:
ClusterRoleBindings grant their ClusterRole's rules everywhere; RoleBindings grant their
Role's or ClusterRole's resource rules in their own namespace only. Non-resource URLs are
granted by ClusterRoleBindings only. Rules match as `rbac/v1` defines: `*` wildcards,
`resource/subresource`, `resourceNames`, and a trailing `*` in a non-resource URL. Pure.
"""

from collections.abc import Callable, Mapping
from typing import Any

from gpufleet.lab.kubeapi.objects import ApiError

# (plural, namespace or None) -> objects of that kind
Lister = Callable[[str, str | None], list[dict[str, Any]]]
PRIVILEGED_GROUP = "system:masters"


def review(sar: Mapping[str, Any], objects: Lister) -> dict[str, Any]:
    """The SubjectAccessReview `sar` with its `status` filled in; 422 when it is invalid."""
    spec = sar.get("spec") or {}
    user, groups = spec.get("user") or "", list(spec.get("groups") or [])
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if not user and not groups:
        raise _invalid("spec.user: Invalid value: at least one of user or group must be specified")
    if bool(resource) == bool(non_resource):
        raise _invalid(
            "spec.resourceAttributes: Invalid value: exactly one of nonResourceAttributes "
            "and resourceAttributes must be specified"
        )
    allowed, reason = _authorize(user, groups, resource, non_resource, objects)
    out = {
        "kind": "SubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": {"allowed": allowed},
    }
    if reason:
        out["status"]["reason"] = reason
    return out


def authorize(
    user: str, groups: list[str], attributes: Mapping[str, Any], objects: Lister
) -> ApiError | None:
    """A request's authorization, as kube-apiserver's RBAC authorizer gives it: None when
    allowed, else the 403 it answers. `attributes` are a SubjectAccessReview's
    resourceAttributes (verb, group, resource, subresource, namespace, name)."""
    allowed, _ = _authorize(user, groups, attributes, None, objects)
    if allowed:
        return None
    a = attributes
    resource = a["resource"] + (f"/{a['subresource']}" if a.get("subresource") else "")
    what = f"{a['resource']}.{a['group']}" if a.get("group") else a["resource"]
    where = (
        f' in the namespace "{a["namespace"]}"' if a.get("namespace") else " at the cluster scope"
    )
    return ApiError(
        code=403,
        reason="Forbidden",
        message=(
            f'{what} "{a.get("name", "")}" is forbidden: User "{user}" cannot {a["verb"]} '
            f'resource "{resource}" in API group "{a.get("group", "")}"{where}'
        ),
        details={"name": a.get("name", ""), "group": a.get("group", ""), "kind": a["resource"]},
    )


def _authorize(
    user: str,
    groups: list[str],
    resource: Mapping[str, Any] | None,
    non_resource: Mapping[str, Any] | None,
    objects: Lister,
) -> tuple[bool, str]:
    if PRIVILEGED_GROUP in groups:
        return True, ""
    roles = {r["metadata"]["name"]: r for r in objects("clusterroles", None)}
    bindings = [("ClusterRoleBinding", b) for b in objects("clusterrolebindings", None)]
    namespace = (resource or {}).get("namespace") or ""
    local_roles = {}
    if resource is not None and namespace:
        bindings += [("RoleBinding", b) for b in objects("rolebindings", namespace)]
        local_roles = {r["metadata"]["name"]: r for r in objects("roles", namespace)}
    for kind, binding in bindings:
        meta = binding.get("metadata") or {}
        subject = _subject(binding, user, groups, meta.get("namespace") or "")
        if not subject:
            continue
        ref = binding.get("roleRef") or {}
        # A ClusterRoleBinding can only refer to a ClusterRole.
        by_kind = {"ClusterRole": roles, "Role": local_roles if kind == "RoleBinding" else {}}
        role = by_kind.get(ref.get("kind"), {}).get(ref.get("name"))
        if role is None:
            continue
        rules = role.get("rules") or []
        if resource is not None:
            ok = any(_resource_rule(r, resource) for r in rules)
        else:
            ok = kind == "ClusterRoleBinding" and any(
                _non_resource_rule(r, non_resource or {}) for r in rules
            )
        if ok:
            name = meta.get("name")
            who = (
                f'{kind} "{name}/{meta.get("namespace")}"'
                if kind == "RoleBinding"
                else f'{kind} "{name}"'
            )
            return (
                True,
                f'RBAC: allowed by {who} of {ref.get("kind")} "{ref.get("name")}" to {subject}',
            )
    return False, ""


def _subject(binding: Mapping[str, Any], user: str, groups: list[str], namespace: str) -> str:
    """How the binding names the requester ("User \"x\"", ...), or "" when it does not."""
    for s in binding.get("subjects") or []:
        kind, name = s.get("kind"), s.get("name")
        if kind == "User" and name == user:
            return f'User "{name}"'
        if kind == "Group" and name in groups:
            return f'Group "{name}"'
        if kind == "ServiceAccount":
            ns = s.get("namespace") or namespace
            if user == f"system:serviceaccount:{ns}:{name}":
                return f'ServiceAccount "{name}/{ns}"'
    return ""


def _has(values: list[str] | None, value: str) -> bool:
    return bool(values) and ("*" in values or value in values)  # type: ignore[operator]


def _resource_rule(rule: Mapping[str, Any], attrs: Mapping[str, Any]) -> bool:
    resource = attrs.get("resource") or ""
    if attrs.get("subresource"):
        resource = f"{resource}/{attrs['subresource']}"
    names = rule.get("resourceNames") or []
    return (
        _has(rule.get("verbs"), attrs.get("verb") or "")
        and _has(rule.get("apiGroups"), attrs.get("group") or "")
        and _has(rule.get("resources"), resource)
        and (not names or (attrs.get("name") or "") in names)
    )


def _non_resource_rule(rule: Mapping[str, Any], attrs: Mapping[str, Any]) -> bool:
    path = attrs.get("path") or ""
    urls = rule.get("nonResourceURLs") or []
    return _has(rule.get("verbs"), attrs.get("verb") or "") and any(
        u == "*" or u == path or (u.endswith("*") and path.startswith(u[:-1])) for u in urls
    )


def _invalid(message: str) -> ApiError:
    return ApiError(
        code=422,
        reason="Invalid",
        message=f'SubjectAccessReview.authorization.k8s.io "" is invalid: {message}',
    )
