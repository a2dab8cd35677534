"""Workloads on the lab's fake API server, created through the official client as a user would."""

from kubernetes import client

from gpufleet.lab.workload import LABELS, create_deployment


def api_client(url: str) -> client.ApiClient:
    config = client.Configuration()
    config.host = url
    return client.ApiClient(config)


def create_vllm(
    api: client.ApiClient,
    namespace: str,
    *,
    replicas: int = 1,
    gpus: int | None = None,
    ready_pod: str = "",
    node: str = "gpu-node-0",
) -> None:
    """The namespace and a Deployment `vllm` (pods labelled app=vllm); with `ready_pod`, one
    such pod already Ready on `node`, for tests that run no lab cluster."""
    container = create_deployment(api, namespace, replicas=replicas, gpus=gpus)
    core = client.CoreV1Api(api)
    if ready_pod:
        core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": ready_pod, "labels": LABELS},
                "spec": {"nodeName": node, "containers": [container]},
            },
        )
        core.patch_namespaced_pod_status(
            ready_pod,
            namespace,
            {
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "lastTransitionTime": "2026-11-24T00:00:00Z",
                        }
                    ]
                }
            },
        )


def create_autoscaler(
    api: client.ApiClient, namespace: str, spec: dict, name: str = "chat"
) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "autoscaling.gpufleet.dev",
        "v1alpha1",
        namespace,
        "gpuautoscalers",
        {
            "apiVersion": "autoscaling.gpufleet.dev/v1alpha1",
            "kind": "GPUAutoscaler",
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def create_scaled_object(api: client.ApiClient, namespace: str, name: str, spec: object) -> None:
    """A KEDA ScaledObject `name` with this spec (whatever its shape: the CRD keeps it)."""
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "keda.sh",
        "v1alpha1",
        namespace,
        "scaledobjects",
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": name},
            "spec": spec,
        },
    )
