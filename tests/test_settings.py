"""Flags, env vars and defaults: precedence and error messages (dcgm-exporter names)."""

import functools
import os
import re
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pydantic import AliasChoices, ValidationError
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict

from gpufleet.autoscaler.replay.settings import SimulateSettings
from gpufleet.autoscaler.settings import AutoscalerSettings
from gpufleet.exporter.settings import ExporterSettings
from gpufleet.plugin.settings import PluginSettings
from gpufleet.settings import (
    ScalarEnvSource,
    SettingsError,
    _empty_env_unset,
    build_parser,
    load_settings,
    setting,
)
from gpufleet.shared_settings import (
    debug_setting,
    kube_url_setting,
    kubeconfig_setting,
    log_format_setting,
    sim_fleet_setting,
)


def load(argv, monkeypatch, env=None):
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    parser = build_parser(ExporterSettings, prog="gpufleet exporter", description="")
    return load_settings(ExporterSettings, parser, argv)


@pytest.mark.parametrize(
    ("argv", "env", "field", "expected"),
    [
        ([], {}, "address", ":9400"),
        ([], {}, "collect_interval_ms", 5000),
        (["-a", "127.0.0.1:9500"], {}, "address", "127.0.0.1:9500"),
        ([], {"DCGM_EXPORTER_LISTEN": ":9600"}, "address", ":9600"),
        (["--address", ":1"], {"DCGM_EXPORTER_LISTEN": ":9600"}, "address", ":1"),
        (["-c", "1000"], {"DCGM_EXPORTER_INTERVAL": "2000"}, "collect_interval_ms", 1000),
        ([], {"DCGM_EXPORTER_INTERVAL": "2000"}, "collect_interval_ms", 2000),
        (["-k"], {}, "kubernetes", True),
        ([], {"DCGM_EXPORTER_KUBERNETES": "true"}, "kubernetes", True),
        (["--no-kubernetes"], {"DCGM_EXPORTER_KUBERNETES": "true"}, "kubernetes", False),
        ([], {"KUBERNETES_VIRTUAL_GPUS": "1"}, "kubernetes_virtual_gpus", True),
        (["-rbmn"], {}, "replace_blanks_in_model_name", True),
        # Go's flag package takes two dashes on a short one too
        (["--rbmn"], {}, "replace_blanks_in_model_name", True),
        (["--c=1000"], {}, "collect_interval_ms", 1000),
        (["--a", ":1"], {}, "address", ":1"),
        (["-f", "/x.csv"], {}, "collectors", __import__("pathlib").Path("/x.csv")),
        ([], {"NVIDIA_RESOURCE_NAMES": "a/b, c/d"}, "resource_names", ("a/b", "c/d")),
        # urfave/cli's string slices: each repeat adds (dcgm-exporter app.go)
        (
            ["--nvidia-resource-names", "a/b", "--nvidia-resource-names", "c/d"],
            {},
            "resource_names",
            ("a/b", "c/d"),
        ),
        (
            [
                "--kubernetes-pod-label-allowlist-regex=^a$",
                "--kubernetes-pod-label-allowlist-regex=^b$",
            ],
            {},
            "kubernetes_pod_label_allowlist_regex",
            "^a$,^b$",
        ),
        # urfave/cli: an empty bool env var is false, an empty number's is unset
        ([], {"DCGM_EXPORTER_KUBERNETES": ""}, "kubernetes", False),
        ([], {"DCGM_EXPORTER_INTERVAL": ""}, "collect_interval_ms", 5000),
        # Go's ParseBool spellings
        ([], {"DCGM_EXPORTER_KUBERNETES": "TRUE"}, "kubernetes", True),
        ([], {"DCGM_EXPORTER_KUBERNETES": "T"}, "kubernetes", True),
        (["--kubernetes=False"], {}, "kubernetes", False),
    ],
    ids=[
        "default address",
        "default interval 5 s",
        "short flag",
        "env var",
        "flag beats env",
        "interval flag beats env",
        "interval env",
        "bool flag",
        "bool env",
        "negated flag beats env",
        "unprefixed dcgm env name",
        "multi-letter single-dash alias",
        "a short alias with two dashes",
        "a one-letter alias with two dashes and =",
        "a one-letter alias with two dashes, value next",
        "collectors path",
        "resource names list",
        "resource names repeated",
        "allowlist repeated",
        "empty bool env is false",
        "empty number env is unset",
        "bool env TRUE",
        "bool env T",
        "bool flag False",
    ],
)
def test_precedence(argv, env, field, expected, monkeypatch):
    assert getattr(load(argv, monkeypatch, env), field) == expected


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["-c", "3"], {}, "invalid flag --collect-interval: 3 ms is below"),
        (["-c", "3"], {}, r"in milliseconds \(did you mean 3000\?\) \(got '3'\)$"),
        # issue 15: 0 is no slip of units, so no "did you mean 0?"
        (
            ["-c", "0"],
            {},
            r"0 ms is below the 100 ms minimum; the interval is in milliseconds "
            r"\(got '0'\)$",
        ),
        ([], {"DCGM_EXPORTER_INTERVAL": "3"}, "invalid env var DCGM_EXPORTER_INTERVAL"),
        ([], {"DCGM_EXPORTER_INTERVAL": "soon"}, "invalid env var DCGM_EXPORTER_INTERVAL"),
        (["--compat", "5.0"], {}, "invalid flag --compat"),
        ([], {"DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE": "x"}, "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE"),
        # pydantic took these; Go's ParseBool, and so NVIDIA's daemons, refuse them
        ([], {"DCGM_EXPORTER_KUBERNETES": "yes"}, "invalid env var DCGM_EXPORTER_KUBERNETES: "),
        ([], {"DCGM_EXPORTER_KUBERNETES": "on"}, "not a boolean"),
    ],
    ids=[
        "ms footgun flag",
        "ms footgun hint",
        "zero has no hint",
        "ms footgun env",
        "not a number",
        "bad choice",
        "bad env choice",
        "bool env yes",
        "bool env on",
    ],
)
def test_bad_values_name_the_flag_or_env(argv, env, message, monkeypatch):
    with pytest.raises(SettingsError, match=message) as exc:
        load(argv, monkeypatch, env)
    assert "Value error" not in str(exc.value)  # issue 15: pydantic's prefix is noise


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag;"),
        (["--colectors", "x"], "--colectors x (did you mean '--collectors'?)"),
        (["--kubernetes-enable-pod-label=1"], "(did you mean '--kubernetes-enable-pod-labels'?)"),
        (["-c"], "argument -c/--collect-interval: expected one argument"),
        (["stray"], "unrecognized arguments: stray;"),
        (["--kubernetes=tRUE"], "invalid flag --kubernetes: 'tRUE' is not a boolean"),  # Go's
    ],
    ids=["unknown", "typo", "typo with value", "missing value", "positional", "bool case"],
)
def test_flag_errors_are_one_line_first(argv, message, monkeypatch, capsys):
    """Issue 15: the error and a did-you-mean, not 20-38 lines of usage before them."""
    with pytest.raises(SystemExit) as exc:
        load(argv, monkeypatch)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpufleet exporter: error: ")
    assert message in err and err.endswith("run 'gpufleet exporter --help' for usage\n")


