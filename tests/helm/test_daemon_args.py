"""What the chart passes each daemon parses with that daemon's own settings: every flag
and env var the chart renders exists, with a valid value, so the chart and the daemons
cannot drift apart. The plugin's ConfigMap entries parse with its config parser."""

from pathlib import Path
from typing import Any

import pytest
from helpers.helm import VALUE_SETS, container, find, render
from pydantic_settings import BaseSettings

from gpufleet.autoscaler.settings import AutoscalerSettings
from gpufleet.exporter.settings import ExporterSettings
from gpufleet.plugin.cdi_setup import check_config
from gpufleet.plugin.core.config import SharingKind
from gpufleet.plugin.settings import PluginSettings, resolve_config
from gpufleet.settings import _env_names, build_parser, load_settings

# For the container runtime (NVIDIA's), not for the daemon.
RUNTIME_ENV = {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_MIG_MONITOR_DEVICES"}
# The downward API's values, as the kubelet would fill them in.
FIELD_REFS = {"spec.nodeName": "gpu-node-1", "metadata.namespace": "gpu", "metadata.name": "pod-0"}


def parse(
    settings_cls: type[BaseSettings], ctr: dict[str, Any], monkeypatch, **overrides: str
) -> Any:
    """The container's args (after the subcommand) and env through the daemon's parser."""
    known = {name for info in settings_cls.model_fields.values() for name in _env_names(info)}
    for name in known:
        monkeypatch.delenv(name, raising=False)
    for var in ctr.get("env", []):
        if var["name"] in RUNTIME_ENV:
            continue
        assert var["name"] in known, f"{var['name']} is no env var of {settings_cls.__name__}"
        value = var.get("value")
        if value is None:
            value = FIELD_REFS[var["valueFrom"]["fieldRef"]["fieldPath"]]
        monkeypatch.setenv(var["name"], overrides.get(var["name"], value))
    parser = build_parser(settings_cls, prog="chart", description="")
    return load_settings(settings_cls, parser, ctr["args"][1:])


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_exporter_args_parse(value_set, tmp_path, monkeypatch):
    values, apis = VALUE_SETS[value_set]
    ctr = container(
        find(render(values, tmp_path=tmp_path, api_versions=apis), "DaemonSet", "-exporter"),
        "exporter",
    )
    assert ctr["args"][0] == "exporter"
    settings = parse(ExporterSettings, ctr, monkeypatch)
    assert settings.address == ":9400"
    assert settings.kubernetes is values.get("exporter", {}).get("kubernetes", True)
    assert settings.node_name == "gpu-node-1"
    port = ctr["ports"][0]["containerPort"]
    assert settings.address.endswith(f":{port}")
    # the dashboards' time-slicing panels read the vgpu label, which needs -k
    assert settings.kubernetes_virtual_gpus is settings.kubernetes


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_plugin_args_and_configs_parse(value_set, tmp_path, monkeypatch):
    values, apis = VALUE_SETS[value_set]
    objects = render(values, tmp_path=tmp_path, api_versions=apis)
    ctr = container(find(objects, "DaemonSet", "-plugin"), "plugin")
    assert ctr["args"][0] == "plugin"
    config_maps = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-plugin-configs")
    ]
    entries = {k: v for cm in config_maps for k, v in cm["data"].items()}
    if values.get("config", {}).get("name"):  # the user's own ConfigMap: any valid config
        entries = {"external": "version: v1\n"}
    for key, text in entries.items() or [("(no config)", None)]:
        overrides = {}
        if text is not None:
            (tmp_path / key).write_text(text)
            overrides["CONFIG_FILE"] = str(tmp_path / key)
        settings = parse(PluginSettings, ctr, monkeypatch, **overrides)
        config, warnings = resolve_config(settings)
        assert warnings == (), key
        check_config(settings, config)
        # Where a cdi-* strategy writes its specs: mounted, and writable.
        first_cdi_dir = settings.cdi_spec_dirs.split(",")[0]
        mounts = {m["mountPath"]: m for m in ctr["volumeMounts"]}
        assert first_cdi_dir in mounts, key
        assert not mounts[first_cdi_dir].get("readOnly"), key
        if "migStrategy" in values:
            assert config.flags.mig_strategy == values["migStrategy"], key
    if values.get("config", {}).get("map"):
        env = {e["name"]: e.get("value") for e in ctr["env"]}
        assert env["CONFIG_FILE"] == "/config/config.yaml"
        assert set(entries) == set(values["config"]["map"])


