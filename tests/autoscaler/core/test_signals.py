"""A spec's PromQL override of a signal is read as the preset's query of that signal is."""

import pytest

from gpufleet.autoscaler.core.signals import PRESETS, queries_for


@pytest.mark.parametrize(
    ("signal", "kind"),
    [
        ("queue_depth", "sum"),
        ("arrival_rate", "sum"),
        ("prompt_tokens_buckets", "buckets"),
        ("ttft_p90_seconds", "quantile"),
    ],
)
def test_an_override_is_read_as_the_presets_query_of_its_signal(signal: str, kind: str) -> None:
    for preset in PRESETS:
        query = queries_for(preset, {signal: "my_query"})[signal]
        assert (query.template, query.kind, query.scale) == ("my_query", kind, 1.0)
        if kind == "quantile":
            assert query.quantile == 0.9
