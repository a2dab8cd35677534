"""The plugin suites' fixtures: `make_node`, the real daemon on a fake kubelet."""

from helpers.plugin_daemon import make_node  # noqa: F401 (a fixture, found by name)