def test_time_slicing_config_reaches_the_plugin(tmp_path, monkeypatch):
    objects = render(VALUE_SETS["time-slicing"][0], tmp_path=tmp_path)
    (cm,) = [o for o in objects if o["kind"] == "ConfigMap" and "default" in o.get("data", {})]
    (tmp_path / "c.yaml").write_text(cm["data"]["default"])
    ctr = container(find(objects, "DaemonSet", "-plugin"), "plugin")
    settings = parse(PluginSettings, ctr, monkeypatch, CONFIG_FILE=str(tmp_path / "c.yaml"))
    config, _ = resolve_config(settings)
    assert config.sharing.kind is SharingKind.TIME_SLICING
    (resource,) = config.sharing.resources
    assert (resource.name, resource.replicas) == ("nvidia.com/gpu", 4)


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_autoscaler_args_parse(value_set, tmp_path, monkeypatch):
    values, apis = VALUE_SETS[value_set]
    objects = render(values, tmp_path=tmp_path, api_versions=apis)
    ctr = container(find(objects, "Deployment", "-autoscaler"), "autoscaler")
    assert ctr["args"][0] == "autoscaler"
    settings = parse(AutoscalerSettings, ctr, monkeypatch)
    assert settings.leader_elect is True
    assert settings.headroom is values.get("autoscaler", {}).get("headroom", True)
    assert (settings.lease_namespace, settings.identity) == ("gpu", "pod-0")
    (role,) = [o for o in objects if o["kind"] == "Role"]
    assert role["metadata"]["namespace"] == settings.lease_namespace
    assert role["rules"][0]["resourceNames"] == [settings.lease_name]
    assert settings.metrics_address == f":{ctr['ports'][0]['containerPort']}"


def test_config_manager_signals_the_plugin_as_nvidia_chart_does(tmp_path):
    """The sidecar sends SIGHUP (1) to the process whose argv[0] is the image's python;
    the one-shot init container signals nothing."""
    objects = render(VALUE_SETS["time-slicing"][0], tmp_path=tmp_path)
    pod = find(objects, "DaemonSet", "-plugin")["spec"]["template"]["spec"]
    assert pod["shareProcessNamespace"] is True
    sidecar = {
        e["name"]: e.get("value")
        for e in container(find(objects, "DaemonSet", "-plugin"), "config-manager")["env"]
    }
    (init,) = pod["initContainers"]
    oneshot = {e["name"]: e.get("value") for e in init["env"]}
    assert (sidecar["ONESHOT"], sidecar["SEND_SIGNAL"], sidecar["SIGNAL"]) == ("false", "true", "1")
    assert sidecar["PROCESS_TO_SIGNAL"] == "/opt/venv/bin/python"
    assert (oneshot["ONESHOT"], oneshot["SEND_SIGNAL"]) == ("true", "false")
    assert sidecar["CONFIG_FILE_DST"] == oneshot["CONFIG_FILE_DST"] == "/config/config.yaml"
    assert Path(sidecar["CONFIG_FILE_DST"]).parent.as_posix() in {
        m["mountPath"]
        for m in container(find(objects, "DaemonSet", "-plugin"), "plugin")["volumeMounts"]
    }


