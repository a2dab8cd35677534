"""The aggregator's request-header settings and the user it asserts: pure."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.autoscaler.core.requestheader import (
    AuthConfigError,
    UserInfo,
    access_review,
    forbidden_message,
    name_allowed,
    parse_config,
    user_from_headers,
)

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
DATA = {
    "requestheader-client-ca-file": PEM,
    "requestheader-allowed-names": '["front-proxy-client"]',
    "requestheader-username-headers": '["X-Remote-User"]',
    "requestheader-group-headers": '["X-Remote-Group"]',
    "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
}


def test_user_groups_and_extra_come_from_the_configured_headers() -> None:
    config = parse_config(DATA)
    headers = {
        "x-remote-user": ["alice"],
        "x-remote-group": ["dev", "system:authenticated"],
        "x-remote-extra-scopes": ["a", "b"],
        "x-remote-extra-acme.com%2fproject": ["p1"],
        "x-other": ["x"],
    }
    assert user_from_headers(config, headers) == UserInfo(
        "alice",
        ("dev", "system:authenticated"),
        (("acme.com/project", ("p1",)), ("scopes", ("a", "b"))),
    )
    assert user_from_headers(config, {"x-remote-group": ["dev"]}) is None
    # The aggregator's discovery and OpenAPI requests name no group: authenticated all the
    # same, as any API server's chain makes them (they were 403: discovery went stale).
    aggregator = user_from_headers(config, {"x-remote-user": ["system:kube-aggregator"]})
    assert aggregator == UserInfo("system:kube-aggregator", ("system:authenticated",), ())
    anonymous = user_from_headers(config, {"x-remote-user": ["system:anonymous"]})
    assert anonymous is not None and anonymous.groups == ()
    assert name_allowed(config, "front-proxy-client") and not name_allowed(config, "mallory")
    assert name_allowed(parse_config({**DATA, "requestheader-allowed-names": "[]"}), "anyone")


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"requestheader-client-ca-file": ""}, "requestheader-client-ca-file holds no PEM"),
        ({"requestheader-allowed-names": "front-proxy"}, "requestheader-allowed-names is not a"),
        ({"requestheader-group-headers": "[1]"}, "requestheader-group-headers is not a JSON"),
        ({"requestheader-username-headers": "[]"}, "requestheader-username-headers is empty"),
        # json.loads raises RecursionError here, which ValueError did not catch
        ({"requestheader-allowed-names": "[" * 100_000}, "requestheader-allowed-names is not"),
    ],
)
def test_a_bad_configmap_names_the_key(change: dict, says: str) -> None:
    with pytest.raises(AuthConfigError, match=says) as caught:
        parse_config({**DATA, **change})
    assert "kube-system/extension-apiserver-authentication" in str(caught.value)


def test_review_bodies_and_forbidden_texts() -> None:
    user = UserInfo("bob", ("g",), (("k", ("v",)),))
    attrs = {"path": "/apis", "verb": "get"}
    assert access_review(user, attrs, resource=False)["spec"] == {
        "user": "bob",
        "groups": ["g"],
        "extra": {"k": ["v"]},
        "nonResourceAttributes": attrs,
    }
    assert forbidden_message(user, attrs, resource=False) == (
        'forbidden: User "bob" cannot get path "/apis"'
    )
    json.dumps(access_review(user, attrs, resource=True))  # serialisable as is


KEYS = st.sampled_from(sorted(DATA))


@given(
    st.dictionaries(KEYS, st.text(max_size=40)),
    st.dictionaries(st.text(max_size=20), st.lists(st.text(max_size=10), max_size=3)),
)
def test_any_configmap_parses_or_is_one_config_error(data: dict, headers: dict) -> None:
    try:
        config = parse_config({**DATA, **data})
    except AuthConfigError:
        return
    user = user_from_headers(config, {k.lower(): v for k, v in headers.items()})
    assert user is None or user.name
