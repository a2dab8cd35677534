"""What kube-apiserver's aggregator gives an extension API server, on the lab's fake one.

A serving CA and certificate for the extension server, a front-proxy CA and the
aggregator's proxy client certificate (`front-proxy-client`), the ConfigMap
`kube-system/extension-apiserver-authentication` as kube-apiserver publishes it, and the
RBAC a cluster has for the HPA controller (`external-metrics-reader`, as
custom-metrics-apiserver's manifests grant it, and discovery). Certificates are made per run.
Imported relatively, so the benchmarks (run from the repository root) use it too.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from cryptography.x509.oid import ExtendedKeyUsageOID
from kubernetes import client

from .pki import issue, write_pair

PROXY_NAME = "front-proxy-client"
HPA_USER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
# The official client sends each default header once, so one group: the one discovery
# is granted to in every cluster (`system:discovery`).
HPA_GROUP = "system:authenticated"


@dataclass(frozen=True)
class AggregatorPki:
    serving_ca: Path
    server_cert: Path
    server_key: Path
    proxy_ca: Path
    proxy_cert: Path  # CN front-proxy-client, signed by proxy_ca
    proxy_key: Path
    stranger_cert: Path  # signed by proxy_ca, but with a name not allowed
    stranger_key: Path


def make_pki(directory: Path) -> AggregatorPki:
    directory.mkdir(parents=True, exist_ok=True)
    serving_ca = issue("gpufleet serving CA")
    proxy_ca = issue("front-proxy-ca")
    serving_ca_path, _ = write_pair(directory, "serving-ca", serving_ca)
    proxy_ca_path, _ = write_pair(directory, "proxy-ca", proxy_ca)
    server = write_pair(
        directory,
        "server",
        issue("gpufleet-autoscaler", issuer=serving_ca, usage=ExtendedKeyUsageOID.SERVER_AUTH),
    )
    proxy = write_pair(
        directory,
        "proxy",
        issue(PROXY_NAME, issuer=proxy_ca, usage=ExtendedKeyUsageOID.CLIENT_AUTH),
    )
    stranger = write_pair(
        directory,
        "stranger",
        issue("someone-else", issuer=proxy_ca, usage=ExtendedKeyUsageOID.CLIENT_AUTH),
    )
    return AggregatorPki(serving_ca_path, *server, proxy_ca_path, *proxy, *stranger)


def publish_authentication(api: client.ApiClient, pki: AggregatorPki) -> None:
    """kube-apiserver's ConfigMap for extension servers, as a kubeadm cluster has it."""
    client.CoreV1Api(api).create_namespaced_config_map(
        "kube-system",
        {
            "metadata": {"name": "extension-apiserver-authentication"},
            "data": {
                "client-ca-file": pki.serving_ca.read_text(),
                "requestheader-client-ca-file": pki.proxy_ca.read_text(),
                "requestheader-allowed-names": json.dumps([PROXY_NAME]),
                "requestheader-username-headers": json.dumps(["X-Remote-User"]),
                "requestheader-group-headers": json.dumps(["X-Remote-Group"]),
                "requestheader-extra-headers-prefix": json.dumps(["X-Remote-Extra-"]),
            },
        },
    )


def grant_hpa_external_metrics(api: client.ApiClient) -> None:
    """`system:discovery` as kube-apiserver bootstraps it, and the HPA's metrics reader."""
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_cluster_role(
        {
            "metadata": {"name": "system:discovery"},
            "rules": [
                {
                    "nonResourceURLs": [
                        "/api",
                        "/api/*",
                        "/apis",
                        "/apis/*",
                        "/healthz",
                        "/livez",
                        "/openapi",
                        "/openapi/*",
                        "/readyz",
                        "/version",
                        "/version/",
                    ],
                    "verbs": ["get"],
                }
            ],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": "system:discovery"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:discovery",
            },
            "subjects": [{"kind": "Group", "name": "system:authenticated"}],
        }
    )
    rbac.create_cluster_role(
        {
            "metadata": {"name": "external-metrics-reader"},
            "rules": [
                {
                    "apiGroups": ["external.metrics.k8s.io"],
                    "resources": ["*"],
                    "verbs": ["list", "get", "watch"],
                }
            ],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": "hpa-external-metrics"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "external-metrics-reader",
            },
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": "horizontal-pod-autoscaler",
                    "namespace": "kube-system",
                }
            ],
        }
    )


def proxied_client(
    url: str,
    pki: AggregatorPki,
    *,
    user: str = HPA_USER,
    group: str = HPA_GROUP,
    cert: tuple[Path, Path] | None = None,
    with_cert: bool = True,
) -> client.ApiClient:
    """The official client as the aggregator reaches an extension server: TLS to its
    serving CA, the proxy client certificate, and the user in X-Remote-* headers."""
    config = client.Configuration()
    config.host = url
    config.ssl_ca_cert = str(pki.serving_ca)
    if with_cert:
        config.cert_file, config.key_file = map(str, cert or (pki.proxy_cert, pki.proxy_key))
    config.retries = False
    api = client.ApiClient(config)
    api.set_default_header("X-Remote-User", user)
    api.set_default_header("X-Remote-Group", group)
    return api
