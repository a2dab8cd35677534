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
    if url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"--kube-url {url}: not an http:// or https:// URL")
        configuration.host = url
    elif in_cluster and not kubeconfig:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except (config.ConfigException, OSError) as err:
            raise ValueError(f"cannot configure the Kubernetes client in-cluster: {err}") from None
    else:
        _load_kubeconfig(kubeconfig, configuration)
    configuration.retries = False  # a controller retries at its next tick, not inside a call
    api = client.ApiClient(configuration)
    api.user_agent = user_agent
    return api


def _load_kubeconfig(path: str, configuration: client.Configuration) -> None:
    """Load `path` (empty: the default kubeconfig); ValueError naming it on any failure."""
    source = path or "the default kubeconfig"
    try:
        config.load_kube_config(config_file=path or None, client_configuration=configuration)
    except (config.ConfigException, OSError, ValueError, yaml.YAMLError) as err:
        # ValueError: UnicodeDecodeError too (a binary file)
        raise ValueError(
            f"cannot configure the Kubernetes client from {source}: {' '.join(str(err).split())}"
        ) from None
    # YAML of the wrong shape (a string, a number where a list goes) fails inside the
    # client's loader with whatever it hit: said as what it is, not as Python's words.
    except (TypeError, AttributeError, KeyError) as err:
        raise ValueError(
            f"cannot configure the Kubernetes client from {source}: not a kubeconfig "
            f"({type(err).__name__} reading it)"
        ) from None
