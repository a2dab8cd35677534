"""Cluster Autoscaler CapacityBuffers: the placeholders' headroom, without placeholder pods.

Where the `autoscaling.x-k8s.io` CapacityBuffer CRD is installed (kubernetes/autoscaler
PR #8508), Cluster Autoscaler keeps `spec.replicas` chunks of spare capacity shaped like a
PodTemplate: it provisions nodes for them as for pending pods, but the chunks are virtual,
so nothing is scheduled, preempted or terminated when the replicas come. The controller
expresses the same `Decision.headroom` as a buffer then: one PodTemplate (one replica's
GPUs and placement, as a placeholder pod has them) and one CapacityBuffer naming it.

Pure: manifests as plain dicts; `kube.cluster` writes them.
"""

from collections.abc import Mapping
from typing import Any

from gpufleet.autoscaler.core.placeholders import owned_metadata, placeholder_pod_spec

# Facts from kubernetes/autoscaler cluster-autoscaler/apis/capacitybuffer/.../v1beta1.
BUFFER_GROUP = "autoscaling.x-k8s.io"
BUFFER_VERSION = "v1beta1"
BUFFER_PLURAL = "capacitybuffers"
BUFFER_KIND = "CapacityBuffer"
# The default strategy: Cluster Autoscaler provisions nodes for the buffer's chunks.
ACTIVE_CAPACITY = "buffer.x-k8s.io/active-capacity"


def pod_template(
    *, namespace: str, autoscaler: str, autoscaler_uid: str, template_spec: Mapping[str, Any]
) -> dict[str, Any]:
    """The PodTemplate of one buffer chunk: one replica of `template_spec`'s GPUs and
    placement (no PriorityClass: Cluster Autoscaler's chunks never run)."""
    metadata = owned_metadata(
        namespace=namespace, autoscaler=autoscaler, uid=autoscaler_uid, kind="PodTemplate"
    )
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": metadata,
        "template": {
            "metadata": {"labels": dict(metadata["labels"])},
            "spec": placeholder_pod_spec(template_spec),
        },
    }


def capacity_buffer(
    *, namespace: str, autoscaler: str, autoscaler_uid: str, replicas: int
) -> dict[str, Any]:
    """The CapacityBuffer holding `replicas` chunks of the PodTemplate of the same name."""
    metadata = owned_metadata(
        namespace=namespace, autoscaler=autoscaler, uid=autoscaler_uid, kind=BUFFER_KIND
    )
    return {
        "apiVersion": f"{BUFFER_GROUP}/{BUFFER_VERSION}",
        "kind": BUFFER_KIND,
        "metadata": metadata,
        "spec": {
            "provisioningStrategy": ACTIVE_CAPACITY,
            "podTemplateRef": {"name": metadata["name"]},
            "replicas": max(0, replicas),
        },
    }
