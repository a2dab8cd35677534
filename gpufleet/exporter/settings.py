"""The exporter's settings: dcgm-exporter's flags and env vars, plus gpufleet's own.

Every flag in dcgm-exporter's `pkg/cmd/app.go`, as gpufleet last compared them, is
accepted with its name, alias, env var and default (but `-c`: 5 s, not 30 s, its help says
why), booleans in urfave/cli's `--flag=false` form too, so an existing DaemonSet spec works
unchanged. Flags that only make sense with
DCGM itself (host engine, DCGM logs, debug dumps, pprof, bind/unbind watch) are in the
IGNORED group: accepted, and warned about at startup when set to other than the default.
"""

from pathlib import Path
from typing import Literal

from pydantic import field_validator

from gpufleet.settings import CommandSettings, setting
from gpufleet.shared_settings import kube_url_setting, kubeconfig_setting, sim_fleet_setting

# Where dcgm-exporter's image keeps its CSV; when this default is absent, the embedded copy
# of the same default list is used, so the exporter starts anywhere with no file.
DCGM_DEFAULT_COLLECTORS = Path("/etc/dcgm-exporter/default-counters.csv")
EMBEDDED_COLLECTORS = Path(__file__).with_name("default-counters.csv")


DCGM = "dcgm-exporter compatible"
K8S = "kubernetes attribution"
WEB = "web"
GPUFLEET = "gpufleet"
IGNORED = "accepted for compatibility, no effect (DCGM-only)"


