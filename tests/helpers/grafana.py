"""Grafana dashboards as a user's Grafana reads them: their panels, their queries, and their
template variables resolved against a real Prometheus, the way Grafana substitutes them."""

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

from helpers import REPO

DASHBOARDS = REPO / "dashboards"
# Grafana's own variables, as Grafana fills them for a 1-hour range and a 1 s scrape (a
# longer name before its prefix).
BUILTINS = {
    "$__rate_interval": "1m",
    "$__interval_ms": "1000",
    "$__interval": "1s",
    "$__range_s": "3600",
    "$__range": "1h",
}
_LABEL_VALUES = re.compile(r"^label_values\((?:(.+),\s*)?(\w+)\)$")
_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}")


def dashboards() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}


def panels(dashboard: dict) -> Iterator[dict]:
    """Every panel, rows' collapsed children included."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", ())


def targets(dashboard: dict) -> Iterator[tuple[dict, dict]]:
    """(panel, target) for every query of every panel."""
    for panel in panels(dashboard):
        for target in panel.get("targets", ()):
            yield panel, target


def variables(dashboard: dict) -> list[dict]:
    return dashboard["templating"]["list"]


class PromApi:
    """Prometheus' query API, failing loudly on a query Prometheus rejects."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/api/v1/query"

    def query(self, expr: str) -> list[dict]:
        url = self.url + "?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as err:
            if err.code in (400, 422):  # a bad query: it never returns data
                detail = err.read().decode()
                raise AssertionError(f"Prometheus rejects {expr!r}: {detail}") from err
            return []  # 503 while Prometheus starts
        except OSError:  # not listening yet
            return []
        return body["data"]["result"]


def resolve(dashboard: dict, prom: PromApi) -> dict[str, str] | None:
    """Each query variable's value, as Grafana substitutes it: the values its query finds
    (after its regex), a multi-value variable's as the regex `(a|b)` of them all, in the
    order Grafana resolves them (a variable may use the ones before it). None while a
    variable finds no values."""
    values: dict[str, str] = {}
    for var in variables(dashboard):
        if var["type"] != "query":
            continue
        found = label_values(expand(var["definition"], values), prom, var.get("regex", ""))
        if not found:
            return None
        escaped = [_regex_escape(v) for v in found]
        values[var["name"]] = f"({'|'.join(escaped)})" if var.get("multi") else found[0]
    return values


def _regex_escape(value: str) -> str:
    """Grafana's escape of a multi-value variable's value for Prometheus: a regex escape,
    doubled for the PromQL string literal it lands in."""
    value = value.replace("\\", "\\\\\\\\")
    return "".join("\\\\" + ch if ch in "$^*{}[]'+?.()|" else ch for ch in value)


def label_values(definition: str, prom: PromApi, regex: str = "") -> list[str]:
    """Grafana's `label_values([series,] label)`, through an instant query."""
    match = _LABEL_VALUES.match(definition.strip())
    assert match, f"not a label_values() query: {definition}"
    series, label = match.group(1) or "{__name__=~'.+'}", match.group(2)
    found = {r["metric"].get(label, "") for r in prom.query(f"group by ({label}) ({series})")}
    if regex:  # Grafana's /.../: keep matches, the first capture group where there is one
        pattern = re.compile(regex[1 : regex.rindex("/")] if regex.startswith("/") else regex)
        found = {
            m.group(1) if m.groups() else m.group(0) for v in found if (m := pattern.search(v))
        }
    return sorted(v for v in found if v)


def expand(expr: str, values: dict[str, str]) -> str:
    """`expr` with Grafana's built-in and the dashboard's variables substituted."""
    for name, value in BUILTINS.items():
        expr = expr.replace(name, value)

    def substitute(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        assert name in values, f"undefined variable ${name} in {expr}"
        return values[name]

    return _VARIABLE.sub(substitute, expr)


def referenced(text: str) -> set[str]:
    """Variable names `text` uses, Grafana's built-ins aside."""
    for name in BUILTINS:
        text = text.replace(name, "")
    return {m.group(1) or m.group(2) for m in _VARIABLE.finditer(text)}
