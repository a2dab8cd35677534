"""The plugin's flags and env vars (NVIDIA's names) and how they layer over the config file."""

from pathlib import Path

import pytest

from gpufleet.plugin.core import config_parse
from gpufleet.plugin.core.config import ConfigError, PluginConfig, SharingKind
from gpufleet.plugin.settings import PluginSettings, resolve_config
from gpufleet.settings import SettingsError, build_parser, load_settings

# Every env var the settings read, AliasChoices included.
ALL_ENV = [
    name
    for info in PluginSettings.model_fields.values()
    for name in getattr(info.validation_alias, "choices", [info.validation_alias])
]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """A DaemonSet-like environment on the test machine must not leak into the tables."""
    for name in ALL_ENV:
        monkeypatch.delenv(name, raising=False)


def load(argv, monkeypatch, env=None) -> PluginSettings:
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    parser = build_parser(PluginSettings, prog="gpufleet plugin", description="")
    return load_settings(PluginSettings, parser, argv)


def test_defaults_are_nvidias():
    s = PluginSettings()
    assert (s.mig_strategy, s.fail_on_init_error, s.nvidia_driver_root) == ("none", True, "/")
    assert (s.device_list_strategy, s.device_id_strategy, s.pass_device_specs) == (
        "envvar",
        "uuid",
        False,
    )
    assert s.cdi_annotation_prefix == "cdi.k8s.io/"
    assert s.nvidia_ctk_path == "/usr/bin/nvidia-ctk"
    assert s.container_driver_root == "/driver-root"
    assert s.kubelet_socket == "/var/lib/kubelet/device-plugins/kubelet.sock"
    assert s.shared_devices_allocation_policy == "distributed"
    assert s.device_discovery_strategy == "auto"
    assert resolve_config(s) == (PluginConfig(), ())
    # NVIDIA's plugin writes its CDI specs to /var/run/cdi (internal/cdi/cdi.go), the one
    # directory its chart mounts from the host: written to /etc/cdi first, they stayed in
    # the container, and pods asking for a cdi-* device failed to start.
    assert s.cdi_spec_dirs.split(",")[0] == "/var/run/cdi"