class ExporterSettings(CommandSettings):
    """All exporter settings. Field descriptions are the --help text."""

    collectors: Path = setting(
        DCGM_DEFAULT_COLLECTORS,
        "DCGM_EXPORTER_COLLECTORS",
        "-f",
        "--collectors",
        group=DCGM,
        help="Counters CSV (dcgm-exporter format: field, type, help). If the default path is "
        "missing, the embedded dcgm-exporter default list is used.",
    )
    address: str = setting(
        ":9400",
        "DCGM_EXPORTER_LISTEN",
        "-a",
        "--address",
        group=DCGM,
        help="Address to serve /metrics and /health on, as [host]:port.",
    )
    collect_interval_ms: int = setting(
        5000,
        "DCGM_EXPORTER_INTERVAL",
        "-c",
        "--collect-interval",
        group=DCGM,
        help="Collection interval in milliseconds. 5000, not dcgm-exporter's 30000: 30 s "
        "made data up to 40 s old (DCGM#170), too slow for autoscaling, and a collection "
        "costs 7-9 ms of CPU per GPU on an H200 (most of it in the driver), under 2% of "
        "a core for 8 GPUs at 5 s. Values below 100 are rejected: they are almost always "
        "seconds mistaken for milliseconds.",
    )
    kubernetes: bool = setting(
        False,
        "DCGM_EXPORTER_KUBERNETES",
        "-k",
        "--kubernetes",
        group=K8S,
        help="Attribute GPUs, MIG slices and time-sliced shares to pods via the kubelet "
        "pod-resources API.",
    )
    kubernetes_gpu_id_type: Literal["uid", "device-name"] = setting(
        "uid",
        "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE",
        "--kubernetes-gpu-id-type",
        group=K8S,
        help="How the device plugin names GPUs: 'uid' (GPU-/MIG- UUIDs) or 'device-name' "
        "(nvidiaN, GKE). Both forms are recognised either way.",
    )
    kubernetes_enable_pod_labels: bool = setting(
        False,
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS",
        "--kubernetes-enable-pod-labels",
        group=K8S,
        help="Copy pod labels (keys sanitised to [a-zA-Z0-9_]) onto pod series, from the "
        "Kubernetes API (pods on NODE_NAME, listed once then watched; RBAC: list, watch "
        "pods). With -k.",
    )
    kubernetes_enable_pod_uid: bool = setting(
        False,
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID",
        "--kubernetes-enable-pod-uid",
        group=K8S,
        help="Add the pod_uid label (read from the kubelet's device checkpoint; "
        "no API access needed).",
    )
    kubernetes_pod_label_allowlist_regex: str = setting(
        "",
        "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",
        "--kubernetes-pod-label-allowlist-regex",
        group=K8S,
        repeat=True,
        help="Regexes, comma separated or the flag repeated, matched anywhere in a pod "
        "label's key: only matching labels are copied (with --kubernetes-enable-pod-labels). "
        "Empty: all.",
    )
    kubernetes_virtual_gpus: bool = setting(
        False,
        "KUBERNETES_VIRTUAL_GPUS",
        "--kubernetes-virtual-gpus",
        group=K8S,
        help="Add the vgpu label (time-slicing replica index) to pod series.",
    )
    kubernetes_enable_dra: bool = setting(
        False,
        "KUBERNETES_ENABLE_DRA",
        "--kubernetes-enable-dra",
        group=K8S,
        help="Attribute GPUs and MIG slices allocated by DRA claims of the gpu.nvidia.com "
        "driver (pod-resources dynamic_resources, joined with the API's ResourceSlices; "
        "RBAC: list, watch resourceslices), with the dra_* labels. With -k.",
    )
    pod_resources_kubelet_socket: Path = setting(
        Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
        "DCGM_POD_RESOURCES_KUBELET_SOCKET",
        "--pod-resources-kubelet-socket",
        group=K8S,
        help="The kubelet's pod-resources socket.",
    )
    nvidia_resource_names: str = setting(
        "",
        "NVIDIA_RESOURCE_NAMES",
        "--nvidia-resource-names",
        group=K8S,
        repeat=True,
        help="Extra resource names to attribute, comma separated or the flag repeated "
        "(nvidia.com/gpu, nvidia.com/gpu.shared and nvidia.com/mig-* are always recognised).",
    )
    hpc_job_mapping_dir: str = setting(
        "",
        "DCGM_HPC_JOB_MAPPING_DIR",
        "--hpc-job-mapping-dir",
        group=K8S,
        help="HPC job mapping. Not yet supported: accepted with a warning.",
    )
    kubelet_checkpoint: Path = setting(
        Path("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"),
        "GPUFLEET_KUBELET_CHECKPOINT",
        "--kubelet-checkpoint",
        group=K8S,
        help="The kubelet's device-manager checkpoint: gives pod UIDs for pod_uid and for "
        "per-pod values on shared GPUs. Missing means no per-pod split (counted).",
    )
    kubelet_refresh_seconds: float = setting(
        5.0,
        "GPUFLEET_KUBELET_REFRESH",
        "--kubelet-refresh",
        group=K8S,
        help="Seconds between pod-resources List calls (in the background, never per "
        "scrape), and between retries of a failed Kubernetes API watch. A deleted pod's "
        "series go within one refresh. 5 s is 0.2 calls/s against the kubelet's 100/s limit.",
        gt=0,
    )
    kube_url: str = kube_url_setting(group=K8S, used_for="for pod labels, DRA and -m")
    kubeconfig: str = kubeconfig_setting(group=K8S)
    proc_root: Path = setting(
        Path("/proc"),
        "GPUFLEET_PROC_ROOT",
        "--proc-root",
        group=K8S,
        help="Where /proc/<pid>/cgroup is read to map GPU processes to pods (hostPID, or the "
        "host's /proc mounted here).",
    )
    devices: str = setting(
        "f",
        "DCGM_EXPORTER_DEVICES_STR",
        "-d",
        "--devices",
        group=DCGM,
        help="Which entities to report: 'f' (every GPU and MIG instance; a MIG GPU keeps its "
        "whole-GPU fields, its instances their own), 'g[:range]' GPUs only, 'i[:range]' MIG "
        "instances only (no whole-GPU fields); range like 0-3,5, of GPU indexes for 'g' and "
        "of DCGM GPU-instance entity ids for 'i' (as dcgm-exporter: GPU n's instances from n "
        "times its MIG device count, e.g. 7 for an H100's GPU 1).",
    )
    switch_devices: str = setting(
        "f",
        "DCGM_EXPORTER_OTHER_DEVICES_STR",
        "-s",
        "--switch-devices",
        group=IGNORED,
        help="NVSwitch selection (DCGM only).",
    )
    cpu_devices: str = setting(
        "f",
        "DCGM_EXPORTER_CPU_DEVICES_STR",
        "-p",
        "--cpu-devices",
        group=IGNORED,
        help="CPU selection (DCGM only).",
    )
    configmap_data: str = setting(
        "none",
        "DCGM_EXPORTER_CONFIGMAP_DATA",
        "-m",
        "--configmap-data",
        group=DCGM,
        help="Read the counters CSV from the 'metrics' key of the ConfigMap "
        "'namespace:name' at startup, instead of -f; 'none' to use -f.",
    )
    web_config_file: Path | None = setting(
        None,
        "DCGM_EXPORTER_WEB_CONFIG_FILE",
        "--web-config-file",
        group=WEB,
        help="Prometheus exporter-toolkit web config (TLS, basic auth).",
    )
    web_systemd_socket: bool = setting(
        False,
        "DCGM_EXPORTER_SYSTEMD_SOCKET",
        "--web-systemd-socket",
        group=IGNORED,
        help="systemd socket activation (not supported).",
    )
    xid_count_window_size: int = setting(
        300000,
        "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE",
        "-x",
        "--xid-count-window-size",
        group=DCGM,
        help="Window of DCGM_EXP_XID_ERRORS_COUNT (XID events per xid), in ms; 5 min "
        "as in dcgm-exporter. gpufleet_xid_errors_total counts since start instead.",
        gt=0,
    )
    clock_events_count_window_size: int = setting(
        300000,
        "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE",
        "--clock-events-count-window-size",
        group=DCGM,
        help="Window of DCGM_EXP_CLOCK_EVENTS_COUNT in ms: per reason, the collections "
        "in it that saw the reason (so it scales with -c); 5 min as in dcgm-exporter.",
        gt=0,
    )
    no_hostname: bool = setting(
        False,
        "DCGM_EXPORTER_NO_HOSTNAME",
        "-n",
        "--no-hostname",
        group=DCGM,
        help="Accepted and ignored, as by dcgm-exporter 4.x: the hostname label stays.",
    )
    use_old_namespace: bool = setting(
        False,
        "DCGM_EXPORTER_USE_OLD_NAMESPACE",
        "-o",
        "--use-old-namespace",
        group=DCGM,
        help="dcgm-exporter 1.x label names (uuid, pod_name, pod_namespace, container_name).",
    )
    replace_blanks_in_model_name: bool = setting(
        False,
        "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME",
        "-rbmn",
        "--replace-blanks-in-model-name",
        group=DCGM,
        help="Replace spaces in modelName with dashes.",
    )
    fake_gpus: bool = setting(
        False,
        "DCGM_EXPORTER_USE_FAKE_GPUS",
        "--fake-gpus",
        group=DCGM,
        help="Use simulated GPUs (the fleet from --sim-fleet, default 8xH100).",
    )
    debug: bool = setting(False, "DCGM_EXPORTER_DEBUG", "--debug", group=DCGM, help="Debug logs.")
    log_format: Literal["text", "json"] = setting(
        "text",
        "DCGM_EXPORTER_LOG_FORMAT",
        "--log-format",
        group=DCGM,
        help="Log format: text or json (one object per line).",
    )
    remote_hostengine_info: str = setting(
        "localhost:5555",
        "DCGM_REMOTE_HOSTENGINE_INFO",
        "-r",
        "--remote-hostengine-info",
        group=IGNORED,
        help="DCGM host engine address (gpufleet reads NVML directly).",
    )
    enable_dcgm_log: bool = setting(
        False,
        "DCGM_EXPORTER_ENABLE_DCGM_LOG",
        "--enable-dcgm-log",
        group=IGNORED,
        help="Write DCGM's own log to stdout.",
    )
    dcgm_log_level: str = setting(
        "NONE",
        "DCGM_EXPORTER_DCGM_LOG_LEVEL",
        "--dcgm-log-level",
        group=IGNORED,
        help="DCGM's log level (with --enable-dcgm-log).",
    )
    disable_startup_validate: bool = setting(
        False,
        "DISABLE_STARTUP_VALIDATE",
        "--disable-startup-validate",
        group=IGNORED,
        help="dcgm-exporter checks libdcgm; gpufleet checks NVML by initialising it.",
    )
    dump_enabled: bool = setting(
        False,
        "DCGM_EXPORTER_DUMP_ENABLED",
        "--dump-enabled",
        group=IGNORED,
        help="dcgm-exporter's file-based debug dumps.",
    )
    dump_directory: str = setting(
        "/tmp/dcgm-exporter-debug",
        "DCGM_EXPORTER_DUMP_DIRECTORY",
        "--dump-directory",
        group=IGNORED,
        help="Directory for the debug dumps.",
    )
    dump_retention_hours: int = setting(
        24,
        "DCGM_EXPORTER_DUMP_RETENTION",
        "--dump-retention",
        group=IGNORED,
        help="Hours to keep debug dumps (0: forever).",
    )
    dump_compression: bool = setting(
        True,
        "DCGM_EXPORTER_DUMP_COMPRESSION",
        "--dump-compression",
        group=IGNORED,
        help="Gzip the debug dumps.",
    )
    enable_gpu_bind_unbind_watch: bool = setting(
        False,
        "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH",
        "--enable-gpu-bind-unbind-watch",
        group=IGNORED,
        help="Reload on DCGM GPU bind/unbind events (DCGM 4.5+).",
    )
    gpu_bind_unbind_poll_interval: str = setting(
        "1s",
        "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL",
        "--gpu-bind-unbind-poll-interval",
        group=IGNORED,
        help="Poll interval of the bind/unbind watch, a Go duration.",
    )
    enable_pprof: bool = setting(
        False,
        "DCGM_EXPORTER_ENABLE_PPROF",
        "--enable-pprof",
        group=IGNORED,
        help="Go's /debug/pprof/ endpoints (gpufleet has no Go runtime to profile).",
    )
    enable_exporter_metrics: bool = setting(
        True,
        "DCGM_EXPORTER_ENABLE_EXPORTER_METRICS",
        "--enable-exporter-metrics",
        group=DCGM,
        help="Serve the gpufleet_exporter_* self-metrics. On by default, where "
        "dcgm-exporter 4.8.4's own is opt-in: the alerts GPUExporterStale and GPUFallenOffBus "
        "read them.",
    )
    compat: Literal["legacy", "4.9"] = setting(
        "legacy",
        "GPUFLEET_COMPAT",
        "--compat",
        group=GPUFLEET,
        help="Metric names and units: 'legacy' (dcgm-exporter <= 4.8) or '4.9' (DCGM 4.7 "
        "names; Hz, J, ratios, bytes).",
    )
    hostname_label: Literal["Hostname", "hostname"] = setting(
        "Hostname",
        "GPUFLEET_HOSTNAME_LABEL",
        "--hostname-label",
        group=GPUFLEET,
        help="Key of the hostname label: 'Hostname' (dcgm-exporter up to 4.8.2) or "
        "'hostname' (newer releases).",
    )
    openmetrics: bool = setting(
        False,
        "GPUFLEET_OPENMETRICS",
        "--openmetrics",
        group=GPUFLEET,
        help="Also serve OpenMetrics 1.0.0 to clients that ask for it (Prometheus does, "
        "first). Off, as dcgm-exporter: in OpenMetrics its counters lack _total, so they "
        "can only be declared unknown and Prometheus stops treating them as counters.",
    )
    node_name: str = setting(
        "",
        "NODE_NAME",
        "--node-name",
        group=GPUFLEET,
        help="Hostname label value; defaults to the machine's hostname.",
    )
    sim_fleet: str = sim_fleet_setting(group=GPUFLEET)
    stale_after_seconds: float = setting(
        0.0,
        "GPUFLEET_STALE_AFTER",
        "--stale-after",
        group=GPUFLEET,
        help="/health turns 503 when the snapshot is older than this; 0 means 3 intervals.",
        ge=0,
    )
    collect_timeout_seconds: float = setting(
        10.0,
        "GPUFLEET_COLLECT_TIMEOUT",
        "--collect-timeout",
        group=GPUFLEET,
        help="A collection that hangs in NVML longer than this is counted as a timeout; "
        "the last snapshot keeps being served (and turns stale).",
        gt=0,
    )

    @field_validator("collect_interval_ms")
    @classmethod
    def _interval_in_ms(cls, value: int) -> int:
        if value < 100:
            # A hint only where seconds were plausibly meant (0 or less has no reading).
            hint = f" (did you mean {value * 1000}?)" if value > 0 else ""
            raise ValueError(
                f"{value} ms is below the 100 ms minimum; the interval is in milliseconds{hint}"
            )
        return value

    @property
    def interval_seconds(self) -> float:
        return self.collect_interval_ms / 1000.0

    @property
    def resource_names(self) -> tuple[str, ...]:
        return tuple(n.strip() for n in self.nvidia_resource_names.split(",") if n.strip())
