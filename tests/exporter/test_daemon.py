"""Wiring decisions of `gpufleet exporter` that do not need a running server."""

from gpufleet.exporter.daemon import series_options
from gpufleet.exporter.settings import ExporterSettings
from gpufleet.settings import settings_from_argv


def test_no_hostname_is_parsed_and_ignored_like_dcgm_exporter_4() -> None:
    # dcgm-exporter 4.x reads -n into its config and never uses it; its Helm values suggest
    # it, so honouring it dropped the Hostname label on such nodes (issue 15).
    settings = settings_from_argv(
        ExporterSettings, prog="t", description="", argv=["-n", "--node-name", "node-a"]
    )
    assert settings.no_hostname
    assert series_options(settings).hostname == "node-a"


def test_a_hostname_that_is_not_utf8_is_served_with_replacement_characters(monkeypatch) -> None:
    """Python decodes an environment variable (and gethostname) with surrogateescape: a
    NODE_NAME byte that is not UTF-8 became a lone surrogate, every render raised, and
    /metrics answered 503 for good."""
    monkeypatch.setenv("NODE_NAME", "n\udcffode")
    settings = settings_from_argv(ExporterSettings, prog="t", description="", argv=[])
    assert series_options(settings).hostname == "n\ufffdode"
