"""Placeholder manifests: one replica's GPUs and placement, none of its work."""

from gpufleet.autoscaler.core.placeholders import (
    OWNER_LABEL,
    PRIORITY_CLASS,
    gpu_requests,
    placeholder_deployment,
    priority_class,
)

TEMPLATE = {
    "containers": [
        {"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "8"}}},
        {"name": "sidecar", "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "1Gi"}}},
    ],
    "nodeSelector": {"karpenter.sh/nodepool": "h100"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
    "serviceAccountName": "vllm",
}


def test_a_placeholder_holds_one_replicas_gpus_where_it_would_run() -> None:
    body = placeholder_deployment(
        namespace="llm", autoscaler="chat", autoscaler_uid="u-1", replicas=3, template_spec=TEMPLATE
    )
    assert body["metadata"]["name"] == "chat-placeholder"
    assert body["spec"]["replicas"] == 3
    pod = body["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == PRIORITY_CLASS
    assert pod["terminationGracePeriodSeconds"] == 0
    (container,) = pod["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "3"}  # summed, GPUs only
    assert pod["nodeSelector"] == TEMPLATE["nodeSelector"]
    assert pod["tolerations"] == TEMPLATE["tolerations"]
    assert "serviceAccountName" not in pod  # placement only, nothing of the workload's own
    assert body["spec"]["selector"]["matchLabels"] == {OWNER_LABEL: "chat"}
    (owner,) = body["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("GPUAutoscaler", "chat", "u-1")


def test_mig_and_shared_resources_are_held_as_named() -> None:
    spec = {"containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}}]}
    assert gpu_requests(spec) == {"nvidia.com/mig-1g.10gb": "1"}
    assert gpu_requests({"containers": [{}]}) == {}


def test_the_priority_class_is_below_every_default_and_never_preempts() -> None:
    body = priority_class()
    assert body["value"] < 0 and body["preemptionPolicy"] == "Never"
    assert body["globalDefault"] is False
