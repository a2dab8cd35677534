"""A configured API client: in-cluster, from a kubeconfig, or at a URL."""

import os
from urllib.parse import urlsplit

import yaml
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
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError("not an http:// or https:// URL")
            configuration.host = url
        elif kubeconfig:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        elif in_cluster:
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(client_configuration=configuration)
    # A kubeconfig that is not YAML, or YAML of the wrong shape, fails inside the client's
    # loader with whatever its parsing hit: each is one bad file, said as one.
    except (
        config.ConfigException,
        OSError,
        ValueError,  # UnicodeDecodeError too
        TypeError,
        AttributeError,
        KeyError,
        yaml.YAMLError,
    ) as err:
        reason = " ".join(str(err).split()) or type(err).__name__
        raise ValueError(
            f"cannot configure the Kubernetes client from {source}: {reason}"
        ) from None
    configuration.retries = False  # a controller retries at its next tick, not inside a call
    api = client.ApiClient(configuration)
    api.user_agent = user_agent
    return api
