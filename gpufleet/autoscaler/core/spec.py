"""The GPUAutoscaler custom resource, read into what the controller runs: pure.

`FIELDS` is the spec's schema as this module enforces it (type, default, enum, bounds,
required), path by path; the CRD in helm/gpufleet/crds is the source of truth, and a test
fails when the two differ. `parse_spec` checks an object against it and builds the
`WorkloadConfig` and settings the policies take. A bad spec raises `SpecError` naming the
field, which the controller turns into a condition and an event; it never crashes it.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.autoscaler.core import knob
from gpufleet.autoscaler.core.schedules import (
    ScheduleError,
    Window,
    parse_cron,
    parse_duration,
    zone,
)
from gpufleet.autoscaler.core.workload import (
    Behavior,
    GpuShape,
    RateKind,
    RatePolicy,
    ScalingRules,
    SelectPolicy,
    ShapeKind,
    WorkloadConfig,
    default_scale_down,
    default_scale_up,
)
from gpufleet.core.messages import cut

GROUP = "autoscaling.gpufleet.dev"
VERSION = "v1alpha1"
PLURAL = "gpuautoscalers"
KIND = "GPUAutoscaler"
MAX_ERROR_CHARS = 500  # a SpecError's message: the status message and an Event's note
PRESETS = ("vllm", "sglang", "tgi", "triton", "torchserve")
# spec.signals.queries keys -> the Observation series they fill.
QUERY_SIGNALS = {
    "arrivalRate": "arrival_rate",
    "queueDepth": "queue_depth",
    "inFlight": "in_flight",
    "completionRate": "completion_rate",
    "promptTokensRate": "prompt_tokens_rate",
    "ttftP90Seconds": "ttft_p90_seconds",
    "ttftSumRate": "ttft_sum_rate",
    "prefillSumRate": "prefill_sum_rate",
    "promptTokensBuckets": "prompt_tokens_buckets",
}


@dataclass(frozen=True, slots=True)
class Rule:
    """One schema node: its type and constraints; `default` is applied when absent."""

    type: str  # object, array, integer, number, string, boolean
    default: Any = None
    enum: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    required: bool = False


def _rules_fields(prefix: str) -> dict[str, Rule]:
    return {
        prefix: Rule("object"),
        f"{prefix}.stabilizationWindowSeconds": Rule("integer", minimum=0, maximum=3600),
        f"{prefix}.selectPolicy": Rule("string", enum=("Max", "Min", "Disabled")),
        f"{prefix}.tolerance": Rule("number", minimum=0),
        f"{prefix}.policies": Rule("array"),
        f"{prefix}.policies[]": Rule("object"),
        f"{prefix}.policies[].type": Rule("string", enum=("Pods", "Percent"), required=True),
        f"{prefix}.policies[].value": Rule("integer", minimum=1, required=True),
        f"{prefix}.policies[].periodSeconds": Rule(
            "integer", minimum=1, maximum=1800, required=True
        ),
    }


FIELDS: dict[str, Rule] = {
    "scaleTargetRef": Rule("object", required=True),
    "scaleTargetRef.apiVersion": Rule("string", default="apps/v1"),
    "scaleTargetRef.kind": Rule("string", required=True),
    "scaleTargetRef.name": Rule("string", required=True),
    "minReplicas": Rule("integer", default=1, minimum=0),
    "maxReplicas": Rule("integer", minimum=1, required=True),
    "policy": Rule("string", default="gpufleet", enum=("gpufleet", "hpa", "keda")),
    "slo": Rule("object"),
    "slo.ttftSeconds": Rule("number", default=2.0, minimum=0.001),
    # gpufleet's one knob (`knob`); unset keeps the policy's own settings.
    "slo.targetAttainment": Rule("number", minimum=knob.MIN_TARGET, maximum=knob.MAX_TARGET),
    "gpu": Rule("object"),
    "gpu.kind": Rule("string", default="gpu", enum=("gpu", "mig", "shared")),
    "gpu.count": Rule("integer", default=1, minimum=1),
    "gpu.migProfile": Rule("string"),
    "gpu.sharesPerGpu": Rule("integer", default=1, minimum=1),
    "batchSlots": Rule("integer", default=0, minimum=0),
    # At most a day: a lead of 10^12 s overflowed the schedules' clock arithmetic.
    "coldStartSeconds": Rule("number", default=60, minimum=0, maximum=86400),
    "idleSecondsToZero": Rule("integer", default=300, minimum=0),
    "nodePool": Rule("object"),
    "nodePool.name": Rule("string"),
    "nodePool.gpusPerNode": Rule("integer", default=0, minimum=0),
    "nodePool.provisionSeconds": Rule("number", default=180, minimum=0, maximum=86400),
    "nodePool.placeholders": Rule("boolean", default=True),
    "behavior": Rule("object"),
    **_rules_fields("behavior.scaleUp"),
    **_rules_fields("behavior.scaleDown"),
    "signals": Rule("object"),
    "signals.preset": Rule("string", default="vllm", enum=PRESETS),
    "signals.model": Rule("string"),
    "signals.queries": Rule("object"),
    "signals.gatewayQueueDepth": Rule("string"),
    **{f"signals.queries.{key}": Rule("string") for key in QUERY_SIGNALS},
    "hpa": Rule("object"),
    "hpa.targetGPUUtilization": Rule("integer", default=70, minimum=1, maximum=100),
    "keda": Rule("object"),
    "keda.queueTarget": Rule("number", default=10, minimum=0.001),
    "keda.pollingIntervalSeconds": Rule("integer", default=30, minimum=1),
    "schedules": Rule("array"),
    "schedules[]": Rule("object"),
    "schedules[].name": Rule("string", required=True),
    "schedules[].schedule": Rule("string", required=True),
    "schedules[].duration": Rule("string", required=True),
    "schedules[].timeZone": Rule("string", default="UTC"),
    "schedules[].minReplicas": Rule("integer", default=0, minimum=0),
    "schedules[].headroomReplicas": Rule("integer", default=0, minimum=0),
}


class SpecError(ValueError):
    """A GPUAutoscaler spec that cannot run; `field` is its path, e.g. `spec.maxReplicas`."""

    def __init__(self, field_path: str, message: str) -> None:
        # Bounded: it is the status message and an Event's note (a 400 KB schedule echoed
        # twice made a status past what etcd stores).
        message = cut(message, MAX_ERROR_CHARS)
        super().__init__(f"{field_path}: {message}")
        self.field = field_path
        self.message = message


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetRef:
    api_version: str
    kind: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Signals:
    preset: str
    model: str = ""
    queries: Mapping[str, str] = field(default_factory=dict)  # Observation field -> PromQL
    # Requests held for the workload outside its pods (a gateway's or a queue's), summed
    # over every series and added to the queue depth: all a workload at zero reports.
    gateway_queue_depth: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class AutoscalerSpec:
    """One GPUAutoscaler, checked: what the controller needs to run its policy."""

    namespace: str
    name: str
    target: TargetRef
    policy: str
    workload: WorkloadConfig
    signals: Signals
    node_pool: str = ""
    placeholders: bool = True  # keep the policy's Decision.headroom as placeholder pods
    uid: str = ""  # the GPUAutoscaler's, for its placeholders' ownerReference
    hpa_target_gpu_utilization: float = 70.0
    keda_queue_target: float = 10.0
    keda_polling_interval_seconds: float = 30.0
    custom_behavior: bool = False  # spec.behavior is set: the operator's, for any policy
    schedules: tuple[Window, ...] = ()  # spec.schedules: cron windows' floors
    idle_seconds_to_zero: float = 300.0  # minReplicas 0: idle this long -> 0 replicas


def parse_spec(obj: Mapping[str, Any]) -> AutoscalerSpec:
    """A GPUAutoscaler object -> AutoscalerSpec. Raises SpecError naming the first bad field."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise SpecError("spec", "required")
    values = _check("", spec)
    lo, hi = values["minReplicas"], values["maxReplicas"]
    if lo > hi:
        raise SpecError("spec.minReplicas", f"{lo} is more than maxReplicas {hi}")
    shape = _shape(values)
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    workload = WorkloadConfig(
        name=f"{namespace}/{name}",
        min_replicas=lo,
        max_replicas=hi,
        slo_ttft_seconds=float(values["slo.ttftSeconds"]),
        target_attainment=(
            None if "slo.targetAttainment" not in values else float(values["slo.targetAttainment"])
        ),
        shape=shape,
        behavior=Behavior(
            scale_up=_scaling_rules(spec, "scaleUp", default_scale_up()),
            scale_down=_scaling_rules(spec, "scaleDown", default_scale_down()),
        ),
        cold_start_seconds=float(values["coldStartSeconds"]),
        node_provision_seconds=float(values["nodePool.provisionSeconds"]),
        gpus_per_node=values["nodePool.gpusPerNode"],
        batch_slots=values["batchSlots"],
    )
    queries = ((spec.get("signals") or {}).get("queries")) or {}
    return AutoscalerSpec(
        namespace=namespace,
        name=name,
        target=TargetRef(
            api_version=values["scaleTargetRef.apiVersion"],
            kind=values["scaleTargetRef.kind"],
            name=values["scaleTargetRef.name"],
        ),
        policy=values["policy"],
        workload=workload,
        signals=Signals(
            preset=values["signals.preset"],
            model=values.get("signals.model") or "",
            queries={QUERY_SIGNALS[k]: v for k, v in queries.items()},
            gateway_queue_depth=values.get("signals.gatewayQueueDepth") or "",
        ),
        node_pool=values.get("nodePool.name") or "",
        placeholders=values["nodePool.placeholders"],
        uid=meta.get("uid", ""),
        hpa_target_gpu_utilization=float(values["hpa.targetGPUUtilization"]),
        keda_queue_target=float(values["keda.queueTarget"]),
        keda_polling_interval_seconds=float(values["keda.pollingIntervalSeconds"]),
        custom_behavior=bool(spec.get("behavior")),
        schedules=_windows(spec.get("schedules") or (), maximum=hi),
        idle_seconds_to_zero=float(values["idleSecondsToZero"]),
    )