def test_help_lists_flags_with_env_vars(capsys):
    parser = build_parser(ExporterSettings, prog="gpufleet exporter", description="")
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    out = capsys.readouterr().out
    needles = ("-f COLLECTORS, --collectors", "DCGM_EXPORTER_COLLECTORS", "-rbmn")
    for needle in (*needles, "-k, --kubernetes[=BOOL], --no-kubernetes"):
        assert needle in out


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["--kubernetes"], {}, True),
        (["-k"], {}, True),
        (["--kubernetes=true"], {}, True),
        (["--kubernetes=TRUE"], {}, True),
        (["--kubernetes=1"], {}, True),
        (["--kubernetes=false"], {}, False),
        (["--kubernetes=False"], {}, False),
        (["--kubernetes=0"], {}, False),
        (["-k=false"], {}, False),
        (["-k=true"], {}, True),
        (["--kubernetes", "false"], {}, False),
        (["--no-kubernetes"], {}, False),
        (["--kubernetes=false"], {"DCGM_EXPORTER_KUBERNETES": "true"}, False),
        (["--kubernetes=true", "--no-kubernetes"], {}, False),
        ([], {}, False),
    ],
    ids=[
        "bare long flag",
        "bare alias",
        "=true",
        "=TRUE any case",
        "=1",
        "=false",
        "=False any case",
        "=0",
        "alias =false",
        "alias =true",
        "value as the next word",
        "negated",
        "=false beats env true",
        "last one wins",
        "default",
    ],
)
def test_bool_flags_take_urfave_cli_forms(argv, env, expected, monkeypatch):
    assert load(argv, monkeypatch, env).kubernetes is expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--kubernetes=yes"], "invalid flag --kubernetes: 'yes' is not a boolean"),
        (["-k=on"], "invalid flag -k: 'on' is not a boolean"),
        (["--kubernetes="], "invalid flag --kubernetes: '' is not a boolean"),
        (["--no-kubernetes=true"], "invalid flag --no-kubernetes: takes no value"),
    ],
    ids=["yes", "alias on", "empty value", "value on the negated form"],
)
def test_bad_bool_values_exit_2_naming_the_flag(argv, message, monkeypatch, capsys):
    with pytest.raises(SystemExit) as exc:
        load(argv, monkeypatch)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "env", "field", "expected"),
    [
        (["--enable-pprof"], {}, "enable_pprof", True),
        ([], {"DCGM_EXPORTER_ENABLE_PPROF": "true"}, "enable_pprof", True),
        (["--dump-enabled=true"], {}, "dump_enabled", True),
        ([], {}, "dump_directory", "/tmp/dcgm-exporter-debug"),
        (["--dump-directory", "/d"], {}, "dump_directory", "/d"),
        ([], {}, "dump_retention_hours", 24),
        ([], {"DCGM_EXPORTER_DUMP_RETENTION": "0"}, "dump_retention_hours", 0),
        ([], {}, "dump_compression", True),
        (["--dump-compression=false"], {}, "dump_compression", False),
        ([], {"DCGM_EXPORTER_DUMP_COMPRESSION": "false"}, "dump_compression", False),
        (["--enable-gpu-bind-unbind-watch"], {}, "enable_gpu_bind_unbind_watch", True),
        ([], {}, "gpu_bind_unbind_poll_interval", "1s"),
        (
            [],
            {"DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL": "500ms"},
            "gpu_bind_unbind_poll_interval",
            "500ms",
        ),
        (["--enable-dcgm-log", "--dcgm-log-level", "DEBUG"], {}, "dcgm_log_level", "DEBUG"),
        (["-r", "host:5555"], {}, "remote_hostengine_info", "host:5555"),
        (["--web-systemd-socket"], {}, "web_systemd_socket", True),
        (["--disable-startup-validate"], {}, "disable_startup_validate", True),
        (["-s", "g", "-p", "g"], {}, "cpu_devices", "g"),
    ],
    ids=[
        "pprof flag",
        "pprof env",
        "dump enabled",
        "dump directory default",
        "dump directory flag",
        "dump retention default 24 h",
        "dump retention env",
        "dump compression default on",
        "dump compression off",
        "dump compression env",
        "bind-unbind watch",
        "bind-unbind interval default",
        "bind-unbind interval env",
        "dcgm log level",
        "remote host engine",
        "systemd socket",
        "startup validate",
        "switch and cpu devices",
    ],
)
def test_dcgm_only_flags_are_accepted(argv, env, field, expected, monkeypatch):
    assert getattr(load(argv, monkeypatch, env), field) == expected


