"""The API server's field validation that a client can get wrong without noticing, as pure
functions: `causes` returns the (field, message) causes of a 422, empty when the object
passes; `undecodable` why the object is a 400 before it is validated at all.

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
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)")
NOTE_LIMIT_BYTES = 1024


def causes(plural: str, group: str, obj: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What the API server refuses in `obj`, a `group`/`plural` object being written."""
    found = _labels("metadata.labels", (obj.get("metadata") or {}).get("labels"))
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
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


def undecodable(plural: str, group: str, obj: Mapping[str, Any]) -> str | None:
    """Why the API server cannot decode `obj` at all (a 400, before validation's 422): a
    MicroTime field without its six fractional digits."""
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
    if prefix and (len(prefix) > 253 or not _PREFIX.fullmatch(prefix)):
        return False
    return len(name) <= LABEL_VALUE_MAX and bool(_NAME.fullmatch(name))
