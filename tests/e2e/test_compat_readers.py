"""Everything gpufleet ships that reads the exporter's fields (the rules, the dashboards,
the autoscaler's GPU telemetry, the lab's page) reads them under either metric profile.
`--compat 4.9` serves DCGM 4.7's names and units, and every reader of a renamed field went
silent there: no alert, empty panels, and no GPU utilization for the autoscaler's HPA and
KEDA policies. The rules' values under 4.9 are checked by their own unit tests
(tests/rules), the dashboards' panels through Prometheus (tests/dashboards)."""

import re
from pathlib import Path

import pytest
import yaml
from helpers import REPO, wait_for
from helpers.e2e import scraped_node
from helpers.grafana import dashboards, targets, variables

from gpufleet.autoscaler.core.signals import GPU_TELEMETRY
from gpufleet.exporter.core.fields import CATALOG
from gpufleet.lab.node import NodeLayout

RENAMED = {name: spec.name_v49 for name, spec in CATALOG.items() if spec.name_v49}


def _readers() -> list[tuple[str, str]]:
    """(where, expression) for every query gpufleet ships."""
    found = [
        (f"{path.name}: {rule.get('alert') or rule['record']}", rule["expr"])
        for path in sorted((REPO / "rules").glob("*.rules.yml"))
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
    ]
    for name, dashboard in dashboards().items():
        found += [(f"{name}: {panel['title']}", t["expr"]) for panel, t in targets(dashboard)]
        found += [
            (f"{name}: ${v['name']}", v["definition"])
            for v in variables(dashboard)
            if "definition" in v  # a datasource variable has none
        ]
    found += [(f"GPU_TELEMETRY {field}", query) for field, query in GPU_TELEMETRY.items()]
    page = (REPO / "gpufleet" / "lab" / "page" / "page.js").read_text()
    found += [("page.js", q) for q in re.findall(r"[\"']([^\"']*DCGM_FI_[^\"']*)[\"']", page)]
    return found


def _reads(expr: str, name: str) -> bool:
    return re.search(rf"\b{name}\b", expr) is not None


READING_RENAMED = [
    pytest.param(expr, id=where)
    for where, expr in _readers()
    if any(_reads(expr, name) for name in RENAMED)
]


def test_the_readers_of_renamed_fields_are_all_found() -> None:
    assert len(READING_RENAMED) >= 30  # rules, panels, variables, telemetry and the page


@pytest.mark.parametrize("expr", READING_RENAMED)
def test_a_reader_of_a_renamed_field_reads_its_49_name_too(expr: str) -> None:
    for legacy, renamed in RENAMED.items():
        if _reads(expr, legacy):
            assert _reads(expr, renamed), f"reads {legacy} but not {renamed}"


def test_the_autoscalers_gpu_telemetry_reads_an_exporter_serving_49(tmp_path: Path) -> None:
    """GPU utilization in percent, as under the legacy names: 4.9 serves it as a ratio."""
    layout = NodeLayout(fleet="2xH100", whole_gpus=2)
    with scraped_node(tmp_path, layout, compat="4.9") as (_, exporter, prom):
        text = exporter.metrics()
        assert "DCGM_FI_DEV_GPU_UTIL_RATIO{" in text and "DCGM_FI_DEV_GPU_UTIL{" not in text
        for field, query in GPU_TELEMETRY.items():
            wait_for(lambda q=query: prom.query(q), timeout=30, what=field)
        pinned = prom.pinned()  # both read at one scrape
        utils = _by_pod(pinned.query(GPU_TELEMETRY["gpu_util_percent"]))
        ratios = _by_pod(pinned.query("avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL_RATIO)"))
    assert utils.keys() == ratios.keys() and len(utils) > 1
    for pod, util in utils.items():
        assert util == pytest.approx(100 * ratios[pod])


def _by_pod(result: list[dict]) -> dict[tuple[str, str], float]:
    return {
        (r["metric"].get("namespace", ""), r["metric"].get("pod", "")): float(r["value"][1])
        for r in result
    }