# Every flag and alias of dcgm-exporter's pkg/cmd/app.go, one row of the docs' table each.
DCGM_FLAGS = [
    ("-f", "--collectors"),
    ("-a", "--address"),
    ("-c", "--collect-interval"),
    ("-k", "--kubernetes"),
    ("--kubernetes-gpu-id-type",),
    ("--kubernetes-enable-pod-labels", "--kubernetes-enable-pod-uid"),
    ("--kubernetes-pod-label-allowlist-regex",),
    ("--kubernetes-virtual-gpus",),
    ("--kubernetes-enable-dra",),
    ("--pod-resources-kubelet-socket",),
    ("--nvidia-resource-names",),
    ("--hpc-job-mapping-dir",),
    ("-r", "--remote-hostengine-info"),
    ("-d", "--devices", "-s", "--switch-devices", "-p", "--cpu-devices"),
    ("-m", "--configmap-data"),
    ("--web-config-file",),
    ("--web-systemd-socket",),
    ("-x", "--xid-count-window-size", "--clock-events-count-window-size"),
    ("-n", "--no-hostname"),
    ("-o", "--use-old-namespace"),
    ("-rbmn", "--replace-blanks-in-model-name"),
    ("--fake-gpus",),
    ("--debug",),
    ("--log-format",),
    ("--enable-dcgm-log", "--dcgm-log-level"),
    ("--dump-enabled", "--dump-directory", "--dump-retention", "--dump-compression"),
    ("--disable-startup-validate",),
    ("--enable-gpu-bind-unbind-watch", "--gpu-bind-unbind-poll-interval"),
    ("--enable-pprof",),
]


