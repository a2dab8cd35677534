"""GPUAutoscalers that share a scale target: one scales it, the others stand aside. Pure."""

from typing import Any


def rival_autoscalers(objects: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """GPUAutoscalers another one already scales the target of: each target is the oldest
    one's (by creation, then name); the others get that one's name, and stand aside as
    from an HPA (two of them both wrote the scale every tick, flipping it)."""
    by_target: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    for obj in objects:
        meta = obj.get("metadata") or {}
        ref = (obj.get("spec") or {}).get("scaleTargetRef") or {}
        if not isinstance(ref, dict):
            continue  # a bad spec: reported as such, scaling nothing
        namespace = meta.get("namespace", "")
        target = (namespace, str(ref.get("kind", "")), str(ref.get("name", "")))
        by_target.setdefault(target, []).append(
            (str(meta.get("creationTimestamp", "")), meta.get("name", ""))
        )
    rivals: dict[tuple[str, str], str] = {}
    for (namespace, _, _), claims in by_target.items():
        owner, *others = sorted(claims)
        for _, name in others:
            rivals[(namespace, name)] = f"GPUAutoscaler/{owner[1]}"
    return rivals
