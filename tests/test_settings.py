"""Flags, env vars and defaults: precedence and error messages (dcgm-exporter names)."""

import pytest

from gpufleet.exporter.settings import ExporterSettings
from gpufleet.settings import SettingsError, build_parser, load_settings


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
        (["-f", "/x.csv"], {}, "collectors", __import__("pathlib").Path("/x.csv")),
        ([], {"NVIDIA_RESOURCE_NAMES": "a/b, c/d"}, "resource_names", ("a/b", "c/d")),
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
        "collectors path",
        "resource names list",
    ],
)
def test_precedence(argv, env, field, expected, monkeypatch):
    assert getattr(load(argv, monkeypatch, env), field) == expected


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["-c", "3"], {}, "invalid flag --collect-interval: Value error, 3 ms is below"),
        ([], {"DCGM_EXPORTER_INTERVAL": "3"}, "invalid env var DCGM_EXPORTER_INTERVAL"),
        ([], {"DCGM_EXPORTER_INTERVAL": "soon"}, "invalid env var DCGM_EXPORTER_INTERVAL"),
        (["--compat", "5.0"], {}, "invalid flag --compat"),
        ([], {"DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE": "x"}, "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE"),
    ],
    ids=["ms footgun flag", "ms footgun env", "not a number", "bad choice", "bad env choice"],
)
def test_bad_values_name_the_flag_or_env(argv, env, message, monkeypatch):
    with pytest.raises(SettingsError, match=message.replace("(", r"\(")):
        load(argv, monkeypatch, env)


def test_unknown_flag_exits_2(monkeypatch, capsys):
    with pytest.raises(SystemExit) as exc:
        load(["--no-such-flag"], monkeypatch)
    assert exc.value.code == 2
    assert "--no-such-flag" in capsys.readouterr().err


def test_help_lists_flags_with_env_vars(capsys):
    parser = build_parser(ExporterSettings, prog="gpufleet exporter", description="")
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    out = capsys.readouterr().out
    for needle in ("-f COLLECTORS, --collectors", "DCGM_EXPORTER_COLLECTORS", "-rbmn"):
        assert needle in out
