"""The README stays true to the code: its flag tables, Quick start and GPUAutoscaler examples."""

import re

import pytest
import yaml
from helpers import REPO

from gpufleet.autoscaler.core.spec import parse_spec
from gpufleet.autoscaler.replay.settings import SimulateSettings
from gpufleet.autoscaler.settings import AutoscalerSettings
from gpufleet.exporter.settings import ExporterSettings
from gpufleet.plugin.settings import PluginSettings
from gpufleet.settings import markdown_table

ROOT = REPO
README = (ROOT / "README.md").read_text()


@pytest.mark.parametrize(
    ("daemon", "settings"),
    [
        ("exporter", ExporterSettings),
        ("plugin", PluginSettings),
        ("simulate", SimulateSettings),
        ("autoscaler", AutoscalerSettings),
    ],
)
def test_flag_table_matches_the_settings(daemon, settings):
    assert markdown_table(settings) in README, f"run: python scripts/flags_table.py {daemon}"


def test_quick_start_has_exactly_two_commands_and_ci_runs_the_test_one():
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)[1]
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["./dev lab", "./dev test"]
    assert "exec ./dev test" in (ROOT / ".ci" / "run").read_text()


def test_every_gpuautoscaler_example_is_a_valid_spec():
    blocks = [
        b for b in re.findall(r"```yaml\n(.*?)```", README, re.S) if "kind: GPUAutoscaler" in b
    ]
    assert blocks
    for block in blocks:
        for doc in yaml.safe_load_all(block):
            if doc and doc.get("kind") == "GPUAutoscaler":
                parse_spec({"metadata": {"namespace": "llm", "name": "chat"}, **doc})
