"""CapacityBuffer manifests: Cluster Autoscaler's fields (kubernetes/autoscaler
apis/capacitybuffer v1beta1), holding what a placeholder pod would."""

from gpufleet.autoscaler.core.buffers import capacity_buffer, pod_template
from gpufleet.autoscaler.core.placeholders import OWNER_LABEL

TEMPLATE = {
    "containers": [{"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "8"}}}],
    "nodeSelector": {"karpenter.sh/nodepool": "h100"},
    "serviceAccountName": "vllm",
}
OWNER = {"namespace": "llm", "autoscaler": "chat", "autoscaler_uid": "u-1"}


def test_a_buffer_names_its_pod_template_and_holds_the_headroom() -> None:
    body = capacity_buffer(**OWNER, replicas=3)
    assert (body["apiVersion"], body["kind"]) == ("autoscaling.x-k8s.io/v1beta1", "CapacityBuffer")
    assert body["spec"] == {
        "provisioningStrategy": "buffer.x-k8s.io/active-capacity",
        "podTemplateRef": {"name": "chat-placeholder"},
        "replicas": 3,
    }
    assert capacity_buffer(**OWNER, replicas=-2)["spec"]["replicas"] == 0
    (owner,) = body["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("GPUAutoscaler", "chat", "u-1")


def test_a_chunk_is_one_replicas_gpus_and_placement_and_never_runs() -> None:
    body = pod_template(**OWNER, template_spec=TEMPLATE)
    assert (body["kind"], body["metadata"]["name"]) == ("PodTemplate", "chat-placeholder")
    spec = body["template"]["spec"]
    (container,) = spec["containers"]
    assert container["resources"]["requests"] == {"nvidia.com/gpu": "2"}
    assert spec["nodeSelector"] == TEMPLATE["nodeSelector"]
    assert "priorityClassName" not in spec and "serviceAccountName" not in spec
    assert body["template"]["metadata"]["labels"][OWNER_LABEL] == "chat"
