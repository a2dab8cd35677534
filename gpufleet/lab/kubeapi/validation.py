"""The API server's field validation that a client can get wrong without noticing, as pure
functions: `causes` returns the (field, message) causes of a 422, empty when the object
passes; `undecodable` why the object is a 400 before it is validated at all: a field of a
JSON type its Go type cannot take (labels that are not a map of strings, `replicas` past
int32), as `json.Unmarshal` refuses it, or a malformed MicroTime.

Facts from Kubernetes: label keys and values (`apimachinery/pkg/util/validation`:
`IsQualifiedName`, `IsValidLabelValue`, values at most 63 characters, starting and ending
with a letter or digit), checked on an object's labels and on a workload's selector and
pod template; an Event's note at most 1024 bytes (Go's `len`, `NoteLengthLimit`); an
Event's and a Lease's times as `metav1.MicroTime` (RFC 3339 with exactly six fractional
digits: a whole second without them does not parse) and a positive `leaseDurationSeconds`
(`ValidateLeaseSpec`). A lenient fake hid each of these from the tests once.
"""

import re
from collections.abc import Mapping
from typing import Any

from gpufleet.core.label_values import LABEL_VALUE_MAX, is_label_value

_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)")
NOTE_LIMIT_BYTES = 1024


def is_subdomain(value: str) -> bool:
    """A DNS-1123 subdomain (`IsDNS1123Subdomain`): what most kinds' names must be."""
    return len(value) <= 253 and bool(_SUBDOMAIN.fullmatch(value))


def generate_name_fits(prefix: str) -> bool:
    """`NameIsDNSSubdomain(prefix, true)` (apimachinery `api/validation/generic.go`): a
    generateName is checked as a name, except that it may end in a dash. Its
    `maskTrailingDash` replaces the last two characters with an "a", verbatim."""
    if len(prefix) > 1 and prefix.endswith("-"):
        prefix = prefix[:-2] + "a"
    return is_subdomain(prefix)


