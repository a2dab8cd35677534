"""A configured API client: in-cluster, from a kubeconfig, or at a URL."""

import os

from kubernetes import client, config

DEFAULT_TIMEOUT_SECONDS = 10.0


def api_client(
    *, url: str = "", kubeconfig: str = "", user_agent: str = "gpufleet"
) -> client.ApiClient:
    """`url` (no auth: the lab's fake API server) wins, then `kubeconfig`, then the
    in-cluster service account, then the default kubeconfig. Raises ValueError saying which
    source failed and why."""
    configuration = client.Configuration()
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    source = url or kubeconfig or ("in-cluster" if in_cluster else "the default kubeconfig")
    try:
        if url:
            configuration.host = url
        elif kubeconfig:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        elif in_cluster:
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(client_configuration=configuration)
    except (config.ConfigException, OSError) as err:
        raise ValueError(f"cannot configure the Kubernetes client from {source}: {err}") from None
    configuration.retries = False  # a controller retries at its next tick, not inside a call
    api = client.ApiClient(configuration)
    api.user_agent = user_agent
    return api
