"""The chart through the real helm: lint, render over the value sets, and every rendered
object against its schema (kubernetes-validate's for Kubernetes kinds, strict; the
vendored prometheus-operator CRD schemas, closed to unknown fields, for its kinds)."""

import shutil
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from helpers import REPO, TEST_DATA
from helpers.helm import (
    CHART,
    PROMETHEUS_OPERATOR,
    VALUE_SETS,
    container,
    find,
    render,
    run_helm,
)

from gpufleet.plugin.settings import PluginSettings

CRD_SCHEMAS = Path(__file__).parents[1] / "data" / "crds"
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and a current one.
KUBE_VERSIONS = ("1.25.0", "1.33.0")


def closed(schema: Any) -> Any:
    """The schema with unknown fields refused wherever the API server would prune them
    (every object with properties and no x-kubernetes-preserve-unknown-fields)."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def crd_schema(api_version: str, kind: str) -> dict[str, Any] | None:
    path = CRD_SCHEMAS / f"{api_version.replace('/', '_')}_{kind}.yaml"
    return closed(yaml.safe_load(path.read_text())) if path.exists() else None


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_lint_strict(value_set, tmp_path):
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(VALUE_SETS[value_set][0]))
    done = run_helm("lint", "--strict", str(CHART), "-f", str(values_file), tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_object_is_valid(value_set, tmp_path):
    values, apis = VALUE_SETS[value_set]
    objects = render(values, tmp_path=tmp_path, api_versions=apis)
    for obj in objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        schema = crd_schema(obj["apiVersion"], obj["kind"])
        if schema is not None:
            errors = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(obj)]
            assert not errors, f"{where}: {errors}"
            continue
        for version in KUBE_VERSIONS:
            # raises ValidationError, or SchemaNotFoundError for a kind nothing validates
            kubernetes_validate.validate(obj, version, strict=True)


def test_kubernetes_validate_catches_a_bad_field(tmp_path):
    """Strict: a field Kubernetes does not know fails, as a misspelt template would."""
    daemonset = find(render({}, tmp_path=tmp_path), "DaemonSet", "-exporter")
    daemonset["spec"]["template"]["spec"]["containers"][0]["prot"] = 9400
    with pytest.raises(kubernetes_validate.ValidationError, match="prot"):
        kubernetes_validate.validate(daemonset, KUBE_VERSIONS[0], strict=True)


def test_crd_schema_check_catches_a_bad_field():
    """The closed CRD schema refuses what the API server would drop."""
    schema = crd_schema("monitoring.coreos.com/v1", "ServiceMonitor")
    assert schema is not None
    bad = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "x"},
        "spec": {"selector": {}, "endpoints": [{"prot": "metrics"}]},
    }
    errors = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(bad)]
    assert any("'prot' was unexpected" in e for e in errors), errors


@pytest.mark.parametrize(
    ("values", "named"),
    [
        pytest.param(
            {"exporter": {"prot": 9400}}, "exporter: Additional property prot", id="nested"
        ),
        pytest.param({"migStrategy": "mixd"}, "migStrategy: migStrategy must be one of", id="enum"),
        pytest.param({"gfd": {"enabled": True}}, "Additional property gfd", id="outside-subset"),
        pytest.param(
            {"autoscaler": {"externalMetrics": {"enable": True}}},
            "autoscaler.externalMetrics: Additional property enable",
            id="deep",
        ),
        pytest.param(
            {"autoscaler": {"externalMetrics": {"enabled": True}}},
            "autoscaler.externalMetrics.tlsSecret is required",
            id="external-metrics-without-certificate",
        ),
        pytest.param(
            {"devicePlugin": {"webConfig": {"secrets": "web"}}},
            "devicePlugin.webConfig: Additional property secrets",
            id="plugin-web-config",
        ),
        pytest.param(
            {"autoscaler": {"leaderElect": False}},
            "autoscaler.replicas above 1 needs autoscaler.leaderElect",
            id="two-writers",
        ),
        pytest.param(
            {"devicePlugin": {"metricsAddress": "9401"}},
            "devicePlugin.metricsAddress: Does not match pattern",
            id="metrics-address-without-port",
        ),
        # bound to loopback, the plugin's probes (on the pod's IP) failed: a restart loop
        pytest.param(
            {"devicePlugin": {"metricsAddress": "127.0.0.1:9401"}},
            "devicePlugin.metricsAddress: Does not match pattern",
            id="metrics-address-on-loopback",
        ),
        # NVIDIA's `image` carried over ran NVIDIA's plugin image as all three daemons
        pytest.param(
            {"image": {"repository": "registry.example.com/nvidia/k8s-device-plugin"}},
            "image.repository is registry.example.com/nvidia/k8s-device-plugin, NVIDIA's",
            id="nvidias-image-carried-over",
        ),
        # NVIDIA's chart refuses both, and the config-manager failed on unlabelled nodes
        pytest.param(
            {"config": {"name": "mine", "map": {"a": "version: v1"}}},
            "only one of config.name (an existing ConfigMap of configs) and config.map",
            id="config-name-and-map",
        ),
        pytest.param(
            {"config": {"map": {"a": "version: v1", "b": "version: v1"}}},
            "config.map has no default config: set config.default, or a fallback",
            id="config-map-without-a-default",
        ),
    ],
)
def test_a_typo_in_values_fails_naming_the_field(values, named, tmp_path):
    values_file = tmp_path / "typo.yaml"
    values_file.write_text(yaml.safe_dump(values))
    done = run_helm("template", "gf", str(CHART), "-f", str(values_file), tmp_path=tmp_path)
    assert done.returncode != 0
    assert named in done.stderr


def test_monitoring_objects_need_the_prometheus_operator(tmp_path):
    kinds = {o["kind"] for o in render({}, tmp_path=tmp_path, api_versions=())}
    assert not kinds & {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    with_operator = {o["kind"] for o in render({}, tmp_path=tmp_path)}
    assert {"ServiceMonitor", "PodMonitor", "PrometheusRule"} <= with_operator


def test_external_metrics_and_keda_are_off_by_default(tmp_path):
    defaults = render({}, tmp_path=tmp_path)
    assert not [o for o in defaults if o["kind"] == "APIService"]
    assert not [o for o in defaults if o["metadata"]["name"].endswith("keda-scaler")]
    on = render(VALUE_SETS["all-options"][0], tmp_path=tmp_path)
    service = find(on, "APIService")["spec"]["service"]
    assert service["name"] == find(on, "Service", "-external-metrics")["metadata"]["name"]
    keda = find(on, "Service", "-keda-scaler")["spec"]["ports"][0]
    assert (keda["port"], keda["targetPort"]) == (9403, "keda-scaler")


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_hardening(value_set, tmp_path):
    """Every container: no escalation, no capabilities (but the plugin's SYS_ADMIN where
    it may serve MIG, as NVIDIA's: below), read-only root; every pod: seccomp
    RuntimeDefault; the autoscaler non-root; DaemonSets with a priority class."""
    values, apis = VALUE_SETS[value_set]
    objects = render(values, tmp_path=tmp_path, api_versions=apis)
    # NVIDIA's MPS control daemon runs privileged, as NVIDIA's chart runs it (below)
    workloads = [
        o
        for o in objects
        if o["kind"] in ("DaemonSet", "Deployment")
        and not o["metadata"]["name"].endswith("-mps-control-daemon")
    ]
    assert len(workloads) == 3
    for workload in workloads:
        spec = pod_spec(workload)
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in spec["containers"] + spec.get("initContainers", []):
            context = dict(c["securityContext"])
            if c["name"] == "plugin" and context["capabilities"].get("add") == ["SYS_ADMIN"]:
                context["capabilities"] = {"drop": context["capabilities"]["drop"]}
            assert context == {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]},
            }, c["name"]
        if workload["kind"] == "DaemonSet":
            assert spec["priorityClassName"] == "system-node-critical"
    autoscaler = pod_spec(find(objects, "Deployment", "-autoscaler"))
    assert autoscaler["securityContext"]["runAsNonRoot"] is True
    exporter = pod_spec(find(objects, "DaemonSet", "-exporter"))
    attributing = values.get("exporter", {}).get("kubernetes", True)
    assert exporter["securityContext"]["runAsNonRoot"] is (not attributing)
    assert exporter.get("hostPID", False) is attributing
    reads_api = any(values.get("exporter", {}).get(k, False) for k in ("podLabels", "dra"))
    assert exporter["automountServiceAccountToken"] is reads_api


def test_every_daemon_requests_what_it_was_measured_to_use(tmp_path):
    """Every container was BestEffort, first to be evicted under node pressure. Requests
    only: an OOM-killed plugin or exporter costs the node's GPUs or their telemetry."""
    objects = render({}, tmp_path=tmp_path)
    for kind, name in (
        ("DaemonSet", "plugin"),
        ("DaemonSet", "exporter"),
        ("Deployment", "autoscaler"),
    ):
        resources = container(find(objects, kind, f"-{name}"), name)["resources"]
        assert set(resources) == {"requests"}, name
        assert set(resources["requests"]) == {"cpu", "memory"}, name


def rules_of(objects, component: str) -> list[dict[str, Any]]:
    return [
        rule
        for o in objects
        if o["kind"] in ("ClusterRole", "Role")
        and o["metadata"]["labels"]["app.kubernetes.io/component"] == component
        for rule in o["rules"]
    ]


def test_rbac_is_least_privilege(tmp_path):
    """Only the autoscaler reads the API by default, with the verbs its code calls; the
    exporter only for pod labels and DRA, the plugin's account only when the config-manager
    watches its node."""
    objects = render({}, tmp_path=tmp_path)
    assert rules_of(objects, "exporter") == []
    assert rules_of(objects, "plugin") == []
    granted = sorted(
        (group, resource, tuple(rule["verbs"]), tuple(rule.get("resourceNames", ())))
        for rule in rules_of(objects, "autoscaler")
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    )
    assert granted == sorted(
        [
            ("autoscaling.gpufleet.dev", "gpuautoscalers", ("list", "watch"), ()),
            ("autoscaling.gpufleet.dev", "gpuautoscalers/status", ("patch",), ()),
            ("apps", "deployments", ("list", "watch"), ()),
            ("apps", "statefulsets", ("list", "watch"), ()),
            ("apps", "deployments/scale", ("get", "patch"), ()),
            ("apps", "deployments", ("get", "create", "patch"), ()),
            ("scheduling.k8s.io", "priorityclasses", ("get", "create"), ()),
            (
                "autoscaling.x-k8s.io",
                "capacitybuffers",
                ("get", "list", "watch", "create", "patch"),
                (),
            ),
            ("", "podtemplates", ("get", "create", "patch"), ()),
            ("karpenter.sh", "nodepools", ("list", "watch"), ()),
            ("", "nodes", ("list", "watch"), ()),
            ("kueue.x-k8s.io", "workloads", ("list", "watch"), ()),
            ("kueue.x-k8s.io", "resourceflavors", ("list", "watch"), ()),
            ("apps", "statefulsets/scale", ("get", "patch"), ()),
            ("", "pods", ("list", "watch", "patch"), ()),
            ("autoscaling", "horizontalpodautoscalers", ("list", "watch"), ()),
            ("keda.sh", "scaledobjects", ("list", "watch"), ()),
            ("events.k8s.io", "events", ("create", "patch"), ()),
            ("coordination.k8s.io", "leases", ("get", "update"), ("gf-gpufleet-autoscaler",)),
            ("coordination.k8s.io", "leases", ("create",), ()),
        ]
    )
    reading = render(VALUE_SETS["pod-labels-dra"][0], tmp_path=tmp_path)
    assert rules_of(reading, "exporter") == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    configured = render(VALUE_SETS["time-slicing"][0], tmp_path=tmp_path)
    assert rules_of(configured, "plugin") == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
    ]
    # without headroom, nothing it may create and nothing but scales and pods to patch
    bare = render({"autoscaler": {"headroom": False}}, tmp_path=tmp_path)
    writes = {
        (group, resource, verb)
        for rule in rules_of(bare, "autoscaler")
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        if verb in ("create", "patch", "update")
    }
    assert writes == {
        ("autoscaling.gpufleet.dev", "gpuautoscalers/status", "patch"),
        ("apps", "deployments/scale", "patch"),
        ("apps", "statefulsets/scale", "patch"),
        ("", "pods", "patch"),
        ("events.k8s.io", "events", "create"),
        ("events.k8s.io", "events", "patch"),
        ("coordination.k8s.io", "leases", "update"),
        ("coordination.k8s.io", "leases", "create"),
    }
    args = container(find(bare, "Deployment", "-autoscaler"), "autoscaler")["args"]
    assert "--headroom=false" in args


