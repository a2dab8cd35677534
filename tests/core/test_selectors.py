"""Label selectors as the API server parses and matches them."""

import pytest

from gpufleet.core.selectors import SelectorError, parse_selector, selector_string

LABELS = {"app": "vllm", "tier": "gpu"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        pytest.param("", True, id="empty-matches-everything"),
        pytest.param("app=vllm", True, id="equals"),
        pytest.param("app==vllm,tier=gpu", True, id="double-equals-and-comma-is-and"),
        pytest.param("app!=vllm", False, id="not-equals"),
        pytest.param("tier in (gpu, tpu)", True, id="in"),
        pytest.param("tier notin (gpu)", False, id="notin"),
        pytest.param("model", False, id="exists"),
        pytest.param("!model", True, id="does-not-exist"),
        pytest.param("model!=x", True, id="not-equals-holds-when-absent"),
    ],
)
def test_matching(selector: str, matches: bool) -> None:
    assert all(r.matches(LABELS) for r in parse_selector(selector)) is matches


@pytest.mark.parametrize("selector", ["app in vllm", "!app=x", "a b", "tier in (x"])
def test_a_bad_selector_is_an_error_quoting_it(selector: str) -> None:
    with pytest.raises(SelectorError, match="unable to parse requirement"):
        parse_selector(selector)


def test_match_labels_round_trip() -> None:
    text = selector_string({"tier": "gpu", "app": "vllm"})
    assert text == "app=vllm,tier=gpu"
    assert all(r.matches(LABELS) for r in parse_selector(text))


def test_match_expressions_format_as_the_scale_subresource_does() -> None:
    text = selector_string(
        {"app": "vllm"},
        [
            {"key": "tier", "operator": "In", "values": ["tpu", "gpu"]},
            {"key": "canary", "operator": "DoesNotExist"},
            {"key": "model", "operator": "Exists"},
        ],
    )
    assert text == "app=vllm,tier in (gpu,tpu),!canary,model"
    assert [r.key for r in parse_selector(text)] == ["app", "tier", "canary", "model"]
