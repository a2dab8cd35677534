"""`gpufleet autoscaler` flags and env vars (pydantic-settings; see gpufleet.settings)."""

from typing import Literal

from pydantic import AliasChoices, ValidationInfo, field_validator

from gpufleet.settings import CommandSettings, setting
from gpufleet.shared_settings import (
    debug_setting,
    kube_url_setting,
    kubeconfig_setting,
    log_format_setting,
)

SOURCES = "sources"
LOOP = "control loop"
HA = "high availability"
SIGNALS = "signals for HPA and KEDA"
OPS = "operations"


_WINDOW_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class AutoscalerSettings(CommandSettings):
    """All autoscaler settings. Field descriptions are the --help text."""

    prometheus_url: str = setting(
        "http://127.0.0.1:9090",
        "GPUFLEET_PROMETHEUS_URL",
        "--prometheus-url",
        group=SOURCES,
        help="Prometheus to read the signals from (its HTTP API).",
    )
    kube_url: str = kube_url_setting(group=SOURCES)
    kubeconfig: str = kubeconfig_setting(group=SOURCES)
    tick_seconds: float = setting(
        1.0,
        "GPUFLEET_AUTOSCALER_TICK_SECONDS",
        "--tick-seconds",
        group=LOOP,
        help="How often the loop runs; each policy still decides at its own interval "
        "(gpufleet 2 s, HPA's 15 s sync, KEDA's polling). Samples are read at each step "
        "(--scrape-interval-seconds) once it has passed: 1 s reads one within a second of "
        "its step, or one step later where its scrape had not landed then. A tick waits for "
        "Prometheus at most this long: a slower query's answer joins the next tick after it "
        "arrives.",
        gt=0,
    )
    scrape_interval_seconds: float = setting(
        5.0,
        "GPUFLEET_AUTOSCALER_SCRAPE_INTERVAL_SECONDS",
        "--scrape-interval-seconds",
        group=LOOP,
        help="Step of the range queries: the serving pods' scrape interval, so each scrape "
        "is one sample, as the policies were replayed with.",
        gt=0,
    )
    rate_window: str = setting(
        "30s",
        "GPUFLEET_AUTOSCALER_RATE_WINDOW",
        "--rate-window",
        group=LOOP,
        help="Range of the irate() in the signal queries; it must hold at least two scrapes, "
        "and four ride out a late or missed one.",
        pattern=r"^[0-9]+(ms|s|m|h)$",
    )
    headroom: bool = setting(
        True,
        "GPUFLEET_AUTOSCALER_HEADROOM",
        "--headroom",
        group=LOOP,
        help="Keep the node headroom GPUAutoscalers ask for (nodePool.placeholders): a "
        "CapacityBuffer where Cluster Autoscaler's CRD is installed, else placeholder pods. "
        "Off: as if every GPUAutoscaler set placeholders false, and the autoscaler needs no "
        "create or patch on deployments, podtemplates, capacitybuffers or priorityclasses "
        "(scale any placeholders left from before to 0 first).",
    )
    watch: bool = setting(
        True,
        "GPUFLEET_AUTOSCALER_WATCH",
        "--watch",
        group=LOOP,
        help="Keep what a tick reads of the cluster (GPUAutoscalers, pods, their targets, "
        "HPAs and ScaledObjects, CapacityBuffers, NodePools and their nodes, Kueue's "
        "Workloads) by list then "
        "watch, as client-go's informers do, and read each tick from there; a tick fails, "
        "holding every count, once a watch has been down a minute. Off: list them at every "
        "tick, which makes the API server send the whole cluster's pods each second.",
    )
    query_timeout_seconds: float = setting(
        5.0,
        "GPUFLEET_AUTOSCALER_QUERY_TIMEOUT_SECONDS",
        "--query-timeout-seconds",
        group=LOOP,
        help="A query slower than this fails (MissingMetrics: the count is held).",
        gt=0,
    )
    leader_elect: bool = setting(
        True,
        "GPUFLEET_AUTOSCALER_LEADER_ELECT",
        "--leader-elect",
        group=HA,
        help="Elect one writer among replicas through a Lease; the others gather and decide, "
        "so a failover takes over warm. Off: this replica writes.",
    )
    lease_namespace: str = setting(
        "",
        AliasChoices("GPUFLEET_AUTOSCALER_LEASE_NAMESPACE", "POD_NAMESPACE"),
        "--lease-namespace",
        group=HA,
        help="Namespace of the Lease (GPUFLEET_AUTOSCALER_LEASE_NAMESPACE, else "
        "$POD_NAMESPACE); empty: default.",
    )
    lease_name: str = setting(
        "gpufleet-autoscaler",
        "GPUFLEET_AUTOSCALER_LEASE_NAME",
        "--lease-name",
        group=HA,
        help="Name of the Lease.",
    )
    identity: str = setting(
        "",
        AliasChoices("GPUFLEET_AUTOSCALER_IDENTITY", "POD_NAME"),
        "--identity",
        group=HA,
        help="This replica's name in the Lease and in Events (GPUFLEET_AUTOSCALER_IDENTITY, "
        "else $POD_NAME); empty: the host name.",
    )
    lease_duration_seconds: float = setting(
        15.0,
        "GPUFLEET_AUTOSCALER_LEASE_DURATION_SECONDS",
        "--lease-duration-seconds",
        group=HA,
        help="client-go's default: how long a lease lasts without renewal.",
        gt=0,
    )
    renew_deadline_seconds: float = setting(
        10.0,
        "GPUFLEET_AUTOSCALER_RENEW_DEADLINE_SECONDS",
        "--renew-deadline-seconds",
        group=HA,
        help="client-go's default: the leader stops writing after this long without a "
        "renewal, before anyone else may take the lease.",
        gt=0,
    )
    retry_period_seconds: float = setting(
        2.0,
        "GPUFLEET_AUTOSCALER_RETRY_PERIOD_SECONDS",
        "--retry-period-seconds",
        group=HA,
        help="client-go's default: how often candidates try and the leader renews.",
        gt=0,
    )
    external_metrics_address: str = setting(
        "",
        "GPUFLEET_AUTOSCALER_EXTERNAL_METRICS_ADDRESS",
        "--external-metrics-address",
        group=SIGNALS,
        help="[host]:port of the external.metrics.k8s.io/v1beta1 HTTPS server (an "
        "aggregated API: authentication from kube-system/extension-apiserver-authentication, "
        "SubjectAccessReviews); empty: not served. Serving it registers nothing: the "
        "APIService is yours to create, and only one per cluster can exist.",
    )
    external_metrics_tls_cert_file: str = setting(
        "",
        "GPUFLEET_AUTOSCALER_EXTERNAL_METRICS_TLS_CERT_FILE",
        "--external-metrics-tls-cert-file",
        group=SIGNALS,
        help="Serving certificate (PEM) of the external metrics server; required with "
        "--external-metrics-address.",
    )
    external_metrics_tls_key_file: str = setting(
        "",
        "GPUFLEET_AUTOSCALER_EXTERNAL_METRICS_TLS_KEY_FILE",
        "--external-metrics-tls-key-file",
        group=SIGNALS,
        help="Its private key (PEM).",
    )
    keda_scaler_address: str = setting(
        "",
        "GPUFLEET_AUTOSCALER_KEDA_SCALER_ADDRESS",
        "--keda-scaler-address",
        group=SIGNALS,
        help="[host]:port of KEDA's external scaler gRPC API (a ScaledObject trigger of "
        "type external or external-push, scalerAddress pointing here); empty: not served.",
    )
    keda_scaler_tls_cert_file: str = setting(
        "",
        "GPUFLEET_AUTOSCALER_KEDA_SCALER_TLS_CERT_FILE",
        "--keda-scaler-tls-cert-file",
        group=SIGNALS,
        help="Serving certificate (PEM) for KEDA's enableTLS; with its key, the scaler "
        "speaks TLS only. Empty: plaintext.",
    )
    keda_scaler_tls_key_file: str = setting(
        "",
        "GPUFLEET_AUTOSCALER_KEDA_SCALER_TLS_KEY_FILE",
        "--keda-scaler-tls-key-file",
        group=SIGNALS,
        help="Its private key (PEM).",
    )
    keda_scaler_client_ca_file: str = setting(
        "",
        "GPUFLEET_AUTOSCALER_KEDA_SCALER_CLIENT_CA_FILE",
        "--keda-scaler-client-ca-file",
        group=SIGNALS,
        help="CA (PEM) that must have signed KEDA's client certificate (the trigger's "
        "tlsClientCert); empty: no client certificate asked for.",
    )
    metrics_address: str = setting(
        ":9402",
        "GPUFLEET_AUTOSCALER_METRICS_ADDRESS",
        "--metrics-address",
        group=OPS,
        help="[host]:port of /metrics (self-metrics) and /healthz; 9402, next to the "
        "exporter's 9400 and the plugin's 9401.",
    )
    debug: bool = debug_setting(group=OPS)
    log_format: Literal["text", "json"] = log_format_setting(group=OPS)

    @field_validator("rate_window")
    @classmethod
    def _two_scrapes(cls, value: str, info: ValidationInfo) -> str:
        """irate() needs two samples in its range: `0s` or one scrape's worth answered no
        sample, and every workload held on MissingMetrics."""
        number, unit = value[: len(value.rstrip("hms"))], value[len(value.rstrip("hms")) :]
        seconds = int(number) * _WINDOW_UNITS[unit]
        scrape = info.data.get("scrape_interval_seconds")
        if scrape is not None and seconds < 2 * scrape:
            raise ValueError(
                f"must hold at least two scrapes: at least {2 * scrape:g}s at "
                f"--scrape-interval-seconds {scrape:g}"
            )
        return value

    @field_validator("prometheus_url")
    @classmethod
    def _given(cls, value: str) -> str:
        if not value:  # the shape of one given is CommandSettings' to check
            raise ValueError("not an http:// or https:// URL")
        return value

    @field_validator("renew_deadline_seconds")
    @classmethod
    def _renew_before_the_lease_ends(cls, value: float, info: ValidationInfo) -> float:
        lease = info.data.get("lease_duration_seconds")
        if lease is not None and not value < lease:
            raise ValueError(f"must be shorter than --lease-duration-seconds ({lease:g})")
        return value