def _windows(items: Any, *, maximum: int) -> tuple[Window, ...]:
    """`spec.schedules` (already checked against FIELDS) -> Windows; a cron, duration or
    zone that cannot be read, or a floor above maxReplicas, names its item's field."""
    windows = []
    for i, item in enumerate(items):
        where = f"spec.schedules[{i}]"
        try:
            cron = parse_cron(item["schedule"])
        except ScheduleError as err:
            raise SpecError(f"{where}.schedule", str(err)) from None
        try:
            duration = parse_duration(item["duration"])
        except ScheduleError as err:
            raise SpecError(f"{where}.duration", str(err)) from None
        try:
            time_zone = zone(_given(item, "timeZone", FIELDS["schedules[].timeZone"].default))
        except ScheduleError as err:
            raise SpecError(f"{where}.timeZone", str(err)) from None
        floor = _given(item, "minReplicas", 0)
        if floor > maximum:
            raise SpecError(f"{where}.minReplicas", f"{floor} is more than maxReplicas {maximum}")
        windows.append(
            Window(
                name=item["name"],
                cron=cron,
                duration_seconds=duration,
                time_zone=time_zone,
                min_replicas=floor,
                headroom_replicas=_given(item, "headroomReplicas", 0),
            )
        )
    return tuple(windows)


