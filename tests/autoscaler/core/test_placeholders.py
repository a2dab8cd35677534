"""Placeholder manifests: one replica's GPUs and placement, none of its work."""

from gpufleet.autoscaler.core.buffers import capacity_buffer, pod_template
from gpufleet.autoscaler.core.placeholders import (
    OWNER_LABEL,
    PRIORITY_CLASS,
    gpu_requests,
    owner_label,
    placeholder_deployment,
    placeholder_name,
    placeholder_owner,
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


def test_a_placeholder_meets_pod_securitys_restricted_level() -> None:
    """Pod Security admission (on since 1.25) refuses, in a namespace that enforces
    `restricted`, a pod without these: the placeholder Deployment stood at 0 pods there
    while its replicas counted as headroom kept. (The pod-security-standards page lists
    the level's checks.)"""
    body = placeholder_deployment(
        namespace="llm", autoscaler="chat", autoscaler_uid="u", replicas=1, template_spec=TEMPLATE
    )
    pod = body["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "runAsUser" not in pod["securityContext"]  # OpenShift's SCCs pick the uid


def test_a_name_past_a_label_values_63_characters_is_labelled_with_its_hash() -> None:
    """A GPUAutoscaler's name may be 253 characters; a label value at most 63, beginning and
    ending with a letter or digit. Labelled with the whole name, every headroom object was
    refused."""
    long = "a" * 53 + "-" + "b" * 20
    label = owner_label(long)
    assert len(label) <= 63 and label[0].isalnum() and label[-1].isalnum()
    assert label != owner_label(long + "c")  # two long names share no label
    assert owner_label("chat") == "chat"  # short names keep theirs, as before
    body = placeholder_deployment(
        namespace="llm", autoscaler=long, autoscaler_uid="u", replicas=1, template_spec=TEMPLATE
    )
    assert body["spec"]["selector"]["matchLabels"] == {OWNER_LABEL: label}
    assert placeholder_owner(body["metadata"], kind="Deployment") == long
    relabelled = {**body["metadata"], "labels": {OWNER_LABEL: long}}
    assert placeholder_owner(relabelled, kind="Deployment") is None


def test_a_name_past_242_characters_is_cut_and_its_owner_read_from_its_reference() -> None:
    """The placeholder Deployment's name keeps its ReplicaSet's name within 253 characters,
    stays a DNS name, and differs between names that share their first 230 characters. Its
    owner is the GPUAutoscaler its controller reference names, never one read from the
    name."""
    long = "a" * 220 + "." + "b" * 32  # cut just after the dot
    name = placeholder_name(long, kind="Deployment")
    assert len(name) <= 242 and name.endswith("-placeholder") and ".-" not in name
    assert name != placeholder_name(long[:-1] + "c", kind="Deployment")
    assert placeholder_name("chat", kind="Deployment") == "chat-placeholder"  # as before
    meta = placeholder_deployment(
        namespace="llm", autoscaler=long, autoscaler_uid="u", replicas=1, template_spec=TEMPLATE
    )["metadata"]
    assert placeholder_owner(meta, kind="Deployment") == long
    unowned = {**meta, "ownerReferences": []}  # a user's look-alike
    assert placeholder_owner(unowned, kind="Deployment") is None
    other = [{**meta["ownerReferences"][0], "name": "chat"}]
    assert placeholder_owner({**meta, "ownerReferences": other}, kind="Deployment") is None


def test_a_buffer_and_its_template_keep_the_names_earlier_releases_gave_them() -> None:
    """Only a Deployment's name is cut at 242 (its ReplicaSet's name would not fit); a
    PodTemplate or CapacityBuffer may be 253, so one an earlier release made for a name
    of 231 to 241 characters is still gpufleet's, and released, not orphaned."""
    name = "x" * 235
    owner = {"namespace": "llm", "autoscaler": name, "autoscaler_uid": "u"}
    for body in (
        pod_template(**owner, template_spec=TEMPLATE),
        capacity_buffer(**owner, replicas=1),
    ):
        assert body["metadata"]["name"] == f"{name}-placeholder"  # what f6fb694 made
        assert placeholder_owner(body["metadata"], kind=body["kind"]) == name
    assert placeholder_name(name, kind="Deployment") != f"{name}-placeholder"
    for kind in ("PodTemplate", "CapacityBuffer"):
        assert len(placeholder_name("x" * 253, kind=kind)) == 253
