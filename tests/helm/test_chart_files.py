"""The chart's copies of rules/ and dashboards/ (Helm's .Files reads only inside the chart)
equal the originals, and reach the PrometheusRule and the dashboard ConfigMaps intact.

rules/ and dashboards/ stay the single place to edit (promtool tests and the dashboard
checks run there); after an edit, copy them: cp rules/*.rules.yml helm/gpufleet/files/rules/
and cp dashboards/*.json helm/gpufleet/files/dashboards/."""

import json
import shutil

import pytest
import yaml
from helpers.helm import CHART, ROOT, find, render

COPIES = [
    ("rules", "*.rules.yml"),
    ("dashboards", "*.json"),
]


@pytest.mark.parametrize(("folder", "pattern"), COPIES)
def test_chart_copy_equals_the_original(folder, pattern):
    originals = {p.name: p.read_bytes() for p in (ROOT / folder).glob(pattern)}
    copies = {p.name: p.read_bytes() for p in (CHART / "files" / folder).glob(pattern)}
    assert sorted(copies) == sorted(originals), (
        f"helm/gpufleet/files/{folder}/ lists other files than {folder}/: "
        f"cp {folder}/{pattern} helm/gpufleet/files/{folder}/"
    )
    stale = [name for name in originals if copies[name] != originals[name]]
    assert not stale, (
        f"stale chart copies {stale}: cp {folder}/{pattern} helm/gpufleet/files/{folder}/"
    )


def test_prometheus_rule_holds_every_group_of_rules(tmp_path):
    expected = [
        group
        for path in sorted((CHART / "files" / "rules").glob("*.rules.yml"))
        for group in yaml.safe_load(path.read_text())["groups"]
    ]
    assert expected
    rule = find(render({}, tmp_path=tmp_path), "PrometheusRule")
    assert rule["spec"]["groups"] == expected


def test_each_dashboard_becomes_a_labelled_config_map(tmp_path):
    """With a dashboard in files/dashboards/ (a copy of the chart, so this runs before
    dashboards/ exists): one ConfigMap, labelled for Grafana's sidecar, holding its JSON."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    board = json.dumps({"uid": "gpufleet-gpus", "title": "GPUs", "panels": []}, indent=2)
    (chart / "files" / "dashboards").mkdir(exist_ok=True)
    (chart / "files" / "dashboards" / "GPU-Fleet.json").write_text(board + "\n")
    objects = render({}, tmp_path=tmp_path, chart=chart)
    cm = find(objects, "ConfigMap", "-dashboard-gpu-fleet")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert list(cm["data"]) == ["GPU-Fleet.json"]
    assert json.loads(cm["data"]["GPU-Fleet.json"]) == json.loads(board)
    off = render({"dashboards": {"enabled": False}}, tmp_path=tmp_path, chart=chart)
    assert not [o for o in off if o["kind"] == "ConfigMap"]


def test_gpu_price_is_the_one_rule_the_chart_sets(tmp_path):
    """rules.gpuHourlyPrice (the value rules/README.md names) replaces that rule's
    expression and nothing else; its default leaves the rules as in the files."""
    default = find(render({}, tmp_path=tmp_path), "PrometheusRule")["spec"]["groups"]
    priced = render({"rules": {"gpuHourlyPrice": 2.5}}, tmp_path=tmp_path)
    groups = find(priced, "PrometheusRule")["spec"]["groups"]
    changed = [
        (old["record"], new["expr"])
        for g_old, g_new in zip(default, groups, strict=True)
        for old, new in zip(g_old["rules"], g_new["rules"], strict=True)
        if old != new
    ]
    assert changed == [("gpufleet:gpu_hourly_price:dollars", "vector(2.5)")]
