"""A configured API client: in-cluster, from a kubeconfig, or at a URL."""

import os

import yaml
from kubernetes import client, config

from gpufleet.core.urls import check_http_url

DEFAULT_TIMEOUT_SECONDS = 10.0


def api_client(
    *,
    url: str = "",
    kubeconfig: str = "",
    user_agent: str = "gpufleet",
    timeout_seconds: float | None = None,
) -> client.ApiClient:
    """`url` (no auth: the lab's fake API server) wins, then `kubeconfig`, then the
    in-cluster service account, then the default kubeconfig. Raises ValueError saying which
    source failed and why. `timeout_seconds`: every call's that sets none of its own (a
    watch, left None, waits as long as its server-side timeout)."""
    configuration = client.Configuration()
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if url:
        try:
            check_http_url(url)
        except ValueError as err:
            raise ValueError(f"--kube-url {url}: {err}") from None
        configuration.host = url
    elif in_cluster and not kubeconfig:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except (config.ConfigException, OSError) as err:
            raise ValueError(f"cannot configure the Kubernetes client in-cluster: {err}") from None
    else:
        _load_kubeconfig(kubeconfig, configuration)
    configuration.retries = False  # a controller retries at its next tick, not inside a call
    # client-go's TCP keepalive (30 s idle): a watch through a proxy that dropped it
    # silently would otherwise wait out its timeout, minutes, on objects that moved on.
    configuration.keep_alive = True
    if timeout_seconds is None:
        api = client.ApiClient(configuration)
    else:
        api = _Timed(configuration, timeout_seconds)
    api.user_agent = user_agent
    return api


class _Timed(client.ApiClient):
    """An API client whose calls time out unless they say otherwise: a hung API server held
    the autoscaler's tick, every workload's, for as long as it did not answer."""

    def __init__(self, configuration: client.Configuration, timeout_seconds: float) -> None:
        super().__init__(configuration)
        self._timeout_seconds = timeout_seconds

    def call_api(
        self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None
    ):
        if _request_timeout is None:
            _request_timeout = self._timeout_seconds
        return super().call_api(method, url, header_params, body, post_params, _request_timeout)


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
