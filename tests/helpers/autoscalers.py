"""GPUAutoscalers and pods as the controller's parts hold them, for tests of one part alone."""

import dataclasses
from typing import Any

from gpufleet.autoscaler.controller.workload import Workload, new_workload
from gpufleet.autoscaler.core.replicas import PodState
from gpufleet.autoscaler.core.spec import parse_spec


def workload(
    namespace: str, gateway: str = "", *, old: Workload | None = None, **spec: Any
) -> Workload:
    """A KEDA-policy GPUAutoscaler `namespace/chat` of Deployment vllm; `spec` adds keys.
    With `old`, its spec changed: its next generation, with the history it kept."""
    spec = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
        "maxReplicas": 8,
        "policy": "keda",
        "keda": {"queueTarget": 10},
        **spec,
    }
    if gateway:
        spec["signals"] = {"gatewayQueueDepth": gateway}
    obj = {
        "apiVersion": "autoscaling.gpufleet.dev/v1alpha1",
        "kind": "GPUAutoscaler",
        "metadata": {"namespace": namespace, "name": "chat", "uid": namespace},
        "spec": spec,
    }
    generation = obj["metadata"]["generation"] = 1 if old is None else old.generation + 1
    return new_workload(
        parse_spec(obj),
        generation,
        old,
        {},
        rate_window="5s",
        history_seconds=60,
        gpufleet_headroom=None,
        placeholders=False,
    )


def pod(namespace: str, name: str, **fields: Any) -> PodState:
    """A pod with every field not given left at None (or its default)."""
    required = {
        f.name: None
        for f in dataclasses.fields(PodState)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    return PodState(**(required | {"namespace": namespace, "name": name, "labels": {}} | fields))
