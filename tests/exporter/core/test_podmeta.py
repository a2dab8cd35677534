"""Pod labels as series labels: dcgm-exporter's sanitising and allowlist, plus the labels
that would break a scrape (issue 15 §2)."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.exporter.core.podmeta import parse_allowlist, pod_labels, sanitize_label_name


# dcgm-exporter's utils_test.go TestSanitizeLabelName.
@pytest.mark.parametrize(
    ("key", "expected"),
    [
        pytest.param("label.with.dots/and-slashes", "label_with_dots_and_slashes", id="dots"),
        pytest.param("label@with#special!chars", "label_with_special_chars", id="special"),
        pytest.param("valid_label_name", "valid_label_name", id="valid-unchanged"),
    ],
)
def test_sanitize_label_name(key: str, expected: str) -> None:
    assert sanitize_label_name(key) == expected


# dcgm-exporter's kubernetes_label_filter_test.go TestShouldIncludeLabel.
@pytest.mark.parametrize(
    ("patterns", "key", "included"),
    [
        ("", "any-label", True),
        ("", "app.kubernetes.io/name", True),
        ("^app$", "app", True),
        ("^app$", "tier", False),
        (r"^app\..*", "app.kubernetes.io/name", True),
        (r"^app\..*", "tier", False),
        ("^app$,^tier$", "app", True),
        ("^app$,^tier$", "tier", True),
        ("^app$,^tier$", "environment", False),
        ("^(app|tier|version)$", "tier", True),
        ("^(app|tier|version)$", "environment", False),
        (r"^app\.kubernetes\.io/.*", "app.kubernetes.io/version", True),
        (r"^app\.kubernetes\.io/.*", "custom-label", False),
        ("^app$,^tier$", "pod-template-hash", False),
        ("tier", "my-tier-x", True),  # unanchored, as Go's MatchString
    ],
)
def test_allowlist(patterns: str, key: str, included: bool) -> None:
    served = pod_labels({key: "v"}, parse_allowlist(patterns))
    assert (served == ((sanitize_label_name(key), "v"),)) is included


def test_invalid_pattern_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"pattern '\[invalid' is not a valid regex"):
        parse_allowlist("^app$,[invalid")


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param({"b": "2", "a": "1"}, (("a", "1"), ("b", "2")), id="sorted"),
        pytest.param({"pod": "x", "namespace": "y", "app": "z"}, (("app", "z"),), id="clash"),
        pytest.param({"UUID": "x", "Hostname": "y", "dra_pool_name": "z"}, (), id="identity"),
        pytest.param({"DCGM_FI_DRIVER_VERSION": "1"}, (), id="label-row"),
        pytest.param({"2fa": "on", "__x": "1"}, (), id="invalid-names"),
        # two keys sanitise to one name: the first by original key wins
        pytest.param({"a.b": "dot", "a_b": "under"}, (("a_b", "dot"),), id="collision"),
    ],
)
def test_labels_that_would_break_a_scrape_are_dropped(labels, expected) -> None:
    assert pod_labels(labels, ()) == expected


# Hypothesis is not in this branch's test extra yet: every pair of these nasty keys instead.
NASTY_KEYS = ("a.b", "a_b", "a/b", "9lives", "_x", "__x", "pod", "ünï", "", "-", "x" * 70)


@pytest.mark.parametrize("keys", list(itertools.combinations(NASTY_KEYS, 2)))
def test_any_labels_give_unique_valid_names(keys: tuple[str, str]) -> None:
    served = pod_labels(dict.fromkeys(keys, "v"), ())
    names = [name for name, _ in served]
    assert len(set(names)) == len(names)
    for name in names:
        assert name[0].isalpha() or name[0] == "_"
        assert not name.startswith("__")
        assert sanitize_label_name(name) == name


@given(
    st.text(max_size=60)
    | st.sampled_from(["a{4294967296}", "(" * 2000 + ")" * 2000, "[", "a**", "(?P<"])
)
def test_a_bad_allowlist_is_one_value_error(value: str) -> None:
    """The flag's bad value is one line at startup: a repeat count over 2^32 raised
    OverflowError, and deep nesting RecursionError, past the flag's error handling."""
    try:
        parse_allowlist(value)
    except ValueError as err:
        assert len(str(err)) < 300


def test_the_gpu_status_labels_are_reserved() -> None:
    """DCGM_EXP_P2P_STATUS and DCGM_EXP_GPU_HEALTH_STATUS carry `peer_gpu`, `link_status`,
    `health_watch` and `health_error_code` beside the pod's labels. A pod labelled
    `link-status` gave its series that name twice, and Prometheus refused the node's whole
    scrape ("label name is not unique"); dcgm-exporter keeps one map of labels."""
    labels = {"peer_gpu": "a", "link-status": "b", "health.watch": "c", "health_error_code": "d"}
    assert pod_labels({**labels, "app": "x"}, ()) == (("app", "x"),)
