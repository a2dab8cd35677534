"""Kubernetes label and field selectors: parsing and matching, as the API server does.

Shared by the autoscaler's Kubernetes adapter (which joins pods to a workload by its scale
selector) and the lab's fake API server (which filters lists). Set-based and equality
requirements: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`. Pure.
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class SelectorError(ValueError):
    """A selector that does not parse; the message quotes the requirement."""


# Matched against a stripped requirement. Each run of spaces has one place to go, so a
# requirement that does not parse fails in linear time (runs of `\s*` beside `\s+` backtracked
# in cubic time: a 500-byte selector held a request, and the GIL, for seconds).
_REQUIREMENT = re.compile(
    r"(?P<neg>!)?\s*(?P<key>[A-Za-z0-9_./-]+)"
    r"(?:\s*(?P<op>==|!=|=)\s*(?P<value>[A-Za-z0-9_.-]*)"
    r"|\s+(?P<setop>notin|in)\s*(?P<set>\([^)]*\)))?"
)


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op in ("=", "in"):
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values  # "!=", "notin"


def parse_selector(text: str) -> tuple[Requirement, ...]:
    """A selector string -> its requirements; raises SelectorError quoting a bad one."""
    out = []
    for part in _split_top(text):
        m = _REQUIREMENT.fullmatch(part.strip())
        if not m or (m["neg"] and (m["op"] or m["setop"])):
            raise SelectorError(f"unable to parse requirement: {part[:60]!r}")
        if m["setop"]:
            values = frozenset(v.strip() for v in m["set"][1:-1].split(",") if v.strip())
            out.append(Requirement(m["key"], m["setop"], values))
        elif m["op"]:
            out.append(
                Requirement(m["key"], {"==": "="}.get(m["op"], m["op"]), frozenset((m["value"],)))
            )
        else:
            out.append(Requirement(m["key"], "!exists" if m["neg"] else "exists", frozenset()))
    return tuple(out)


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def selector_string(
    match_labels: Mapping[str, str], match_expressions: Sequence[Mapping[str, Any]] = ()
) -> str:
    """A LabelSelector as the string `Scale.status.selector` carries (metav1's
    FormatLabelSelector): labels, then expressions (In, NotIn, Exists, DoesNotExist)."""
    parts = [f"{k}={v}" for k, v in sorted(match_labels.items())]
    for e in match_expressions:
        key, op, values = e.get("key", ""), e.get("operator", ""), e.get("values") or ()
        if op == "In":
            parts.append(f"{key} in ({','.join(sorted(values))})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(sorted(values))})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string a field selector compares, for a dotted path; "" when absent."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def matches_fields(obj: Mapping[str, Any], requirements: tuple[Requirement, ...]) -> bool:
    return all(r.matches({r.key: field_value(obj, r.key)}) for r in requirements)


def matches_labels(obj: Mapping[str, Any], requirements: tuple[Requirement, ...]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(r.matches(labels) for r in requirements)
