"""A KEDA `external` trigger's `metadata`, read into what the gRPC scaler answers: pure.

KEDA hands the trigger's metadata map to every call as `ScaledObjectRef.scalerMetadata`
(beside its own `scalerAddress`, which is ignored here). Keys:
- `autoscaler` (required): the GPUAutoscaler, in the ScaledObject's namespace, whose
  cached signals to serve;
- `metric`: one of `extmetrics.METRICS`, `gpufleet_` optional (default
  `gpufleet_desired_replicas`: the HPA that KEDA creates then follows gpufleet's decision);
- `targetValue`: the HPA's AverageValue target (default 1 for the desired replicas,
  required for the others, at least 0.001: KEDA writes it in thousandths, and a target
  of 0 makes an HPA the API server refuses);
- `activationValue`: active when the value is above it (default 0), KEDA's activation
  semantics.
Each may be given as `<key>FromEnv` instead, naming an env var of the scale target's
container: KEDA resolves it and passes the value on under that key.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.autoscaler.core.extmetrics import DESIRED_REPLICAS, METRICS
from gpufleet.core.numbers import finite_float


class MetadataError(ValueError):
    """Bad trigger metadata; the message names the key."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalerTrigger:
    autoscaler: str
    metric: str
    target: float
    activation: float


# KEDA formats the target with three decimals (older releases truncated it to milli):
# below one thousandth the HPA's target reads 0, and the API server refuses the HPA.
MIN_TARGET = 0.001


def parse_metadata(metadata: Mapping[str, str]) -> ScalerTrigger:
    metadata = _resolved(metadata)
    autoscaler = metadata.get("autoscaler", "").strip()
    if not autoscaler:
        raise MetadataError("scalerMetadata.autoscaler: required (the GPUAutoscaler's name)")
    metric = metadata.get("metric", "").strip() or DESIRED_REPLICAS
    if not metric.startswith("gpufleet_"):
        metric = f"gpufleet_{metric}"
    if metric not in METRICS:
        raise MetadataError(
            f"scalerMetadata.metric: {metadata['metric']!r} is not one of {', '.join(METRICS)}"
        )
    if "targetValue" in metadata:
        target = _number(metadata, "targetValue")
        if target < MIN_TARGET:
            raise MetadataError(
                f"scalerMetadata.targetValue: {target:g} must be at least {MIN_TARGET:g}"
                " (KEDA writes the HPA's target in thousandths)"
            )
    elif metric == DESIRED_REPLICAS:
        target = 1.0
    else:
        raise MetadataError(f"scalerMetadata.targetValue: required for {metric}")
    activation = _number(metadata, "activationValue") if "activationValue" in metadata else 0.0
    return ScalerTrigger(autoscaler=autoscaler, metric=metric, target=target, activation=activation)


def _resolved(metadata: Mapping[str, str]) -> dict[str, str]:
    """`<key>FromEnv` as `<key>` where `<key>` itself is not given: KEDA resolves the env
    var but keeps the key's name (`parseExternalScalerMetadata`), so a
    `targetValueFromEnv` went unread and the default target applied."""
    out = dict(metadata)
    for key, value in metadata.items():
        base = key.removesuffix("FromEnv")
        if base != key and base not in metadata:
            out[base] = value
    return out


def _number(metadata: Mapping[str, str], key: str) -> float:
    text = metadata[key]
    try:
        return finite_float(text)
    except ValueError as err:
        raise MetadataError(f"scalerMetadata.{key}: {text!r} {err}") from None
