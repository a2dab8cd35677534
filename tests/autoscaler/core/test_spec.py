"""The GPUAutoscaler spec: the Python model agrees with the CRD, and a bad spec names its field."""

import contextlib
from typing import Any

import pytest
import yaml
from helpers import REPO
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.autoscaler.core.binding import Term
from gpufleet.autoscaler.core.spec import FIELDS, Rule, SpecError, parse_spec
from gpufleet.autoscaler.core.workload import (
    RateKind,
    RatePolicy,
    SelectPolicy,
    ShapeKind,
    default_scale_down,
)

CRD = REPO / "helm/gpufleet/crds/autoscaling.gpufleet.dev_gpuautoscalers.yaml"


def schema_rules(node: dict[str, Any], prefix: str = "") -> dict[str, Rule]:
    """The CRD's spec schema in FIELDS' terms, path by path."""
    out: dict[str, Rule] = {}
    required = set(node.get("required", ()))
    for key, child in node.get("properties", {}).items():
        path = f"{prefix}{key}"
        out[path] = Rule(
            child["type"],
            default=child.get("default"),
            enum=tuple(child.get("enum", ())),
            minimum=child.get("minimum"),
            maximum=child.get("maximum"),
            required=key in required,
        )
        if child["type"] == "object":
            out.update(schema_rules(child, f"{path}."))
        if child["type"] == "array":
            items = child["items"]
            out[f"{path}[]"] = Rule(items["type"])
            out.update(schema_rules(items, f"{path}[]."))
    return out


def test_the_python_model_and_the_crd_agree() -> None:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = crd["spec"]["versions"]
    assert (crd["spec"]["group"], version["name"]) == ("autoscaling.gpufleet.dev", "v1alpha1")
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert schema_rules(spec) == FIELDS


def test_the_crd_names_every_term_that_can_bind_a_decision() -> None:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = crd["spec"]["versions"]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    described = status["boundBy"]["description"]
    listed = described.split(": ", 1)[1].rstrip(".").replace(" or ", ", ").split(", ")
    assert listed == [t.value for t in Term]


def gpa(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "llm", "name": "chat"}, "spec": spec}


MINIMAL = {"scaleTargetRef": {"kind": "Deployment", "name": "vllm"}, "maxReplicas": 8}


def test_a_minimal_spec_takes_the_documented_defaults() -> None:
    spec = parse_spec(gpa(MINIMAL))
    assert (spec.namespace, spec.name, spec.policy) == ("llm", "chat", "gpufleet")
    assert (spec.target.api_version, spec.target.kind, spec.target.name) == (
        "apps/v1",
        "Deployment",
        "vllm",
    )
    w = spec.workload
    assert (w.name, w.min_replicas, w.max_replicas, w.slo_ttft_seconds) == ("llm/chat", 1, 8, 2.0)
    assert (w.cold_start_seconds, w.node_provision_seconds, w.batch_slots) == (60.0, 180.0, 0)
    assert w.shape.kind is ShapeKind.GPU and w.shape.gpus == 1
    assert spec.signals.preset == "vllm" and dict(spec.signals.queries) == {}
    assert (spec.hpa_target_gpu_utilization, spec.keda_queue_target) == (70.0, 10.0)
    assert (spec.idle_seconds_to_zero, spec.signals.gateway_queue_depth) == (300.0, "")
    assert w.target_attainment is None  # unset: the policy's own settings, as before


def test_slo_target_attainment_is_the_policys_knob() -> None:
    # Issue 17: the one knob, an optional field beside the SLO it is a target for.
    spec = parse_spec(gpa({**MINIMAL, "slo": {"ttftSeconds": 1.0, "targetAttainment": 0.999}}))
    assert spec.workload.target_attainment == 0.999


