"""rules/: promtool's own checks and unit tests, and the house rules every rule keeps: each
alert has a severity, a summary, a description and a runbook section in rules/README.md,
and fires in some test; each recording rule has an expected value in some test."""

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import REPO
from helpers.tools import require

from gpufleet.exporter.core.fields import CATALOG

RULES = REPO / "rules"
RULE_FILES = sorted(RULES.glob("*.rules.yml"))
TEST_FILES = sorted((RULES / "tests").glob("*.test.yml"))


def _rules() -> list[dict]:
    return [
        rule
        for path in RULE_FILES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
    ]


def _tests() -> list[dict]:
    return [t for path in TEST_FILES for t in yaml.safe_load(path.read_text())["tests"]]


def test_promtool_checks_every_rule_file() -> None:
    run = subprocess.run(
        [require("promtool"), "check", "rules", *map(str, RULE_FILES)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_promtool_unit_tests_pass(path: Path) -> None:
    run = subprocess.run(
        [require("promtool"), "test", "rules", str(path)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_group_has_its_test_file() -> None:
    tested = {
        Path(f).name for path in TEST_FILES for f in yaml.safe_load(path.read_text())["rule_files"]
    }
    assert tested == {p.name for p in RULE_FILES}
    assert {p.name.removesuffix(".test.yml") for p in TEST_FILES} == {
        p.name.removesuffix(".rules.yml") for p in RULE_FILES
    }


def test_every_alert_is_actionable_and_has_a_runbook_section() -> None:
    anchors = {
        re.sub(r"[^a-z0-9-]", "", line[4:].strip().lower().replace(" ", "-"))
        for line in (RULES / "README.md").read_text().splitlines()
        if line.startswith("### ")
    }
    alerts = [r for r in _rules() if "alert" in r]
    assert len(alerts) >= 20
    for alert in alerts:
        name = alert["alert"]
        assert alert["labels"]["severity"] in {"critical", "warning", "info"}, name
        assert {"summary", "description", "runbook_url"} <= set(alert["annotations"]), name
        anchor = alert["annotations"]["runbook_url"].rpartition("#")[2]
        assert anchor == name.lower() and anchor in anchors, name


def test_every_alert_fires_in_a_test_and_every_recording_rule_has_a_value() -> None:
    fired = {
        case["alertname"]
        for test in _tests()
        for case in test.get("alert_rule_test", ())
        if case.get("exp_alerts")
    }
    assert fired == {r["alert"] for r in _rules() if "alert" in r}
    checked = " ".join(
        case["expr"] for test in _tests() for case in test.get("promql_expr_test", ())
    )
    recorded = {r["record"] for r in _rules() if "record" in r}
    # A recording rule only an alert reads is checked through that alert's test.
    read_by_alerts = " ".join(r["expr"] for r in _rules() if "alert" in r)
    for name in recorded:
        assert name in checked or name in read_by_alerts, name


# promtool's values notation: a number, or "a+bxn" / "a-bxn" / "axn" (n more steps).
_VALUE = re.compile(r"^(-?\d+(?:\.\d+)?)(?:([+-])(\d+(?:\.\d+)?))?(?:x(\d+))?$")


def _served_under_49(series: str, values: str) -> tuple[str, str]:
    """An input series as the exporter serves it under `--compat 4.9`: its DCGM 4.7 name,
    and its values in that name's unit. A ratio is written as the decimal it stands for
    (95% is 0.95, as 95 / 100 gives it), so that a rule's conversion back can be exact."""
    name, brace, labels = series.partition("{")
    spec = CATALOG.get(name)
    if spec is None or not spec.name_v49:
        return series, values
    scale = spec.scale_v49

    def convert(number: str) -> str:
        value = float(number)
        return repr(value / round(1 / scale) if scale < 1 else value * scale)

    items = []
    for item in values.split():
        match = _VALUE.match(item)
        if match is None:
            assert item == "_" or item.startswith("_x") or item == "stale", item
            items.append(item)
            continue
        start, sign, step, times = match.groups()
        out = convert(start)
        if sign:
            out += sign + convert(step)
        items.append(out + (f"x{times}" if times else ""))
    return spec.name_v49 + brace + labels, " ".join(items)


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_the_unit_tests_pass_with_their_input_served_under_compat_49(
    path: Path, tmp_path: Path
) -> None:
    """`--compat 4.9` renames fields and changes units: the rules read both names, so their
    own unit tests, the input served under 4.9, must give the very same answers. Before,
    every alert and recording rule reading a renamed field was silent under 4.9."""
    suite = yaml.safe_load(path.read_text())
    suite["rule_files"] = [str(path.parent / f) for f in suite["rule_files"]]
    renamed = 0
    for test in suite["tests"]:
        for series in test.get("input_series", ()):
            name, values = _served_under_49(series["series"], str(series["values"]))
            renamed += name != series["series"]
            series["series"], series["values"] = name, values
    rewritten = tmp_path / path.name
    rewritten.write_text(yaml.safe_dump(suite, sort_keys=False))
    run = subprocess.run(
        [require("promtool"), "test", "rules", str(rewritten)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    if path.name.startswith("gpu-"):
        assert renamed, "no input served under a 4.9 name: the check checks nothing"