@pytest.mark.parametrize("flags", DCGM_FLAGS, ids=[row[-1] for row in DCGM_FLAGS])
def test_every_dcgm_exporter_flag_is_known(flags):
    parser = build_parser(ExporterSettings, prog="gpufleet exporter", description="")
    assert [flag for flag in flags if flag not in parser._option_string_actions] == []


def _assert_same_field(declared, made) -> None:
    """A settings field as its shared factory makes it: flags, env var, default, help."""
    assert (declared.default, declared.validation_alias, declared.description) == (
        made.default,
        made.validation_alias,
        made.description,
    )
    assert declared.json_schema_extra == made.json_schema_extra


@pytest.mark.parametrize(
    ("settings_cls", "used_for"),
    [
        (ExporterSettings, "for pod labels, DRA and -m"),
        (PluginSettings, ""),
        (AutoscalerSettings, ""),
    ],
    ids=["exporter", "plugin", "autoscaler"],
)
def test_kube_connection_fields_are_the_shared_definition(settings_cls, used_for):
    """--kube-url and --kubeconfig come from one factory in every daemon: same flags, env
    vars, default and help (the exporter adds when it reads them), in the daemon's group."""
    fields = settings_cls.model_fields
    group = fields["kube_url"].json_schema_extra["group"]
    for name, made in (
        ("kube_url", kube_url_setting(group=group, used_for=used_for)),
        ("kubeconfig", kubeconfig_setting(group=group)),
    ):
        _assert_same_field(fields[name], made)


def test_kube_connection_fields_read_flags_and_kubectl_env(monkeypatch):
    monkeypatch.setenv("KUBECONFIG", "/k/config")
    monkeypatch.setenv("GPUFLEET_KUBE_URL", "http://127.0.0.1:1")
    settings = load(["--kube-url", "http://127.0.0.1:2"], monkeypatch)
    assert (settings.kube_url, settings.kubeconfig) == ("http://127.0.0.1:2", "/k/config")


@pytest.mark.parametrize(
    "settings_cls", [ExporterSettings, PluginSettings], ids=["exporter", "plugin"]
)
def test_sim_fleet_is_the_shared_definition(settings_cls):
    declared = settings_cls.model_fields["sim_fleet"]
    made = sim_fleet_setting(group=declared.json_schema_extra["group"])
    assert (declared.validation_alias, declared.description, declared.json_schema_extra) == (
        made.validation_alias,
        made.description,
        made.json_schema_extra,
    )


class _Choices(BaseSettings):
    """A scalar settings class using what ExporterSettings does not: several env var names
    for one field, no env var, Optional."""

    model_config = SettingsConfigDict(populate_by_name=True, extra="forbid")

    both: str = setting("", AliasChoices("FIRST_NAME", "SECOND_NAME"), group="g", help="h")
    nameless: int = setting(0, None, "--nameless", group="g", help="h")
    maybe: Path | None = setting(None, "MAYBE_PATH", group="g", help="h")


def _aliases(info) -> list[str]:
    alias = info.validation_alias
    return alias.choices if isinstance(alias, AliasChoices) else [alias] if alias else []


def _env_keys(settings_cls: type[BaseSettings]) -> list[str]:
    names = [*settings_cls.model_fields]
    for info in settings_cls.model_fields.values():
        names += _aliases(info)
    return names


_ENV_KEY = st.sampled_from([*_env_keys(ExporterSettings), *_env_keys(_Choices), "OTHER"]).flatmap(
    lambda name: st.sampled_from([name, name.lower(), name.upper(), name.title()])
)
_ENV_VALUE = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"))


