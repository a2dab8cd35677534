"""Labels a daemon owns on its Node, set through the Kubernetes API.

The plugin publishes GFD's labels this way where Node Feature Discovery does not run. It
must remove a label it set earlier and no longer computes (a MIG profile that is gone), yet
never touch labels others set under the same `nvidia.com/` prefix (the GPU Operator's
`nvidia.com/gpu.deploy.*`). So the names it set are kept in an annotation on the Node, and
only those are ever deleted.
"""

from collections.abc import Mapping

from kubernetes import client

from gpufleet.kube.connect import DEFAULT_TIMEOUT_SECONDS
from gpufleet.kube.events import MERGE_PATCH

# The annotation listing the labels an owner set, comma separated.
OWNED_ANNOTATION = "gpufleet.dev/{owner}-labels"


def apply_node_labels(
    api: client.ApiClient,
    node_name: str,
    labels: Mapping[str, str],
    *,
    owner: str,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
) -> dict[str, str | None]:
    """Make the Node's labels owned by `owner` exactly `labels`: set them, delete the ones
    it set before and no longer has. One read and one JSON merge patch (RFC 7386: a null
    deletes). Returns the label part of the patch. Raises kubernetes' ApiException."""
    core = client.CoreV1Api(api)
    annotation = OWNED_ANNOTATION.format(owner=owner)
    node = core.read_node(node_name, _request_timeout=timeout_seconds)
    before = (node.metadata.annotations or {}).get(annotation, "")
    stale = {name for name in before.split(",") if name} - set(labels)
    patch: dict[str, str | None] = {**dict.fromkeys(sorted(stale)), **labels}
    body = {"metadata": {"labels": patch, "annotations": {annotation: ",".join(sorted(labels))}}}
    core.patch_node(node_name, body, _content_type=MERGE_PATCH, _request_timeout=timeout_seconds)
    return patch
