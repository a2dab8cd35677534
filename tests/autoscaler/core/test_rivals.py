"""GPUAutoscalers sharing a scale target: the oldest scales it."""

from gpufleet.autoscaler.core.rivals import rival_autoscalers


def gpa(name: str, target: str, created: str, namespace: str = "llm", kind: str = "Deployment"):
    return {
        "metadata": {"namespace": namespace, "name": name, "creationTimestamp": created},
        "spec": {"scaleTargetRef": {"kind": kind, "name": target}},
    }


def test_the_oldest_on_a_target_scales_it_and_the_rest_stand_aside() -> None:
    objects = [
        gpa("b", "vllm", "2026-12-01T00:00:02Z"),
        gpa("a", "vllm", "2026-12-01T00:00:05Z"),
        gpa("c", "vllm", "2026-12-01T00:00:02Z"),  # as old as b: by name
        gpa("d", "vllm", "2026-12-01T00:00:01Z", namespace="other"),  # another namespace
        gpa("e", "vllm", "2026-12-01T00:00:01Z", kind="StatefulSet"),  # another kind
        {"metadata": {"namespace": "llm", "name": "bad"}, "spec": {"scaleTargetRef": "x"}},
    ]
    assert rival_autoscalers(objects) == {
        ("llm", "a"): "GPUAutoscaler/b",
        ("llm", "c"): "GPUAutoscaler/b",
    }