@pytest.mark.parametrize("settings_cls", [ExporterSettings, _Choices], ids=["exporter", "choices"])
@given(env=st.dictionaries(_ENV_KEY, _ENV_VALUE, max_size=12))
@hypothesis_settings(max_examples=200)
def test_scalar_env_source_reads_what_pydantic_settings_reads(settings_cls, env):
    """Issue 15: the light env source gives the state pydantic-settings' own env source
    gives, for any environment: the same names in any case, the same precedence between
    them and the same keys (which name errors and precedence); but for field names, which
    it does not read, so they are left out of what pydantic-settings is given; and but for
    an empty number, which is unset as urfave/cli reads it (pydantic-settings passes it on,
    to fail)."""
    declared = {n.lower() for n in _env_keys(settings_cls)[len(settings_cls.model_fields) :]}
    env = {k: v for k, v in env.items() if k.lower() in declared or k == "OTHER"}
    unset_if_empty = {
        name
        for info in settings_cls.model_fields.values()
        if _empty_env_unset(info)
        for name in _aliases(info)
    }
    with mock.patch.dict(os.environ, env, clear=True):
        theirs = EnvSettingsSource(settings_cls)()
        expected = {k: v for k, v in theirs.items() if not (v == "" and k in unset_if_empty)}
        assert ScalarEnvSource(settings_cls)() == expected


@pytest.mark.parametrize(
    ("settings_cls", "required"),
    [
        (ExporterSettings, {}),
        (PluginSettings, {}),
        (AutoscalerSettings, {}),
        (SimulateSettings, {"trace": "t.csv"}),
    ],
)
def test_no_command_reads_an_env_var_by_its_field_name(settings_cls, required):
    """`DEBUG=1`, `ADDRESS=...`, `SEED=x`: set for something else in a container or a CI
    job, they turned on debug logging, moved a listener or failed the command on a setting
    no `--help` names. Only the env vars `--help` names are read."""
    declared = {n.lower() for n in _env_keys(settings_cls)[len(settings_cls.model_fields) :]}
    names = [n for n in settings_cls.model_fields if n.lower() not in declared]
    assert names
    with mock.patch.dict(os.environ, {}, clear=True):
        clean = settings_cls(**required)
    with mock.patch.dict(os.environ, {n.upper(): "not a value" for n in names}, clear=True):
        assert settings_cls(**required) == clean


# In a fresh interpreter: does building ExporterSettings leave answers in the ABCs' caches?
_ABC_CHILD = """
import abc, collections.abc, pathlib
from gpufleet.exporter.settings import ExporterSettings

def cached():
    return sum(len(abc._get_dump(cls)[2]) for cls in (collections.abc.Mapping,
        collections.abc.Sequence, collections.abc.Set))

before = cached()
ExporterSettings(address="127.0.0.1:0")
print(cached() - before)
"""


