"""Grafana JSON builders: every panel gets the datasource variable, an id and a place on
the grid that cannot overlap another."""

from gpufleet.exporter.core.fields import CATALOG

SCHEMA_VERSION = 39  # Grafana 10.4 and later
DS = {"type": "prometheus", "uid": "${datasource}"}
WIDTH = 24  # Grafana's grid


def gpu_series(matchers: str = "") -> str:
    """The series the variables list GPUs and nodes from, with `matchers` (`{...}`) added:
    every GPU has a temperature, under either profile's name (label_values() takes a
    selector, not an expression)."""
    name = "DCGM_FI_DEV_GPU_TEMP"
    names = f"{name}|{CATALOG[name].name_v49}"
    extra = matchers.strip("{}")
    return f'{{__name__=~"{names}"{", " + extra if extra else ""}}}'


def target(expr: str, legend: str = "", *, instant: bool = False) -> dict:
    return {
        "expr": expr,
        "legendFormat": legend or "__auto",
        "instant": instant,
        "range": not instant,
    }


def panel(
    kind: str, title: str, *targets: dict, unit: str = "", w: int = 12, h: int = 8, **extra
) -> dict:
    """A panel of `kind` (timeseries, stat, gauge, table, bargauge, state-timeline)."""
    defaults: dict = {"unit": unit} if unit else {}
    for key in ("min", "max", "decimals"):
        if key in extra:
            defaults[key] = extra.pop(key)
    p = {
        "type": kind,
        "title": title,
        "datasource": DS,
        "gridPos": {"w": w, "h": h},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {},
        "targets": [
            {"datasource": DS, "refId": chr(ord("A") + i), **t} for i, t in enumerate(targets)
        ],
    }
    if kind == "timeseries" and extra.pop("stack", False):
        defaults["custom"] = {"stacking": {"mode": "normal"}, "fillOpacity": 30}
    if kind == "table":
        for t in p["targets"]:
            t["format"] = "table"
        p["transformations"] = [{"id": "merge", "options": {}}]
    p.update(extra)
    return p


def ts(title: str, *targets: dict, **kw) -> dict:
    return panel("timeseries", title, *targets, **kw)


def stat(title: str, *targets: dict, **kw) -> dict:
    return panel("stat", title, *targets, w=kw.pop("w", 4), h=kw.pop("h", 4), **kw)


def row(title: str) -> dict:
    return {
        "type": "row",
        "title": title,
        "collapsed": False,
        "gridPos": {"w": WIDTH, "h": 1},
        "panels": [],
    }


def layout(panels: list[dict]) -> list[dict]:
    """Number the panels and place them left to right, wrapping at the grid's width; a row
    starts a new line. Placement by construction, so panels never overlap."""
    x = y = line_h = 0
    for pid, p in enumerate(panels, start=1):
        w, h = p["gridPos"]["w"], p["gridPos"]["h"]
        if x + w > WIDTH or p["type"] == "row":
            x, y, line_h = 0, y + line_h, 0
        p["id"] = pid
        p["gridPos"] = {"h": h, "w": w, "x": x, "y": y}
        x, line_h = x + w, max(line_h, h)
        if p["type"] == "row":
            x, y, line_h = 0, y + h, 0
    return panels


def variable(
    name: str, query: str, *, label: str = "", multi: bool = True, regex: str = ""
) -> dict:
    """A query variable over label values; multi-valued ones default to All."""
    v = {
        "name": name,
        "label": label or name,
        "type": "query",
        "datasource": DS,
        "definition": query,
        "query": {
            "qryType": 1,
            "query": query,
            "refId": "PrometheusVariableQueryEditor-VariableQuery",
        },
        "refresh": 2,  # on time range change: pods and GPUs come and go
        "regex": regex,
        "sort": 3,  # numerical ascending: GPU 2 before GPU 10
        "multi": multi,
        "includeAll": multi,
        "current": {"text": "All", "value": "$__all"} if multi else {},
    }
    return v


def dashboard(
    uid: str, title: str, description: str, variables: list[dict], panels: list[dict]
) -> dict:
    datasource = {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
    }
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["gpufleet", "gpu"],
        "editable": True,
        "graphTooltip": 1,  # shared crosshair
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "timezone": "",
        "annotations": {"list": []},
        "links": [
            {"type": "dashboards", "tags": ["gpufleet"], "asDropdown": True, "title": "gpufleet"}
        ],
        "templating": {"list": [datasource, *variables]},
        "panels": layout(panels),
    }
