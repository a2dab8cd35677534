"""Placeholder pods: capacity that is there before the replicas that need it.

GPU nodes take minutes to arrive. The policy's `Decision.headroom` is how many replicas it
expects to need within node provisioning plus a cold start; the controller keeps that many
placeholder pods: a Deployment of pause containers that ask for exactly the GPUs (and node
selection) one replica of the target asks for, at a negative priority. Karpenter and
Cluster Autoscaler see them pending and provision nodes for them, as for any pod; when the
real replicas come, the scheduler preempts the placeholders and the replicas bind at once
to nodes already there, where they only pay their own cold start.

Pure: manifests as plain dicts; `kube.cluster` writes them.
"""

import hashlib
from collections.abc import Mapping
from typing import Any

from gpufleet.autoscaler.core.spec import GROUP, KIND, VERSION
from gpufleet.core.label_values import LABEL_VALUE_MAX

PRIORITY_CLASS = "gpufleet-placeholder"
# Below every default (0): any ordinary pod preempts a placeholder, and a placeholder never
# preempts anything (preemptionPolicy Never).
PRIORITY_VALUE = -10
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
# On the placeholder Deployment and its pods: which GPUAutoscaler keeps them.
OWNER_LABEL = "autoscaling.gpufleet.dev/placeholder-for"
# The parts of a pod spec that decide where it may run: a placeholder copies them, so it
# holds capacity in the same node pool as the replica it stands for.
_PLACEMENT = ("nodeSelector", "affinity", "tolerations", "runtimeClassName")


_SUFFIX = "-placeholder"
NAME_MAX = 253  # an object's name
# The Deployment controller names its ReplicaSet `<deployment>-<pod-template-hash>`, the
# hash up to 10 characters: a Deployment named past 242 never gets a pod.
_NAME_MAX_BY_KIND = {"Deployment": NAME_MAX - 11}


def placeholder_name(autoscaler: str, *, kind: str) -> str:
    """The name of a GPUAutoscaler's placeholder object of `kind` (Deployment, PodTemplate,
    CapacityBuffer), in its namespace: its name and `-placeholder`; past that kind's
    limit, its name cut, then a hash of the whole. A GPUAutoscaler's name may be 253
    characters long. Names that fit stay as earlier releases made them."""
    limit = _NAME_MAX_BY_KIND.get(kind, NAME_MAX)
    name = f"{autoscaler}{_SUFFIX}"
    if len(name) <= limit:
        return name
    return f"{_cut_with_hash(autoscaler, limit - len(_SUFFIX))}{_SUFFIX}"


def _cut_with_hash(name: str, limit: int) -> str:
    """`name` cut to `limit` characters with its last 9 a `-` and 8 hex digits of the whole
    name's SHA-256: distinct names stay distinct, and the result stays a DNS name."""
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: limit - 9].rstrip('-.')}-{digest}"


def owner_label(autoscaler: str) -> str:
    """OWNER_LABEL's value for a GPUAutoscaler: its name, where it fits a label value (63
    characters); else its first 54, then a hash of the whole. A GPUAutoscaler's name may
    be 253 characters long, and the API server refused every object labelled with one
    past 63: such a workload never had headroom."""
    if len(autoscaler) <= LABEL_VALUE_MAX:
        return autoscaler
    return _cut_with_hash(autoscaler, LABEL_VALUE_MAX)


def placeholder_owner(metadata: Mapping[str, Any], *, kind: str) -> str | None:
    """The GPUAutoscaler whose headroom an object of `kind` (Deployment, PodTemplate,
    CapacityBuffer) holds, from its metadata: the GPUAutoscaler its controller reference
    names, where the object's name and owner label are the ones gpufleet gives it. None
    for any object gpufleet did not make, whatever its name: a user's own
    `chat-placeholder` is never written."""
    labels = metadata.get("labels") or {}
    for ref in metadata.get("ownerReferences") or ():
        if not isinstance(ref, Mapping) or ref.get("kind") != KIND or not ref.get("controller"):
            continue
        owner = ref.get("name")
        if (
            str(ref.get("apiVersion", "")).partition("/")[0] == GROUP
            and isinstance(owner, str)
            and metadata.get("name") == placeholder_name(owner, kind=kind)
            and labels.get(OWNER_LABEL) == owner_label(owner)
        ):
            return owner
    return None


def priority_class() -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": PRIORITY_CLASS},
        "value": PRIORITY_VALUE,
        "preemptionPolicy": "Never",
        "globalDefault": False,
        "description": "gpufleet placeholder pods: GPU capacity held for replicas that "
        "will need it within node provisioning; any other pod preempts them.",
    }


def gpu_requests(pod_spec: Mapping[str, Any]) -> dict[str, str]:
    """The extended resources (nvidia.com/*, and any other `x/y` name) one pod of this spec
    asks for, summed over its containers: what a placeholder must hold for it."""
    totals: dict[str, int] = {}
    for container in pod_spec.get("containers") or ():
        limits = (container.get("resources") or {}).get("limits") or {}
        for name, value in limits.items():
            if "/" in name and str(value).isdigit():
                totals[name] = totals.get(name, 0) + int(value)
    return {name: str(count) for name, count in sorted(totals.items())}


def placeholder_deployment(
    *,
    namespace: str,
    autoscaler: str,
    autoscaler_uid: str,
    replicas: int,
    template_spec: Mapping[str, Any],
) -> dict[str, Any]:
    """The placeholder Deployment standing for `replicas` pods of `template_spec` (the
    target's pod template spec): their GPUs and placement, none of their work. Owned by
    the GPUAutoscaler, so deleting it deletes them."""
    labels = {OWNER_LABEL: owner_label(autoscaler)}
    spec = {"priorityClassName": PRIORITY_CLASS, **placeholder_pod_spec(template_spec)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": owned_metadata(
            namespace=namespace, autoscaler=autoscaler, uid=autoscaler_uid, kind="Deployment"
        ),
        "spec": {
            "replicas": max(0, replicas),
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def placeholder_pod_spec(template_spec: Mapping[str, Any]) -> dict[str, Any]:
    """One placeholder: a pause container holding one replica's GPUs, placed as it is."""
    requests = gpu_requests(template_spec)
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,  # give the GPUs back at once when preempted
        "automountServiceAccountToken": False,
        # Pod Security's `restricted` level, enforced per namespace: there the API server
        # refused every placeholder pod, and the headroom counted as kept was none. No
        # runAsUser: pause runs as 65535, and OpenShift's SCCs assign their own uid.
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "placeholder",
                "image": PAUSE_IMAGE,
                "resources": {"requests": dict(requests), "limits": dict(requests)},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                    "readOnlyRootFilesystem": True,
                },
            }
        ],
    }
    spec.update({k: template_spec[k] for k in _PLACEMENT if k in template_spec})
    return spec


def owned_metadata(*, namespace: str, autoscaler: str, uid: str, kind: str) -> dict[str, Any]:
    """Metadata of an object of `kind` holding a GPUAutoscaler's headroom: named for it,
    labelled, owned by it (deleting the GPUAutoscaler deletes the object)."""
    return {
        "name": placeholder_name(autoscaler, kind=kind),
        "namespace": namespace,
        "labels": {
            OWNER_LABEL: owner_label(autoscaler),
            "app.kubernetes.io/managed-by": "gpufleet",
        },
        "ownerReferences": [
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "name": autoscaler,
                "uid": uid,
                "controller": True,
            }
        ],
    }