def _check(prefix: str, node: Mapping[str, Any], where: str | None = None) -> dict[str, Any]:
    """Every scalar path under `prefix` -> its value or default, checked against FIELDS.

    `where` is how errors spell `prefix`: with the index of an array item, not `[]`.
    """
    where = prefix if where is None else where
    out: dict[str, Any] = {}
    for key in node:
        if f"{prefix}{key}" not in FIELDS:
            raise SpecError(f"spec.{where}{key}", "unknown field")
    # Direct children; array items (`key[]`) are checked with their array.
    children = [p for p in FIELDS if p.startswith(prefix) and not set(".[") & set(p[len(prefix) :])]
    for path in children:
        rule, key = FIELDS[path], path[len(prefix) :]
        value = node.get(key)
        if value is None:
            if rule.required:
                raise SpecError(f"spec.{where}{key}", "required")
            if rule.type == "object":
                out.update(_check(f"{path}.", {}))
            elif rule.default is not None:
                out[path] = rule.default
            continue
        _check_value(f"spec.{where}{key}", rule, value)
        if rule.type == "object":
            out.update(_check(f"{path}.", value, f"{where}{key}."))
        elif rule.type == "array":
            for i, item in enumerate(value):
                _check_value(f"spec.{where}{key}[{i}]", FIELDS[f"{path}[]"], item)
                _check(f"{path}[].", item, f"{where}{key}[{i}].")
        else:
            out[path] = value
    return out


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "boolean": (bool,),
}


def _check_value(path: str, rule: Rule, value: Any) -> None:
    if isinstance(value, bool) != (rule.type == "boolean") or not isinstance(
        value, _TYPES[rule.type]
    ):
        raise SpecError(path, f"must be {'an' if rule.type[0] in 'aeiou' else 'a'} {rule.type}")
    if rule.enum and value not in rule.enum:
        raise SpecError(path, f"{value!r} is not one of {', '.join(rule.enum)}")
    if rule.minimum is not None and value < rule.minimum:
        raise SpecError(path, f"{value} is less than {rule.minimum:g}")
    if rule.maximum is not None and value > rule.maximum:
        raise SpecError(path, f"{value} is more than {rule.maximum:g}")


def _shape(values: Mapping[str, Any]) -> GpuShape:
    kind = ShapeKind(values["gpu.kind"])
    if kind is ShapeKind.MIG and not values.get("gpu.migProfile"):
        raise SpecError("spec.gpu.migProfile", "required when gpu.kind is mig")
    return GpuShape(
        kind=kind,
        gpus=values["gpu.count"],
        mig_profile=values.get("gpu.migProfile") or "",
        shares_per_gpu=values["gpu.sharesPerGpu"],
    )


def _scaling_rules(spec: Mapping[str, Any], key: str, default: ScalingRules) -> ScalingRules:
    """HPA's defaulting: an absent direction takes HPA's rules; absent fields within one
    take that direction's defaults."""
    rules = ((spec.get("behavior") or {}).get(key)) or {}
    if not rules:
        return default
    policies = tuple(
        RatePolicy(RateKind(p["type"]), p["value"], p["periodSeconds"])
        for p in rules.get("policies") or ()
    )
    return ScalingRules(
        stabilization_window_seconds=_given(
            rules, "stabilizationWindowSeconds", default.stabilization_window_seconds
        ),
        policies=policies or default.policies,
        select_policy=SelectPolicy(_given(rules, "selectPolicy", default.select_policy)),
        tolerance=_given(rules, "tolerance", default.tolerance),
    )


def _given(node: Mapping[str, Any], key: str, default: Any) -> Any:
    """node[key], or `default` where it is absent or null: as `_check` reads a null, which
    a client-side apply or an API server that kept it can leave in the object."""
    value = node.get(key)
    return default if value is None else value