@pytest.mark.parametrize(
    ("argv", "env", "field", "expected"),
    [
        (["--mig-strategy", "mixed"], {}, "mig_strategy", "mixed"),
        ([], {"MIG_STRATEGY": "single"}, "mig_strategy", "single"),
        (["--mig-strategy=mixed"], {"MIG_STRATEGY": "single"}, "mig_strategy", "mixed"),
        (["--fail-on-init-error=false"], {}, "fail_on_init_error", False),
        ([], {"FAIL_ON_INIT_ERROR": "false"}, "fail_on_init_error", False),
        ([], {"GDS_ENABLED": ""}, "gds_enabled", False),
        (["--driver-root", "/run/nvidia/driver"], {}, "nvidia_driver_root", "/run/nvidia/driver"),
        (["--nvidia-driver-root", "/d"], {"NVIDIA_DRIVER_ROOT": "/e"}, "nvidia_driver_root", "/d"),
        (["--dev-root", "/x"], {}, "nvidia_dev_root", "/x"),
        ([], {"NVIDIA_DEV_ROOT": "/y"}, "nvidia_dev_root", "/y"),
        (["--pass-device-specs"], {}, "pass_device_specs", True),
        ([], {"DEVICE_LIST_STRATEGY": "envvar,cdi-cri"}, "device_list_strategy", "envvar,cdi-cri"),
        (
            ["--device-list-strategy", " volume-mounts ,envvar"],
            {},
            "device_list_strategy",
            "volume-mounts,envvar",
        ),
        ([], {"DEVICE_ID_STRATEGY": "index"}, "device_id_strategy", "index"),
        (["--gdrcopy-enabled"], {}, "gdrcopy_enabled", True),
        ([], {"MOFED_ENABLED": "true"}, "mofed_enabled", True),
        ([], {"CDI_ANNOTATION_PREFIX": "x.io/"}, "cdi_annotation_prefix", "x.io/"),
        (["--nvidia-cdi-hook-path", "/h"], {}, "nvidia_ctk_path", "/h"),
        ([], {"NVIDIA_CDI_HOOK_PATH": "/h"}, "nvidia_ctk_path", "/h"),
        ([], {"NVIDIA_CTK_PATH": "/old"}, "nvidia_ctk_path", "/old"),
        (["--driver-root-ctr-path", "/c"], {}, "container_driver_root", "/c"),
        ([], {"CONTAINER_DRIVER_ROOT": "/c"}, "container_driver_root", "/c"),
        ([], {"MPS_ROOT": "/run/nvidia/mps"}, "mps_root", "/run/nvidia/mps"),
        (
            [],
            {"SHARED_DEVICES_ALLOCATION_POLICY": "packed"},
            "shared_devices_allocation_policy",
            "packed",
        ),
        (["--device-discovery-strategy", "nvml"], {}, "device_discovery_strategy", "nvml"),
        ([], {"KUBELET_SOCKET": ""}, "kubelet_socket", ""),
        ([], {"CONFIG_FILE": "/c.yaml"}, "config_file", "/c.yaml"),
        ([], {"GPUFLEET_SIM_FLEET": "8xH100"}, "sim_fleet", "8xH100"),
        ([], {}, "metrics_address", ":9401"),
        ([], {"GPUFLEET_PLUGIN_METRICS_ADDRESS": ":1"}, "metrics_address", ":1"),
        ([], {}, "health_recovery_seconds", 60.0),
        (["--health-recovery-seconds", "0.5"], {}, "health_recovery_seconds", 0.5),
        ([], {"DP_DISABLE_HEALTHCHECKS": "xids,48"}, "dp_disable_healthchecks", "xids,48"),
        ([], {"DP_ENABLE_HEALTHCHECKS": "all"}, "dp_enable_healthchecks", "all"),
    ],
    ids=[
        "flag",
        "env",
        "flag beats env",
        "bool flag false",
        "bool env false",
        "empty bool env is false, as in urfave/cli",
        "--driver-root alias",
        "--nvidia-driver-root beats env",
        "--dev-root",
        "NVIDIA_DEV_ROOT",
        "bare bool flag",
        "device list env comma list",
        "device list normalised",
        "device id env",
        "gdrcopy",
        "mofed env",
        "cdi prefix env",
        "cdi hook path flag",
        "cdi hook path env",
        "old NVIDIA_CTK_PATH env",
        "driver root ctr path flag",
        "old CONTAINER_DRIVER_ROOT env",
        "mps root",
        "allocation policy",
        "discovery strategy",
        "empty kubelet socket: no registration",
        "config file env",
        "sim fleet",
        "metrics default",
        "metrics env",
        "recovery default",
        "recovery flag",
        "DP_DISABLE_HEALTHCHECKS",
        "DP_ENABLE_HEALTHCHECKS",
    ],
)
def test_flags_and_env(argv, env, field, expected, monkeypatch):
    assert getattr(load(argv, monkeypatch, env), field) == expected


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--mig-strategy", "all"], {}, "invalid flag --mig-strategy"),
        ([], {"MIG_STRATEGY": "all"}, "invalid env var MIG_STRATEGY"),
        ([], {"DEVICE_LIST_STRATEGY": "envvar,nvml"}, "invalid env var DEVICE_LIST_STRATEGY"),
        (["--device-list-strategy", ","], {}, "invalid flag --device-list-strategy"),
        ([], {"FAIL_ON_INIT_ERROR": "maybe"}, "invalid env var FAIL_ON_INIT_ERROR"),
        (["--shared-devices-allocation-policy", "spread"], {}, "invalid flag --shared-devices"),
        (["--imex-channel-ids", "1"], {}, "invalid flag --imex-channel-ids"),
        (["--health-recovery-seconds", "-1"], {}, "invalid flag --health-recovery-seconds"),
    ],
    ids=[
        "bad mig flag",
        "bad mig env",
        "bad device list env",
        "empty device list flag",
        "bad bool env",
        "unreleased spread policy",
        "imex channel 1",
        "negative recovery",
    ],
)
def test_bad_values_name_the_flag_or_env(argv, env, message, monkeypatch):
    with pytest.raises(SettingsError, match=message):
        load(argv, monkeypatch, env)


def test_env_values_count_as_given(monkeypatch):
    """resolve_config relies on this: pydantic-settings puts env-sourced fields in
    model_fields_set, and leaves defaults out."""
    s = load(["--mig-strategy", "single"], monkeypatch, {"GDS_ENABLED": "1"})
    assert {"mig_strategy", "gds_enabled"} <= s.model_fields_set
    assert "fail_on_init_error" not in s.model_fields_set