def test_exporter_settings_leave_no_abc_cache_entries():
    """Issue 15: pydantic-settings' env source asked each field's type whether it is a
    Mapping, Sequence or Set; the ABCs kept every answer, 0.2 MiB in each exporter."""
    out = subprocess.run(
        [sys.executable, "-c", _ABC_CHILD], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "0"


def _float_fields(settings_cls: type[BaseSettings]) -> list[str]:
    return [
        name
        for name, info in settings_cls.model_fields.items()
        if info.annotation in (float, float | None)
    ]


@pytest.mark.parametrize(
    "settings_cls", [ExporterSettings, PluginSettings, AutoscalerSettings, SimulateSettings]
)
@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_no_float_setting_takes_inf_or_nan(settings_cls, value):
    """A duration or rate of inf is a typo: it crashed the simulator's oracle and killed the
    exporter's collector thread while the daemon served on."""
    fields = _float_fields(settings_cls)
    assert fields
    for name in fields:
        with pytest.raises(ValidationError, match="finite number"):
            settings_cls(**{name: value})


@pytest.mark.parametrize(
    ("settings_cls", "argv", "message"),
    [
        (
            AutoscalerSettings,
            ["--lease-duration-seconds", "5", "--renew-deadline-seconds", "5"],
            "invalid flag --renew-deadline-seconds: must be shorter than "
            "--lease-duration-seconds (5)",
        ),
        (
            AutoscalerSettings,
            ["--prometheus-url", "prometheus:9090"],
            "invalid flag --prometheus-url: not an http:// or https:// URL",
        ),
        (
            SimulateSettings,
            ["--trace", "t.csv", "--min-replicas", "5", "--max-replicas", "2"],
            "invalid flag --max-replicas: is below --min-replicas (5)",
        ),
        (
            PluginSettings,
            ["--metrics-address", "nope"],
            "invalid flag --metrics-address: listen address 'nope': missing port",
        ),
    ],
    ids=["lease", "prometheus url", "replicas", "plugin metrics address"],
)
def test_settings_that_contradict_or_cannot_work_name_the_flag(settings_cls, argv, message):
    parser = build_parser(settings_cls, prog="gpufleet", description="")
    with pytest.raises(SettingsError) as exc:
        load_settings(settings_cls, parser, argv)
    assert message in str(exc.value)


@pytest.mark.parametrize("settings_cls", [PluginSettings, AutoscalerSettings])
def test_logging_fields_are_the_shared_definition(settings_cls):
    fields = settings_cls.model_fields
    group = fields["debug"].json_schema_extra["group"]
    for name, made in (
        ("debug", debug_setting(group=group)),
        ("log_format", log_format_setting(group=group)),
    ):
        _assert_same_field(fields[name], made)


def test_the_plugin_logs_as_the_other_daemons_do():
    """It had no --debug or --log-format: GPUFLEET_LOG_FORMAT=json was ignored."""
    parser = build_parser(PluginSettings, prog="gpufleet plugin", description="")
    settings = load_settings(PluginSettings, parser, ["--log-format", "json", "--debug"])
    assert (settings.log_format, settings.debug) == ("json", True)
    assert "GPUFLEET_LOG_FORMAT" in parser.format_help()


@pytest.mark.parametrize(
    "settings_cls", [ExporterSettings, PluginSettings, AutoscalerSettings, SimulateSettings]
)
def test_no_duration_setting_takes_more_than_a_day(settings_cls):
    """`--collect-timeout 1e10`, `-c 9999999999999`: a thread's wait overflowed, which killed
    the exporter's collector while it served its first snapshot on."""
    durations = [n for n in settings_cls.model_fields if n.endswith(("_seconds", "_ms"))]
    assert durations
    for name in durations:
        day = 86_400 * (1000 if name.endswith("_ms") else 1)
        with pytest.raises(ValidationError) as raised:
            settings_cls(**{name: day + 1})
        said = {e["loc"][0]: e["msg"] for e in raised.value.errors()}
        unit = "ms" if name.endswith("_ms") else "s"
        assert said[name] == f"Value error, must be at most {day} {unit} (a day)"


@pytest.mark.parametrize(
    ("settings_cls", "field", "read"),
    [
        (ExporterSettings, "web_config_file", None),  # dcgm-exporter's "": plain HTTP
        (PluginSettings, "web_config_file", None),
        (ExporterSettings, "collectors", "must not be empty"),
        (ExporterSettings, "pod_resources_kubelet_socket", "must not be empty"),
    ],
)
def test_an_empty_path_is_none_or_an_error(settings_cls, field, read):
    """Path("") is ".": a chart templating "" for the web config failed with "Is a
    directory: '.'", and the exporter dialled a pod-resources socket named "."."""
    env = _env_keys(settings_cls)[len(settings_cls.model_fields) :]
    alias = settings_cls.model_fields[field].validation_alias
    assert alias in env
    with mock.patch.dict(os.environ, {alias: ""}, clear=True):
        if read is None:
            assert getattr(settings_cls(), field) is None
        else:
            with pytest.raises(ValidationError, match=read):
                settings_cls()


@pytest.mark.parametrize("settings_cls", [ExporterSettings, PluginSettings, AutoscalerSettings])
@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://[::1", "not a URL: Invalid IPv6 URL"),
        ("http://127.0.0.1:99999", "not a URL: Port out of range"),
        ("127.0.0.1:8001", "not an http:// or https:// URL"),
        ("http://", "not an http:// or https:// URL"),
    ],
)
def test_a_url_is_checked_where_it_is_given(settings_cls, url, said):
    """`--kube-url http://[::1` was a bare "Invalid IPv6 URL" from the autoscaler, named
    --configmap-data in the exporter, and a runtime warning in the plugin; port 99999 was
    accepted, and failed at every tick."""
    with pytest.raises(ValidationError, match=re.escape(said)):
        settings_cls(kube_url=url)
    settings_cls(kube_url="http://[::1]:8001")


@pytest.mark.parametrize(
    ("window", "scrape", "ok"),
    [("0s", 5, False), ("9s", 5, False), ("10s", 5, True), ("500ms", 1, False), ("2m", 5, True)],
)
def test_the_rate_window_holds_two_scrapes(window, scrape, ok):
    """Its help said so, and `0s` was taken: irate() then answers no sample, and every
    workload holds on MissingMetrics."""
    make = functools.partial(AutoscalerSettings, rate_window=window, scrape_interval_seconds=scrape)
    if ok:
        make()
    else:
        with pytest.raises(ValidationError, match="must hold at least two scrapes"):
            make()