def test_a_full_spec() -> None:
    spec = parse_spec(
        gpa(
            {
                **MINIMAL,
                "minReplicas": 0,
                "policy": "keda",
                "slo": {"ttftSeconds": 0.5},
                "gpu": {"kind": "mig", "migProfile": "3g.40gb"},
                "batchSlots": 128,
                "nodePool": {"name": "h100", "gpusPerNode": 8, "provisionSeconds": 120},
                "behavior": {
                    "scaleUp": {
                        "selectPolicy": "Min",
                        "policies": [{"type": "Pods", "value": 2, "periodSeconds": 30}],
                    }
                },
                "signals": {
                    "preset": "tgi",
                    "model": "llama",
                    "queries": {"queueDepth": "sum by (namespace, pod) (my_queue{{{selector}}})"},
                    "gatewayQueueDepth": "sum(held{{{selector}}})",
                },
                "idleSecondsToZero": 60,
                "keda": {"queueTarget": 4, "pollingIntervalSeconds": 10},
            }
        )
    )
    w = spec.workload
    assert w.min_replicas == 0 and w.slo_ttft_seconds == 0.5 and w.batch_slots == 128
    assert (w.shape.kind, w.shape.mig_profile) == (ShapeKind.MIG, "3g.40gb")
    assert (spec.node_pool, w.gpus_per_node, w.node_provision_seconds) == ("h100", 8, 120.0)
    up = w.behavior.scale_up
    assert up.select_policy is SelectPolicy.MIN
    assert up.policies == (RatePolicy(RateKind.PODS, 2, 30),)
    assert up.stabilization_window_seconds == 0
    assert w.behavior.scale_down == default_scale_down()
    assert spec.signals.queries == {
        "queue_depth": "sum by (namespace, pod) (my_queue{{{selector}}})"
    }
    assert (spec.keda_queue_target, spec.keda_polling_interval_seconds) == (4.0, 10.0)
    assert spec.signals.gateway_queue_depth == "sum(held{{{selector}}})"
    assert spec.idle_seconds_to_zero == 60.0


OFFICE = {"name": "office", "schedule": "0 8 * * mon-fri", "duration": "10h", "minReplicas": 2}


def test_schedules_are_read_with_their_defaults() -> None:
    spec = parse_spec(gpa({**MINIMAL, "schedules": [OFFICE]}))
    (window,) = spec.schedules
    assert (window.name, window.duration_seconds, window.min_replicas) == ("office", 36000, 2)
    assert (window.time_zone.key, window.headroom_replicas) == ("UTC", 0)
    assert window.cron.weekdays == frozenset({1, 2, 3, 4, 5})


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param({"maxReplicas": 3}, "spec.scaleTargetRef", id="missing-target"),
        pytest.param(
            {**MINIMAL, "scaleTargetRef": {"kind": "Deployment"}},
            "spec.scaleTargetRef.name",
            id="target-without-name",
        ),
        pytest.param({**MINIMAL, "minReplicas": 9}, "spec.minReplicas", id="min-over-max"),
        pytest.param(
            {**MINIMAL, "signals": {"preset": "ollama"}}, "spec.signals.preset", id="unknown-preset"
        ),
        pytest.param({**MINIMAL, "gpus": 2}, "spec.gpus", id="unknown-field"),
        pytest.param({**MINIMAL, "maxReplicas": "8"}, "spec.maxReplicas", id="wrong-type"),
        pytest.param({**MINIMAL, "maxReplicas": True}, "spec.maxReplicas", id="bool-is-no-int"),
        pytest.param(
            {**MINIMAL, "gpu": {"kind": "mig"}}, "spec.gpu.migProfile", id="mig-without-profile"
        ),
        pytest.param(
            {
                **MINIMAL,
                "behavior": {
                    "scaleDown": {"policies": [{"type": "Pods", "value": 0, "periodSeconds": 15}]}
                },
            },
            "spec.behavior.scaleDown.policies[0].value",
            id="rate-policy-value",
        ),
        pytest.param(
            {**MINIMAL, "signals": {"queries": {"queue": "x"}}},
            "spec.signals.queries.queue",
            id="unknown-signal",
        ),
        pytest.param(
            {**MINIMAL, "schedules": [{**OFFICE, "schedule": "0 8 * *"}]},
            "spec.schedules[0].schedule",
            id="schedule-cron",
        ),
        pytest.param(
            {**MINIMAL, "schedules": [OFFICE, {**OFFICE, "duration": "10"}]},
            "spec.schedules[1].duration",
            id="schedule-duration",
        ),
        pytest.param(
            {**MINIMAL, "schedules": [{**OFFICE, "timeZone": "Mars/Base"}]},
            "spec.schedules[0].timeZone",
            id="schedule-zone",
        ),
        pytest.param(
            {**MINIMAL, "schedules": [{**OFFICE, "minReplicas": 99}]},
            "spec.schedules[0].minReplicas",
            id="schedule-floor-over-max",
        ),
        pytest.param(
            {**MINIMAL, "slo": {"targetAttainment": 0.4}},
            "spec.slo.targetAttainment",
            id="target-attainment-below-range",
        ),
        pytest.param(
            {**MINIMAL, "slo": {"targetAttainment": 1}},
            "spec.slo.targetAttainment",
            id="target-attainment-of-one",
        ),
        pytest.param(
            {**MINIMAL, "schedules": [{"name": "x", "schedule": "@daily"}]},
            "spec.schedules[0].duration",
            id="schedule-without-duration",
        ),
    ],
)
def test_a_bad_spec_names_its_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(gpa(spec))
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")