FILE = """\
version: v1
flags:
  migStrategy: single
  failOnInitError: false
  nvidiaDriverRoot: /file-root
  plugin:
    deviceListStrategy: [volume-mounts]
    deviceIDStrategy: index
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        ([], {}, ("single", False, "/file-root", ("volume-mounts",), "index")),
        (
            ["--mig-strategy", "mixed"],
            {},
            ("mixed", False, "/file-root", ("volume-mounts",), "index"),
        ),
        ([], {"MIG_STRATEGY": "none"}, ("none", False, "/file-root", ("volume-mounts",), "index")),
        (
            ["--mig-strategy", "mixed"],
            {"MIG_STRATEGY": "none"},
            ("mixed", False, "/file-root", ("volume-mounts",), "index"),
        ),
        (["--fail-on-init-error"], {}, ("single", True, "/file-root", ("volume-mounts",), "index")),
        (
            [],
            {"FAIL_ON_INIT_ERROR": "true"},
            ("single", True, "/file-root", ("volume-mounts",), "index"),
        ),
        (
            ["--driver-root", "/flag"],
            {"NVIDIA_DRIVER_ROOT": "/env"},
            ("single", False, "/flag", ("volume-mounts",), "index"),
        ),
        (
            [],
            {"NVIDIA_DRIVER_ROOT": "/env"},
            ("single", False, "/env", ("volume-mounts",), "index"),
        ),
        (
            [],
            {"DEVICE_LIST_STRATEGY": "envvar,cdi-annotations"},
            ("single", False, "/file-root", ("envvar", "cdi-annotations"), "index"),
        ),
        (
            ["--device-id-strategy", "uuid"],
            {"DEVICE_ID_STRATEGY": "index"},
            ("single", False, "/file-root", ("volume-mounts",), "uuid"),
        ),
    ],
    ids=[
        "file beats defaults",
        "flag beats file",
        "env beats file",
        "flag beats env beats file",
        "flag set to the default value still beats the file",
        "env set to the default value still beats the file",
        "alias flag beats env",
        "env beats file (driver root)",
        "env list beats file list",
        "device id flag beats env",
    ],
)
def test_precedence_over_file(argv, env, expected, tmp_path, monkeypatch):
    path = tmp_path / "config.yaml"
    path.write_text(FILE)
    config, warnings = resolve_config(load([*argv, "--config-file", str(path)], monkeypatch, env))
    flags = config.flags
    got = (
        flags.mig_strategy,
        flags.fail_on_init_error,
        flags.nvidia_driver_root,
        flags.plugin.device_list_strategy,
        flags.plugin.device_id_strategy,
    )
    assert got == expected
    assert config.sharing.kind is SharingKind.TIME_SLICING
    assert warnings == ()


def test_config_file_from_env_and_dev_root_follows_driver_root(tmp_path, monkeypatch):
    path = tmp_path / "c.json"
    path.write_text('{"version": "v1", "flags": {"nvidiaDriverRoot": "/run/nvidia/driver"}}')
    config, _ = resolve_config(load([], monkeypatch, {"CONFIG_FILE": str(path)}))
    assert config.flags.dev_root == "/run/nvidia/driver"


def test_imex_and_kubelet_socket_reach_the_config(monkeypatch):
    s = load(["--imex-channel-ids", "0", "--kubelet-socket", ""], monkeypatch)
    config, _ = resolve_config(s)
    assert config.imex.channel_ids == (0,)
    assert config.flags.plugin.kubelet_socket == ""


def test_an_empty_imex_env_var_keeps_the_files_channels(tmp_path, monkeypatch):
    """NVIDIA's IMEX_CHANNEL_IDS is an int slice, which urfave/cli leaves unset when empty
    (flag_int_slice.go): the file's channels stay. gpufleet's cleared them."""
    path = tmp_path / "c.yaml"
    path.write_text("version: v1\nimex:\n  channelIDs: [0]\n")
    env = {"CONFIG_FILE": str(path), "IMEX_CHANNEL_IDS": ""}
    config, _ = resolve_config(load([], monkeypatch, env))
    assert config.imex.channel_ids == (0,)


def test_warnings_come_back(tmp_path, monkeypatch):
    path = tmp_path / "config.yaml"
    path.write_text("resources:\n  gpus:\n  - {pattern: '*', name: any}\n")
    _, warnings = resolve_config(load(["--config-file", str(path)], monkeypatch))
    assert warnings == (
        f"{path}: resources: custom resource names are disabled, as in NVIDIA's plugin; ignored",
    )


@pytest.mark.parametrize(
    ("text", "argv", "message"),
    [
        (None, [], "config.yaml: config file not found"),
        ("flags:\n  migStrategy: bogus\n", [], "config.yaml: flags.migStrategy: invalid value"),
        (
            "sharing:\n  mps:\n    resources: [{name: gpu, replicas: 2}]\n",
            [],
            "config.yaml: sharing.mps: using MPS requires --mps-root",
        ),
        (
            "flags:\n  mpsRoot: /m\nsharing:\n  mps:\n    resources: [{name: gpu, replicas: 2}]\n",
            ["--mig-strategy", "mixed"],
            "config.yaml: sharing.mps: using --mig-strategy=mixed",
        ),
    ],
    ids=["missing file", "invalid file", "mps without root", "mps with mixed from a flag"],
)
def test_config_errors_name_the_file(text, argv, message, tmp_path, monkeypatch):
    path = tmp_path / "config.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        resolve_config(load([*argv, "--config-file", str(path)], monkeypatch))
    assert str(exc.value).startswith(f"{tmp_path}/{message}")


def test_unreadable_file_names_it(monkeypatch):
    def read(path: Path) -> str:
        raise PermissionError(13, "Permission denied")

    with pytest.raises(ConfigError, match=r"^/etc/c.yaml: cannot read the config file"):
        resolve_config(load(["--config-file", "/etc/c.yaml"], monkeypatch), read_file=read)


def test_help_lists_nvidia_flags(capsys):
    parser = build_parser(PluginSettings, prog="gpufleet plugin", description="")
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    out = capsys.readouterr().out
    for flag in ("--mig-strategy", "--driver-root", "--nvidia-cdi-hook-path", "--config-file"):
        assert flag in out
    assert "[env MIG_STRATEGY]" in out


# Issue 16 §2.7: flags NVIDIA's CLI (urfave/cli v2 on Go's flag package) takes.
@pytest.mark.parametrize(
    ("argv", "env", "field", "expected"),
    [
        (["--pass-device-specs=T"], {}, "pass_device_specs", True),
        (["--fail-on-init-error=F"], {}, "fail_on_init_error", False),
        (["--gds-enabled=t"], {}, "gds_enabled", True),
        (["-mig-strategy=mixed"], {}, "mig_strategy", "mixed"),
        (["-mig-strategy", "single"], {}, "mig_strategy", "single"),
        (["-pass-device-specs"], {}, "pass_device_specs", True),
        (
            ["--device-list-strategy", "envvar", "--device-list-strategy", "cdi-cri"],
            {},
            "device_list_strategy",
            "envvar,cdi-cri",
        ),
        (
            ["--device-list-strategy=volume-mounts,envvar", "-device-list-strategy=cdi-cri"],
            {},
            "device_list_strategy",
            "volume-mounts,envvar,cdi-cri",
        ),
        ([], {"CDI_FEATURE_FLAGS": "a,b"}, "cdi_feature_flags", "a,b"),
        (["--cdi-feature-flags", "a", "--cdi-feature-flags", "b"], {}, "cdi_feature_flags", "a,b"),
        ([], {"CDI_DISABLE_HOOKS": "update-ldcache"}, "cdi_disable_hooks", "update-ldcache"),
        (["--cdi-disable-hooks", "all"], {}, "cdi_disable_hooks", "all"),
    ],
    ids=[
        "=T",
        "=F",
        "=t",
        "single-dash long flag with =",
        "single-dash long flag, value next",
        "single-dash bool",
        "repeated device list strategy keeps all",
        "repeated and comma forms mix",
        "CDI_FEATURE_FLAGS",
        "repeated --cdi-feature-flags",
        "CDI_DISABLE_HOOKS",
        "--cdi-disable-hooks",
    ],
)
def test_nvidia_cli_forms(argv, env, field, expected, monkeypatch):
    assert getattr(load(argv, monkeypatch, env), field) == expected


def test_cdi_feature_flags_are_named_in_a_warning(monkeypatch):
    """Helm's cdi.featureFlags sets CDI_FEATURE_FLAGS; it is accepted, and said to be unused."""
    _, warnings = resolve_config(load([], monkeypatch, {"CDI_FEATURE_FLAGS": "feature-a"}))
    assert warnings == (
        "--cdi-feature-flags (CDI_FEATURE_FLAGS) 'feature-a': ignored (gpufleet's CDI specs take "
        "no nvcdi feature flags)",
    )


def test_version_flag(capsys):
    parser = build_parser(PluginSettings, prog="gpufleet plugin", description="")
    with pytest.raises(SystemExit) as exc:
        load_settings(PluginSettings, parser, ["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("gpufleet plugin ")


def test_node_labels_api_needs_the_node_name(monkeypatch):
    with pytest.raises(ConfigError, match=r"^--node-labels-api \(GPUFLEET_NODE_LABELS_API\) needs"):
        resolve_config(load(["--node-labels-api"], monkeypatch))
    settings = load(["--node-labels-api"], monkeypatch, {"NODE_NAME": "gpu-0"})
    assert resolve_config(settings)[0] == PluginConfig()


@pytest.mark.parametrize(
    ("path", "field"),
    [(f"flags.{k}", attr) for k, (attr, _) in config_parse.FLAG_KEYS.items()]
    + [(f"flags.plugin.{k}", attr) for k, (attr, _) in config_parse.PLUGIN_KEYS.items()],
)
def test_help_names_the_config_file_key_a_flag_overrides(path, field):
    """The flag table's `[file: ...]` tags come from the help: each key the config file
    reads names its flag's help, so the README says which key each flag overrides."""
    assert f"[file: {path}]" in PluginSettings.model_fields[field].description
