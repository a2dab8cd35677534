"""The presets, rules, dashboards and the lab's vLLM pods use only names the engines export.

tests/data/engines has, per engine, the sample names it serves on /metrics, each list from
the engine's own repository (its metrics test's expectations or its metrics reference, at
the commit its header names). A query naming anything else would answer nothing on a real
pod: the policy would see the signal missing, a rule would never fire, a panel stay empty.
"""

import re

import pytest
from helpers import REPO, TEST_DATA
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.autoscaler.core.signals import PRESETS
from gpufleet.autoscaler.replay.core.model import ServiceModel
from gpufleet.lab.serving import VllmEngine

ENGINES = TEST_DATA / "engines"
# A metric name as a selector's prefix: `vllm:num_requests_waiting{...}`.
METRIC = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{")
VLLM = re.compile(r"vllm:[a-zA-Z0-9_:]+")


def exported(engine: str) -> set[str]:
    lines = (ENGINES / f"{engine}.txt").read_text().splitlines()
    return {line for line in lines if line and not line.startswith("#")}


def test_every_preset_has_its_engines_names():
    assert set(PRESETS) == {path.stem for path in ENGINES.glob("*.txt")}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_query_reads_names_the_engine_exports(preset: str):
    read = {name for q in PRESETS[preset].values() for name in METRIC.findall(q.template)}
    assert read, f"no metric name found in the {preset} preset's queries"
    assert read <= exported(preset), f"not exported by {preset}: {sorted(read - exported(preset))}"


def test_the_rules_and_dashboards_read_only_names_vllm_exports():
    files = [*(REPO / "rules").glob("*.yml"), *(REPO / "dashboards").glob("*.json")]
    read = {name for path in files for name in VLLM.findall(path.read_text())}
    assert read, "no vLLM name in rules/ or dashboards/"
    assert read <= exported("vllm"), f"not exported by vLLM: {sorted(read - exported('vllm'))}"


def test_the_labs_vllm_pods_serve_only_names_vllm_exports():
    engine = VllmEngine(ServiceModel(batch_slots=1, prefill_tokens_per_second=1000.0))
    engine.submit(0.0, 500, 10)
    engine.advance(10.0)
    families = text_string_to_metric_families(engine.metrics())
    served = {sample.name for family in families for sample in family.samples}
    assert served <= exported("vllm"), f"not exported by vLLM: {sorted(served - exported('vllm'))}"


def test_a_name_the_engine_does_not_export_is_caught():
    """The check itself: vLLM's V0 KV-cache gauge, hidden as deprecated in V1, is not listed."""
    assert "vllm:num_requests_waiting" in exported("vllm")
    assert "vllm:gpu_cache_usage_perc" not in exported("vllm")
    assert METRIC.findall("sum by (namespace, pod) (irate(vllm:x_total{{selector}}[1m]))") == [
        "vllm:x_total"
    ]