def test_node_autoscaler_terms_and_annotations(tmp_path):
    karpenter = render({"nodeAutoscaler": "karpenter"}, tmp_path=tmp_path)
    terms = pod_spec(find(karpenter, "DaemonSet", "-plugin"))["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    added = terms[-1]["matchExpressions"]
    # NVIDIA's only: the manufacturer label names AMD GPU instances too
    assert added == [
        {
            "key": "karpenter.k8s.aws/instance-gpu-manufacturer",
            "operator": "In",
            "values": ["nvidia"],
        }
    ]
    assert len(terms) == 4  # NVIDIA's three terms kept, one added (terms are ORed)
    ca_terms = pod_spec(
        find(
            render({"nodeAutoscaler": "cluster-autoscaler"}, tmp_path=tmp_path),
            "DaemonSet",
            "-plugin",
        )
    )["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert [t["matchExpressions"] for t in ca_terms[-2:]] == [
        [{"key": "cloud.google.com/gke-accelerator", "operator": "Exists"}],
        [{"key": "k8s.amazonaws.com/accelerator", "operator": "Exists"}],
    ]
    annotations = find(karpenter, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"karpenter.sh/do-not-disrupt": "true"}
    ca = render({"nodeAutoscaler": "cluster-autoscaler"}, tmp_path=tmp_path)
    annotations = find(ca, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}


def test_autoscaler_runs_two_replicas_with_leader_election(tmp_path):
    objects = render({}, tmp_path=tmp_path)
    deployment = find(objects, "Deployment", "-autoscaler")
    assert deployment["spec"]["replicas"] == 2
    assert "--leader-elect=true" in pod_spec(deployment)["containers"][0]["args"]
    assert find(objects, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_every_daemon_is_probed_where_it_serves_health(tmp_path):
    """The plugin had no probes (a hung one was never restarted) and the autoscaler no
    readiness (its APIService and KEDA Service reached starting replicas)."""
    objects = render({}, tmp_path=tmp_path)
    plugin = container(find(objects, "DaemonSet", "-plugin"), "plugin")
    for probe in ("livenessProbe", "readinessProbe"):
        assert plugin[probe]["httpGet"] == {"path": "/health", "port": "metrics"}
    autoscaler = container(find(objects, "Deployment", "-autoscaler"), "autoscaler")
    assert autoscaler["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    web = render({"devicePlugin": {"webConfig": {"secret": "web"}}}, tmp_path=tmp_path)
    plugin = container(find(web, "DaemonSet", "-plugin"), "plugin")
    assert plugin["livenessProbe"]["tcpSocket"] == {"port": "metrics"}  # no basic auth
    quiet = render({"devicePlugin": {"metricsAddress": ""}}, tmp_path=tmp_path)
    plugin = container(find(quiet, "DaemonSet", "-plugin"), "plugin")
    assert "livenessProbe" not in plugin and "ports" not in plugin
    ipv6 = render({"devicePlugin": {"metricsAddress": "[::]:9401"}}, tmp_path=tmp_path)
    plugin = container(find(ipv6, "DaemonSet", "-plugin"), "plugin")
    assert plugin["ports"][0]["containerPort"] == 9401


def test_a_disabled_component_leaves_nothing_behind(tmp_path):
    without = render({"autoscaler": {"enabled": False}}, tmp_path=tmp_path)
    names = [o["metadata"]["name"] for o in without if o["kind"] != "CustomResourceDefinition"]
    assert not [n for n in names if "autoscaler" in n]  # its dashboard was left
    no_k = render(
        {"exporter": {"kubernetes": False, "podLabels": True, "dra": True}}, tmp_path=tmp_path
    )
    exporter = find(no_k, "DaemonSet", "-exporter")
    assert not [
        o for o in no_k if o["kind"] == "ClusterRole" and "exporter" in o["metadata"]["name"]
    ]
    assert not exporter["spec"]["template"]["spec"].get("automountServiceAccountToken")


def test_extra_env_volumes_and_mounts_reach_each_daemon(tmp_path):
    objects = render(VALUE_SETS["extras"][0], tmp_path=tmp_path)
    for kind, name in (
        ("DaemonSet", "plugin"),
        ("DaemonSet", "exporter"),
        ("Deployment", "autoscaler"),
    ):
        workload = find(objects, kind, f"-{name}")
        ctr = container(workload, name)
        assert {
            "name": "GPUFLEET_DEBUG" if name != "exporter" else "DCGM_EXPORTER_DEBUG",
            "value": "true",
        } in ctr["env"]
        assert {"name": "extra", "mountPath": "/etc/extra"} in ctr["volumeMounts"]
        assert {"name": "extra", "configMap": {"name": "my-files"}} in pod_spec(workload)["volumes"]


def test_the_keda_scaler_serves_tls_from_its_secret(tmp_path):
    """Each TLS flag names a file in the mounted Secret: the scaler's certificate and key,
    and with verifyClients the CA KEDA's client certificate must be signed by."""
    objects = render(VALUE_SETS["extras"][0], tmp_path=tmp_path)
    deployment = find(objects, "Deployment", "-autoscaler")
    ctr = container(deployment, "autoscaler")
    flags = dict(a.split("=", 1) for a in ctr["args"] if a.startswith("--keda-scaler-"))
    (mount,) = [m for m in ctr["volumeMounts"] if m["name"] == "keda-scaler-tls"]
    (volume,) = [v for v in pod_spec(deployment)["volumes"] if v["name"] == "keda-scaler-tls"]
    assert volume["secret"]["secretName"] == "keda-tls"
    files = {flag: path for flag, path in flags.items() if flag.endswith("-file")}
    assert files == {
        "--keda-scaler-tls-cert-file": f"{mount['mountPath']}/tls.crt",
        "--keda-scaler-tls-key-file": f"{mount['mountPath']}/tls.key",
        "--keda-scaler-client-ca-file": f"{mount['mountPath']}/ca.crt",
    }
    plain = render({"autoscaler": {"kedaScaler": {"enabled": True}}}, tmp_path=tmp_path)
    args = container(find(plain, "Deployment", "-autoscaler"), "autoscaler")["args"]
    assert [a for a in args if a.startswith("--keda-scaler-")] == ["--keda-scaler-address=:9403"]
    refused = run_helm(
        "template",
        "gf",
        str(CHART),
        "--set",
        "autoscaler.kedaScaler.enabled=true",
        "--set",
        "autoscaler.kedaScaler.verifyClients=true",
        tmp_path=tmp_path,
    )
    assert refused.returncode != 0
    assert (
        "autoscaler.kedaScaler.verifyClients needs autoscaler.kedaScaler.tlsSecret"
        in refused.stderr
    )


@pytest.mark.parametrize("release", ["gf", "r" * 27, "r" * 44, "r" * 53])
def test_a_long_release_name_keeps_every_name_valid_and_its_own(release, tmp_path):
    """Names were <release>-gpufleet-<component> cut at 63: from a 27-character release the
    external metrics Service was over 63 (the API server refuses it), from 43 the four
    dashboards had one name, from 44 the autoscaler's job was cut to "-autoscal" (the alerts
    took it for an exporter), and at 53, Helm's most, every component had one name."""
    values, apis = VALUE_SETS["all-options"]
    objects = render(values, tmp_path=tmp_path, api_versions=apis, release=release)
    names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(names) == len(set(names)), sorted(names)
    for kind, name in names:
        if kind in ("Service", "DaemonSet", "Deployment", "ConfigMap", "ServiceMonitor"):
            assert len(name) <= 63, (kind, name)
    for o in objects:
        for value in (o["metadata"].get("labels") or {}).values():
            assert len(value) <= 63, (o["kind"], o["metadata"]["name"], value)
    for component in ("exporter", "plugin", "autoscaler"):
        assert any(n.endswith(f"-{component}") for _, n in names), component


def test_it_renders_as_a_subchart(tmp_path):
    """Helm gives a subchart `global`, and an umbrella chart's `condition: gpufleet.enabled`
    puts `enabled` in its values: the closed schema refused both, so no umbrella chart
    could depend on this one."""
    umbrella = tmp_path / "umbrella"
    (umbrella / "charts").mkdir(parents=True)
    (umbrella / "Chart.yaml").write_text(
        "apiVersion: v2\nname: platform\nversion: 1.0.0\n"
        "dependencies:\n- name: gpufleet\n  version: '>=0.0.0-0'\n"
        "  condition: gpufleet.enabled\n"
    )
    (umbrella / "values.yaml").write_text(
        "global: {imageRegistry: registry.example}\ngpufleet: {enabled: true}\n"
    )
    shutil.copytree(CHART, umbrella / "charts" / "gpufleet")
    objects = render({}, tmp_path=tmp_path, chart=umbrella)
    assert find(objects, "DaemonSet", "-exporter")


def test_without_leader_election_the_autoscaler_is_replaced_not_rolled(tmp_path):
    """One writer and no lease: a rolling update ran the old and the new replica together,
    both writing, for at least a tick of every upgrade."""
    single = render({"autoscaler": {"replicas": 1, "leaderElect": False}}, tmp_path=tmp_path)
    assert find(single, "Deployment", "-autoscaler")["spec"]["strategy"] == {"type": "Recreate"}
    elected = render({}, tmp_path=tmp_path)
    assert "strategy" not in find(elected, "Deployment", "-autoscaler")["spec"]


NVIDIA_CHART = TEST_DATA / "nvidia-device-plugin-chart"  # NVIDIA's own, verbatim (its README)


def _plugin_mig_access(objects: list[dict[str, Any]], name: str) -> tuple[bool, bool]:
    """Whether the plugin container `name` gets NVIDIA_MIG_MONITOR_DEVICES=all, and SYS_ADMIN."""
    (plugin,) = [
        c
        for o in objects
        if o["kind"] == "DaemonSet"
        for c in pod_spec(o)["containers"]
        if c["name"] == name
    ]
    env = {e["name"]: e.get("value") for e in plugin.get("env", ())}
    capabilities = (plugin.get("securityContext") or {}).get("capabilities") or {}
    return env.get("NVIDIA_MIG_MONITOR_DEVICES") == "all", "SYS_ADMIN" in capabilities.get(
        "add", ()
    )


def test_nvidias_chart_finds_the_plugin_and_its_cdi_directory_in_gpufleets_image(tmp_path):
    """NVIDIA's chart (tests/data, verbatim) runs its plugin by name and mounts the host's
    CDI directory at one path. The image had no such name, and the plugin wrote its CDI
    specs to /etc/cdi, inside the container."""
    nvidia = render({}, tmp_path=tmp_path, chart=NVIDIA_CHART, api_versions=())
    (plugin,) = [
        c
        for o in nvidia
        if o["kind"] == "DaemonSet"
        for c in pod_spec(o)["containers"]
        if c["name"] == "nvidia-device-plugin-ctr"
    ]
    (command,) = plugin["command"]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert f"COPY docker/{command} /opt/venv/bin/{command}\n" in dockerfile
    written = PluginSettings().cdi_spec_dirs.split(",")[0]
    assert written in {m["mountPath"] for m in plugin["volumeMounts"]}


@pytest.mark.parametrize(
    ("values", "as_nvidia"),
    [
        pytest.param({}, True, id="default"),
        pytest.param({"migStrategy": "none"}, True, id="mig-none"),
        pytest.param({"migStrategy": "mixed"}, True, id="mig-mixed"),
        pytest.param({"config": {"name": "theirs", "default": "a"}}, True, id="external"),
        pytest.param(
            {"config": {"map": {"a": "version: v1\nflags: {migStrategy: single}\n"}}},
            True,
            id="map-with-mig",
        ),
        # NVIDIA's allPossibleMigStrategiesAreNone takes any config.map as MIG without
        # reading its entries (README): gpufleet reads them and gives neither.
        pytest.param(
            {"config": {"map": {"a": "version: v1\nflags: {migStrategy: none}\n"}}},
            False,
            id="map-without-mig",
        ),
        pytest.param({"deviceListStrategy": "volume-mounts"}, True, id="volume-mounts"),
    ],
)
def test_the_plugin_gets_the_mig_monitor_devices_where_nvidias_chart_gives_them(
    values, as_nvidia: bool, tmp_path
):
    """NVIDIA's chart (tests/data, verbatim) adds NVIDIA_MIG_MONITOR_DEVICES=all and SYS_ADMIN
    wherever MIG may be served (and SYS_ADMIN for volume-mounts): without them NVML answers
    "Insufficient Permissions" on MIG devices (NVIDIA #399, #229, #609). gpufleet's dropped
    both. Its capabilities otherwise stay dropped, where NVIDIA's MIG rendering drops none."""
    nvidia = render(values, tmp_path=tmp_path, chart=NVIDIA_CHART, api_versions=())
    theirs = _plugin_mig_access(nvidia, "nvidia-device-plugin-ctr")
    ours = _plugin_mig_access(render(values, tmp_path=tmp_path), "plugin")
    if as_nvidia:
        assert ours == theirs
    else:
        assert theirs == (True, True) and ours == (False, False)
    plugin = container(find(render(values, tmp_path=tmp_path), "DaemonSet", "-plugin"), "plugin")
    assert plugin["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_the_exporters_monitor_takes_dcgm_exporters_relabelings_after_its_own(tmp_path):
    """The only way to add them was exporter.webConfig.scrape, whose keys duplicated the
    endpoint's: Helm kept the last, and a user's relabelings replaced the chart's labeldrop."""
    mine = {"action": "replace", "targetLabel": "cluster", "replacement": "east"}
    drop = {"action": "drop", "sourceLabels": ["__name__"], "regex": "DCGM_FI_DEV_ECC_.*"}
    values = {"serviceMonitor": {"relabelings": [mine], "metricRelabelings": [drop]}}
    monitor = find(render(values, tmp_path=tmp_path), "ServiceMonitor", "-exporter")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["relabelings"] == [
        {"action": "labeldrop", "regex": "(pod|namespace|container)"},
        mine,
    ]
    hostname = {"sourceLabels": ["hostname"], "regex": "(.+)", "targetLabel": "Hostname"}
    assert endpoint["metricRelabelings"] == [hostname, drop]
    schema = crd_schema(monitor["apiVersion"], monitor["kind"])
    assert not list(jsonschema.Draft7Validator(schema).iter_errors(monitor))


def test_kubelet_root_moves_pod_resources_only(tmp_path):
    """/var/lib/kubelet was written into both DaemonSets: on k0s or microk8s the exporter's
    hostPath volume (type Directory) kept its pods from starting. But the kubelet keeps its
    device-plugins directory at /var/lib/kubelet/device-plugins whatever its --root-dir (a
    constant of its device manager; kubernetes/website#55430 documents it, k0s#7585 met
    it): moved with the root, the plugin found no kubelet.sock and never registered."""
    objects = render({"kubeletRoot": "/var/lib/k0s/kubelet/"}, tmp_path=tmp_path)
    for suffix, volume, host_path, mounted in (
        (
            "-exporter",
            "pod-resources",
            "/var/lib/k0s/kubelet/pod-resources",
            "/var/lib/kubelet/pod-resources",
        ),
        (
            "-exporter",
            "device-plugins",
            "/var/lib/kubelet/device-plugins",
            "/var/lib/kubelet/device-plugins",
        ),
        (
            "-plugin",
            "device-plugins",
            "/var/lib/kubelet/device-plugins",
            "/var/lib/kubelet/device-plugins",
        ),
    ):
        spec = pod_spec(find(objects, "DaemonSet", suffix))
        (host,) = [v["hostPath"]["path"] for v in spec["volumes"] if v["name"] == volume]
        assert host == host_path
        mounts = [m["mountPath"] for c in spec["containers"] for m in c.get("volumeMounts", ())]
        assert mounted in mounts  # where the daemons look, unchanged
    moved = render({"kubeletDevicePluginsDir": "/data/kubelet/device-plugins/"}, tmp_path=tmp_path)
    for suffix in ("-exporter", "-plugin"):
        spec = pod_spec(find(moved, "DaemonSet", suffix))
        (host,) = [v["hostPath"]["path"] for v in spec["volumes"] if v["name"] == "device-plugins"]
        assert host == "/data/kubelet/device-plugins"


def test_the_gpu_price_may_come_from_helm_set(tmp_path):
    """helm --set rules.gpuHourlyPrice=2.5 keeps 2.5 a string, which the schema refused."""
    done = run_helm(
        "template",
        "gf",
        str(CHART),
        "--api-versions",
        PROMETHEUS_OPERATOR,
        "--set",
        "rules.gpuHourlyPrice=2.5",
        tmp_path=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "vector(2.5)" in done.stdout


def _mps_daemon(values: dict[str, Any], tmp_path: Path) -> dict[str, Any] | None:
    found = [
        o
        for o in render(values, tmp_path=tmp_path)
        if o["kind"] == "DaemonSet" and o["metadata"]["name"].endswith("-mps-control-daemon")
    ]
    return found[0] if found else None


def test_the_mps_control_daemon_runs_where_nvidias_chart_runs_it(tmp_path):
    """A resource shared with sharing.mps is registered only once its MPS control daemon
    answers, and nothing in the chart started one: MPS sharing never came up. NVIDIA's
    chart's daemonset-mps-control-daemon.yml, ported: its image, commands, env, privilege,
    volumes and node selector."""
    assert _mps_daemon({}, tmp_path) is None  # no config: nothing asks for MPS
    no_mps = "version: v1\nflags:\n  migStrategy: mixed\n"
    assert _mps_daemon({"config": {"map": {"a": no_mps}}}, tmp_path) is None
    daemon = _mps_daemon({"nodeSelector": {"pool": "gpu"}, "config": {"name": "mine"}}, tmp_path)
    spec = pod_spec(daemon)
    assert spec["nodeSelector"] == {"nvidia.com/mps.capable": "true", "pool": "gpu"}
    assert spec["shareProcessNamespace"] is True
    mounts, _ = spec["initContainers"]  # and the config-manager's first read
    assert mounts["command"] == ["mps-control-daemon", "mount-shm"]
    assert mounts["securityContext"] == {"privileged": True}
    assert mounts["volumeMounts"] == [
        {"name": "mps-root", "mountPath": "/mps", "mountPropagation": "Bidirectional"}
    ]
    ctr = container(daemon, "mps-control-daemon")
    assert ctr["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"  # NVIDIA's, as theirs
    assert ctr["command"] == ["mps-control-daemon"]
    assert ctr["securityContext"] == {"privileged": True}
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env == {
        "NODE_NAME": None,  # from the pod's node
        "CONFIG_FILE": "/config/config.yaml",
        "NVIDIA_MIG_MONITOR_DEVICES": "all",  # an external config may set a MIG strategy
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    }
    assert {m["name"]: m["mountPath"] for m in ctr["volumeMounts"]} == {
        "mps-shm": "/dev/shm",
        "mps-root": "/mps",
        "available-configs": "/available-configs",
        "config": "/config",
    }
    volumes = {v["name"]: v.get("hostPath") for v in spec["volumes"]}
    assert volumes == {
        "mps-root": {"path": "/run/nvidia/mps", "type": "DirectoryOrCreate"},
        "mps-shm": {"path": "/run/nvidia/mps/shm"},
        "available-configs": None,
        "config": None,
    }
    off = {"config": {"name": "mine"}, "mps": {"controlDaemon": {"enabled": False}}}
    assert _mps_daemon(off, tmp_path) is None
    for version in KUBE_VERSIONS:
        kubernetes_validate.validate(daemon, version, strict=True)


MPS_CONFIG = """version: v1
sharing:
  mps:
    resources:
      - name: nvidia.com/gpu
        replicas: 4
"""


def test_the_mps_control_daemon_reads_the_plugins_config_and_is_signalled_on_a_new_one(
    tmp_path,
):
    values = {"config": {"map": {"a": MPS_CONFIG}}, "migStrategy": "mixed"}
    daemon = _mps_daemon(values, tmp_path)
    ctr = container(daemon, "mps-control-daemon")
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["CONFIG_FILE"] == "/config/config.yaml"
    assert env["MIG_STRATEGY"] == "mixed"
    assert env["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    sidecar = {e["name"]: e.get("value") for e in container(daemon, "config-manager")["env"]}
    assert sidecar["PROCESS_TO_SIGNAL"] == "/usr/bin/mps-control-daemon"
    assert sidecar["SEND_SIGNAL"] == "true"
    # the plugin's own config-manager still signals the plugin
    plugin = find(render(values, tmp_path=tmp_path), "DaemonSet", "-plugin")
    mine = {e["name"]: e.get("value") for e in container(plugin, "config-manager")["env"]}
    assert mine["PROCESS_TO_SIGNAL"] == "/opt/venv/bin/python"
    assert pod_spec(daemon)["serviceAccountName"] == pod_spec(plugin)["serviceAccountName"]


def _mps_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The MPS control daemon's pod, its containers keyed by what they run: the shm mount
    (init), the config-manager's first read (init) and its watch, and the daemon."""
    (daemon,) = [
        o
        for o in objects
        if o["kind"] == "DaemonSet" and o["metadata"]["name"].endswith("mps-control-daemon")
    ]
    spec = pod_spec(daemon)
    roles = {}
    for c in spec["initContainers"] + spec["containers"]:
        env = {e["name"]: e.get("value") for e in c.get("env", ())}
        roles[(c["command"][-1], env.get("ONESHOT"))] = {
            "env": env,
            "privileged": (c.get("securityContext") or {}).get("privileged", False),
            "mounts": {m["mountPath"]: m.get("mountPropagation") for m in c["volumeMounts"]},
        }
    return {
        "containers": roles,
        "nodeSelector": spec["nodeSelector"],
        "hostPaths": {v["name"]: v.get("hostPath") for v in spec["volumes"]},
    }


def test_the_mps_control_daemon_renders_as_nvidias_own_chart_renders_it(tmp_path):
    """NVIDIA's chart (tests/data, verbatim) and gpufleet's, given the same values: the same
    containers running the same commands with the same env, privilege and mounts, on the
    same host paths and MPS-capable nodes."""
    config = (
        "version: v1\nflags:\n  migStrategy: mixed\n"
        "sharing:\n  mps:\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 4\n"
    )
    values = {"config": {"map": {"default": config}, "default": "default"}}
    theirs = _mps_pod(render(values, tmp_path=tmp_path, chart=NVIDIA_CHART, api_versions=()))
    ours = _mps_pod(render(values, tmp_path=tmp_path))
    assert ours["nodeSelector"] == theirs["nodeSelector"] == {"nvidia.com/mps.capable": "true"}
    assert ours["hostPaths"] == theirs["hostPaths"]
    assert ours["containers"].keys() == theirs["containers"].keys()
    for role, their in theirs["containers"].items():
        mine = ours["containers"][role]
        assert mine["privileged"] == their["privileged"], role
        assert mine["mounts"] == their["mounts"], role
        assert mine["env"] == their["env"], role