def causes(plural: str, group: str, obj: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What the API server refuses in `obj`, a `group`/`plural` object being written."""
    found = _labels("metadata.labels", (obj.get("metadata") or {}).get("labels"))
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    if _SHAPES.get((group, plural)) is _WORKLOAD:
        replicas = spec.get("replicas")
        if isinstance(replicas, int) and replicas < 0:
            found.append(
                ("spec.replicas", f"Invalid value: {replicas}: must be greater than or equal to 0")
            )
    if group == "apps":
        selector = spec.get("selector") if isinstance(spec.get("selector"), dict) else {}
        found += _labels("spec.selector.matchLabels", selector.get("matchLabels"))
        template = spec.get("template") if isinstance(spec.get("template"), dict) else {}
        found += _labels(
            "spec.template.metadata.labels", (template.get("metadata") or {}).get("labels")
        )
    if (group, plural) == ("events.k8s.io", "events"):
        note = obj.get("note")
        if isinstance(note, str) and len(note.encode()) > NOTE_LIMIT_BYTES:
            found.append(("note", f"Too long: may not be more than {NOTE_LIMIT_BYTES} bytes"))
    if (group, plural) == ("coordination.k8s.io", "leases"):
        duration = spec.get("leaseDurationSeconds")
        if duration is not None and (not isinstance(duration, int) or duration <= 0):
            found.append(("spec.leaseDurationSeconds", "must be greater than 0"))
    return found


# (path, Go type): "*" stands for every item of a list or value of a map. A parent comes
# before its children, which are checked only where it has its type; null is every type's
# zero value. Only the fields a lab controller, the RBAC evaluator or a selector reads.
_Shape = tuple[tuple[str, ...], str]
_META: tuple[_Shape, ...] = (
    (("metadata",), "v1.ObjectMeta"),
    *((("metadata", key), "string") for key in ("name", "generateName", "namespace")),
    *((("metadata", key), "string") for key in ("resourceVersion", "uid")),
    (("metadata", "labels"), "map[string]string"),
    (("metadata", "labels", "*"), "string"),
    (("metadata", "annotations"), "map[string]string"),
    (("metadata", "annotations", "*"), "string"),
    (("metadata", "finalizers"), "[]string"),
    (("metadata", "finalizers", "*"), "string"),
    (("metadata", "ownerReferences"), "[]v1.OwnerReference"),
    (("metadata", "ownerReferences", "*"), "v1.OwnerReference"),
)
# A built-in kind's spec and status are Go structs; a custom resource's are whatever its
# CRD's schema allows (a loose one takes a string).
_BUILTIN: tuple[_Shape, ...] = ((("spec",), "struct"), (("status",), "struct"))
_POD_SPEC: tuple[_Shape, ...] = (
    (("containers",), "[]v1.Container"),
    (("containers", "*"), "v1.Container"),
    (("nodeName",), "string"),
)
_WORKLOAD: tuple[_Shape, ...] = (
    (("spec", "replicas"), "int32"),
    (("spec", "selector"), "struct"),
    (("spec", "template"), "v1.PodTemplateSpec"),
    (("spec", "template", "metadata"), "v1.ObjectMeta"),
    (("spec", "template", "metadata", "labels"), "map[string]string"),
    (("spec", "template", "metadata", "labels", "*"), "string"),
    (("spec", "template", "spec"), "v1.PodSpec"),
    *((("spec", "template", "spec", *path), go) for path, go in _POD_SPEC),
)
_RULES: tuple[_Shape, ...] = (
    (("rules",), "[]v1.PolicyRule"),
    (("rules", "*"), "v1.PolicyRule"),
    *(
        (("rules", "*", key), "[]string")
        for key in ("verbs", "apiGroups", "resources", "resourceNames", "nonResourceURLs")
    ),
    *(
        (("rules", "*", key, "*"), "string")
        for key in ("verbs", "apiGroups", "resources", "resourceNames", "nonResourceURLs")
    ),
)
_BINDING: tuple[_Shape, ...] = (
    (("subjects",), "[]v1.Subject"),
    (("subjects", "*"), "v1.Subject"),
    *((("subjects", "*", key), "string") for key in ("kind", "name", "namespace", "apiGroup")),
    (("roleRef",), "v1.RoleRef"),
    *((("roleRef", key), "string") for key in ("kind", "name", "apiGroup")),
)
_SHAPES: dict[tuple[str, str], tuple[_Shape, ...]] = {
    ("", "pods"): tuple((("spec", *path), go) for path, go in _POD_SPEC),
    ("", "replicationcontrollers"): _WORKLOAD,
    ("apps", "deployments"): _WORKLOAD,
    ("apps", "statefulsets"): _WORKLOAD,
    ("apps", "replicasets"): _WORKLOAD,
    ("", "configmaps"): ((("data",), "map[string]string"), (("data", "*"), "string")),
    ("rbac.authorization.k8s.io", "clusterroles"): _RULES,
    ("rbac.authorization.k8s.io", "roles"): _RULES,
    ("rbac.authorization.k8s.io", "clusterrolebindings"): _BINDING,
    ("rbac.authorization.k8s.io", "rolebindings"): _BINDING,
    ("autoscaling.x-k8s.io", "capacitybuffers"): ((("spec", "replicas"), "int32"),),
    ("coordination.k8s.io", "leases"): (
        (("spec", "holderIdentity"), "string"),
        (("spec", "leaseDurationSeconds"), "int32"),
        (("spec", "leaseTransitions"), "int32"),
    ),
}
# A SubjectAccessReview, which is answered, not stored.
REVIEW_SHAPE: tuple[_Shape, ...] = (
    (("spec",), "v1.SubjectAccessReviewSpec"),
    (("spec", "user"), "string"),
    (("spec", "groups"), "[]string"),
    (("spec", "groups", "*"), "string"),
    (("spec", "resourceAttributes"), "v1.ResourceAttributes"),
    *(
        (("spec", "resourceAttributes", key), "string")
        for key in ("namespace", "verb", "group", "resource", "subresource", "name")
    ),
    (("spec", "nonResourceAttributes"), "v1.NonResourceAttributes"),
    *((("spec", "nonResourceAttributes", key), "string") for key in ("path", "verb")),
)
# The Scale subresource's body.
SCALE_SHAPE: tuple[_Shape, ...] = (
    (("metadata",), "v1.ObjectMeta"),
    (("metadata", "resourceVersion"), "string"),
    (("spec",), "v1.ScaleSpec"),
    (("spec", "replicas"), "int32"),
)
# A DELETE's body.
DELETE_OPTIONS_SHAPE: tuple[_Shape, ...] = (
    (("gracePeriodSeconds",), "int64"),
    (("preconditions",), "v1.Preconditions"),
    (("preconditions", "uid"), "string"),
    (("preconditions", "resourceVersion"), "string"),
)
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


def misfit(shapes: tuple[_Shape, ...], obj: Any) -> str | None:
    """The first field of `obj` whose JSON value its Go type cannot take, as Go's decoder
    says it; None when every one fits. `obj` itself must be an object."""
    if not isinstance(obj, Mapping):
        return f"json: cannot unmarshal {_json_type(obj)} into Go value of type struct"
    for path, go in shapes:
        for where, value in _at(obj, path, ()):
            if value is not None and not _fits(value, go):
                return (
                    f"json: cannot unmarshal {_json_type(value)} into Go struct field "
                    f"{'.'.join(where)} of type {go}"
                )
    return None


def _at(
    value: Any, path: tuple[str, ...], where: tuple[str, ...]
) -> list[tuple[tuple[str, ...], Any]]:
    """The values at `path` in `value`, with where each is; none where a step is missing
    or of another type (its own shape reports that)."""
    if not path:
        return [(where, value)]
    step, rest = path[0], path[1:]
    if step == "*":
        items = (
            value.items()
            if isinstance(value, Mapping)
            else enumerate(value)
            if isinstance(value, list)
            else ()
        )
        return [found for key, item in items for found in _at(item, rest, (*where, str(key)))]
    if isinstance(value, Mapping) and step in value:
        return _at(value[step], rest, (*where, step))
    return []


def _fits(value: Any, go: str) -> bool:
    if go == "string":
        return isinstance(value, str)
    if go in ("int32", "int64"):
        low, high = _INT32 if go == "int32" else _INT64
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    if go.startswith("[]"):
        return isinstance(value, list)
    return isinstance(value, Mapping)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return f"number {value}" if isinstance(value, int) and abs(value) >= 2**31 else "number"
    names: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return names.get(type(value), "value")


def undecodable(plural: str, group: str, obj: Any, *, builtin: bool = True) -> str | None:
    """Why the API server cannot decode `obj` at all (a 400, before validation's 422): a
    field its Go type cannot take, or a MicroTime field without its six fractional
    digits."""
    shapes = _META + (_BUILTIN if builtin else ()) + _SHAPES.get((group, plural), ())
    if why := misfit(shapes, obj):
        return why
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    series = obj.get("series") if isinstance(obj.get("series"), dict) else {}
    times = {
        ("events.k8s.io", "events"): (
            ("eventTime", obj.get("eventTime")),
            ("series.lastObservedTime", series.get("lastObservedTime")),
        ),
        ("coordination.k8s.io", "leases"): (
            ("spec.acquireTime", spec.get("acquireTime")),
            ("spec.renewTime", spec.get("renewTime")),
        ),
    }.get((group, plural), ())
    for where, value in times:
        if value is not None and not (isinstance(value, str) and _MICRO_TIME.fullmatch(value)):
            return (
                f'{where}: parsing time {value!r} as "2006-01-02T15:04:05.000000Z07:00": '
                "RFC 3339 with six fractional digits is required"
            )
    return None


def _labels(where: str, labels: Any) -> list[tuple[str, str]]:
    if not isinstance(labels, Mapping):
        return []
    found = []
    for key, value in labels.items():
        if not _qualified_name(str(key)):
            found.append((where, f"Invalid value: {key!r}: not a qualified name"))
        if not isinstance(value, str) or not is_label_value(value):
            found.append(
                (
                    where,
                    f"Invalid value: {value!r}: must be no more than {LABEL_VALUE_MAX} "
                    "characters, and begin and end with an alphanumeric character",
                )
            )
    return found


def _qualified_name(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and not is_subdomain(prefix):
        return False
    return len(name) <= LABEL_VALUE_MAX and bool(_NAME.fullmatch(name))
