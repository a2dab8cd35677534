"""The settings fields several daemons declare alike, so a flag, its env var and its help
stay one wherever they appear (tests/test_settings.py holds each daemon to them)."""

from typing import Any

from gpufleet.settings import setting


def kube_url_setting(*, group: str, used_for: str = "") -> Any:
    """The `--kube-url` field every daemon that talks to the Kubernetes API declares, so the
    flag, env var and help stay one. `used_for` ("for pod labels") says when it is read."""
    purpose = f", {used_for}." if used_for else "."
    return setting(
        "",
        "GPUFLEET_KUBE_URL",
        "--kube-url",
        group=group,
        help="Kubernetes API server URL with no authentication (the lab's fake API server)"
        f"{purpose} Empty: --kubeconfig, else the in-cluster service account, else "
        "~/.kube/config.",
    )


def kubeconfig_setting(*, group: str) -> Any:
    """The `--kubeconfig` field (kubectl's KUBECONFIG) beside `kube_url_setting`."""
    return setting(
        "",
        "KUBECONFIG",
        "--kubeconfig",
        group=group,
        help="kubeconfig file to use instead of the in-cluster service account.",
    )


def sim_fleet_setting(*, group: str) -> Any:
    """The `--sim-fleet` field of the daemons that read NVML (exporter, plugin)."""
    return setting(
        "",
        "GPUFLEET_SIM_FLEET",
        "--sim-fleet",
        group=group,
        help="Run on simulated NVML with this fleet, e.g. 8xH100 or 4xA100:mig=all-1g.10gb.",
    )


def debug_setting(*, group: str) -> Any:
    """`--debug` (GPUFLEET_DEBUG) of the daemons with gpufleet's own env names (the
    exporter keeps dcgm-exporter's)."""
    return setting(False, "GPUFLEET_DEBUG", "--debug", group=group, help="Debug logs.")


def log_format_setting(*, group: str) -> Any:
    """`--log-format` (GPUFLEET_LOG_FORMAT) beside `debug_setting`."""
    return setting(
        "text",
        "GPUFLEET_LOG_FORMAT",
        "--log-format",
        group=group,
        help="Log format: text or json (one object per line).",
    )