def _web_config(objects, monkeypatch, suffix, settings_cls) -> tuple[Any, str | None]:
    """The daemon's parsed --web-config-file and the Secret mounted where it points."""
    workload = find(objects, "DaemonSet", f"-{suffix}")
    ctr = container(workload, suffix)
    settings = parse(settings_cls, ctr, monkeypatch)
    if settings.web_config_file is None:
        assert "web-config" not in {
            v["name"] for v in workload["spec"]["template"]["spec"]["volumes"]
        }
        return None, None
    (mount,) = [m for m in ctr["volumeMounts"] if m["name"] == "web-config"]
    assert mount["readOnly"] and settings.web_config_file.parent == Path(mount["mountPath"])
    (volume,) = [
        v for v in workload["spec"]["template"]["spec"]["volumes"] if v["name"] == "web-config"
    ]
    return settings.web_config_file.name, volume["secret"]["secretName"]


def test_web_config_secret_reaches_both_daemons_and_their_scrapes(tmp_path, monkeypatch):
    objects = render(VALUE_SETS["web-config"][0], tmp_path=tmp_path)
    assert _web_config(objects, monkeypatch, "exporter", ExporterSettings) == (
        "web-config.yml",
        "exporter-web",
    )
    assert _web_config(objects, monkeypatch, "plugin", PluginSettings) == (
        "web-config.yml",
        "plugin-web",
    )
    exporter = container(find(objects, "DaemonSet", "-exporter"), "exporter")
    # basic auth would answer the kubelet's httpGet with 401: the probes open the port
    assert exporter["livenessProbe"]["tcpSocket"] == {"port": "metrics"}
    assert exporter["readinessProbe"]["tcpSocket"] == {"port": "metrics"}
    (endpoint,) = find(objects, "ServiceMonitor", "-exporter")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["basicAuth"]["username"]["key"] == "user"
    (pod_endpoint,) = find(objects, "PodMonitor", "-plugin")["spec"]["podMetricsEndpoints"]
    assert pod_endpoint["scheme"] == "https"


def test_no_web_config_by_default_nor_without_the_plugin_metrics_port(tmp_path, monkeypatch):
    objects = render({}, tmp_path=tmp_path)
    assert _web_config(objects, monkeypatch, "exporter", ExporterSettings) == (None, None)
    assert _web_config(objects, monkeypatch, "plugin", PluginSettings) == (None, None)
    exporter = container(find(objects, "DaemonSet", "-exporter"), "exporter")
    assert exporter["livenessProbe"]["httpGet"] == {"path": "/health", "port": "metrics"}
    values = {"devicePlugin": {"metricsAddress": "", "webConfig": {"secret": "plugin-web"}}}
    objects = render(values, tmp_path=tmp_path)
    assert _web_config(objects, monkeypatch, "plugin", PluginSettings) == (None, None)


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_gfd_labels_go_where_the_chart_lets_them(value_set, tmp_path, monkeypatch):
    """devicePlugin.nodeLabels: "api" sets them on the node (its name from the downward
    API, RBAC to get and patch nodes, a token), "nfd" writes NFD's feature file into the
    host's features.d mounted writable, "" does neither and does not look for features.d."""
    values, apis = VALUE_SETS[value_set]
    objects = render(values, tmp_path=tmp_path, api_versions=apis)
    daemonset = find(objects, "DaemonSet", "-plugin")
    ctr = container(daemonset, "plugin")
    settings = parse(PluginSettings, ctr, monkeypatch)
    mode = values.get("devicePlugin", {}).get("nodeLabels", "")
    rules = [
        rule
        for o in objects
        if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-plugin")
        for rule in o["rules"]
    ]
    patches_nodes = any("nodes" in r["resources"] and "patch" in r["verbs"] for r in rules)
    assert settings.node_labels_api is (mode == "api")
    assert patches_nodes is (mode == "api")
    if mode == "api":
        assert settings.node_name == "gpu-node-1"
        assert daemonset["spec"]["template"]["spec"].get("automountServiceAccountToken", True)
        assert find(objects, "ServiceAccount", "-plugin")["automountServiceAccountToken"]
    mounts = {m["mountPath"]: m for m in ctr["volumeMounts"]}
    if mode == "nfd":
        directory = str(Path(settings.node_labels_file).parent)
        assert directory in mounts
        assert not mounts[directory].get("readOnly")
    else:
        assert settings.node_labels_file == ""
