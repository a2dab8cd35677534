"""`-m namespace:name`: the counters CSV from a ConfigMap, as dcgm-exporter reads it.

dcgm-exporter (`counters.readConfigMap`) splits the value on `:` into exactly two parts,
gets the ConfigMap and parses its `metrics` key as the CSV; a missing key, or any failure to
get the ConfigMap, ends the process with exit 1. Read once at startup, as there.
"""

from kubernetes import client

from gpufleet.kube.errors import KubeError, kube_call

METRICS_KEY = "metrics"
CALL_TIMEOUT_SECONDS = 10.0


def parse_configmap_ref(value: str) -> tuple[str, str]:
    """(namespace, name) of `namespace:name`; ValueError otherwise."""
    parts = value.split(":")
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"malformed configmap-data {value!r}: expected namespace:name")
    return parts[0], parts[1]


def read_counters_csv(api: client.ApiClient, value: str) -> str:
    """The CSV text under the ConfigMap's `metrics` key. Raises ValueError naming the
    ConfigMap and what is wrong (malformed reference, not readable, no `metrics` key)."""
    namespace, name = parse_configmap_ref(value)
    core = client.CoreV1Api(api)
    try:
        configmap = kube_call(
            lambda: core.read_namespaced_config_map(
                name, namespace, _request_timeout=CALL_TIMEOUT_SECONDS
            )
        )
    except KubeError as err:
        raise ValueError(f"could not retrieve ConfigMap {value!r}: {err}") from None
    data = configmap.data or {}
    if METRICS_KEY not in data:
        raise ValueError(f"malformed ConfigMap {value!r}: no {METRICS_KEY!r} key")
    return data[METRICS_KEY]