_LEAVES = sorted(p for p, rule in FIELDS.items() if rule.type not in ("object", "array"))
_ODD = st.sampled_from(
    ["Europe", "9" * 5000, "9" * 5000 + "h", "*/" + "9" * 5000 + " * * * *", "a" * 300, ""]
)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12) | _ODD,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=4,
)


def _put(spec: dict[str, Any], path: str, value: Any) -> None:
    """Set `path` (a FIELDS path; `x[]` is the array's first item) in `spec`."""
    *parents, leaf = path.split(".")
    node = spec
    for part in parents:
        if part.endswith("[]"):
            items = node.setdefault(part[:-2], [{}])
            if not (isinstance(items, list) and items and isinstance(items[0], dict)):
                return
            node = items[0]
        else:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                return
            node = child
    node[leaf] = value


@given(st.lists(st.tuples(st.sampled_from(_LEAVES), _VALUES), max_size=6))
def test_parse_spec_fails_only_with_spec_error(edits: list[tuple[str, Any]]) -> None:
    """One bad GPUAutoscaler is reported on its status; any other exception stopped the
    controller for every workload (a timeZone naming a tz folder, a 5,000-digit cron)."""
    spec: dict[str, Any] = {
        "scaleTargetRef": {"kind": "Deployment", "name": "vllm"},
        "maxReplicas": 8,
        "schedules": [{"name": "day", "schedule": "0 8 * * *", "duration": "1h"}],
        "behavior": {"scaleUp": {"policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}]}},
    }
    for path, value in edits:
        _put(spec, path, value)
    with contextlib.suppress(SpecError):
        parse_spec({"metadata": {"namespace": "ml", "name": "vllm"}, "spec": spec})


def test_a_bad_specs_message_is_bounded() -> None:
    """A 400 KB schedule was echoed twice into the status message and the Event's note: a
    status past what etcd stores, rewritten on every tick that failed to store it."""
    bad = {"name": "s", "schedule": "x" * 400_000, "duration": "1h"}
    with pytest.raises(SpecError) as raised:
        parse_spec(gpa({**MINIMAL, "schedules": [bad]}))
    assert raised.value.field == "spec.schedules[0].schedule"
    assert len(raised.value.message) <= 500 and raised.value.message.endswith("...")
