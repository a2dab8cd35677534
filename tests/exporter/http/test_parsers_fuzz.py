"""Fuzzing what the HTTP side parses: the web config file and the Accept headers. Any
exception other than the intended one fails (issue 15); modest example counts."""

from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.exporter.http.server import accepts_gzip, wants_openmetrics
from gpufleet.http.webconfig import WebConfigError, parse_web_config

FUZZ = settings(max_examples=300, deadline=None)
SOURCE = Path("/nonexistent-dir/web.yml")

_KEYS = st.sampled_from(
    [
        "tls_server_config", "http_server_config", "rate_limit", "basic_auth_users",
        "cert_file", "key_file", "cert", "key", "client_ca", "client_ca_file",
        "client_auth_type", "cipher_suites", "curve_preferences", "min_version",
        "max_version", "prefer_server_cipher_suites", "client_allowed_sans", "headers",
        "http2", "burst", "interval", "X-Frame-Options", "X-XSS-Protection", "alice",
    ]
)  # fmt: skip
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(["1s", "0", "-1s", "TLS13", "RequireAnyClientCert", "deny", "\x00", "\ud800"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=12,
)
_TAGS = st.sampled_from(
    ["!!timestamp", "!!set", "!!int", "!!float", "!!binary", "!!omap", "!!pairs", "!!map",
     "!!seq", "!!str", "!!bool", "!!null", "!!python/tuple", "&a", "*a", "!local", ""]
)  # fmt: skip
_YAML = st.one_of(
    st.dictionaries(_KEYS, _VALUES, max_size=4).map(yaml.safe_dump),
    st.builds(
        lambda top, inner, tag, value: f"{top}:\n  {inner}: {tag} {value}\n",
        _KEYS,
        _KEYS,
        _TAGS,
        st.sampled_from(["x", "2023-13-01", "1", "[1, 2]", "{a: 1}", '"\\0"', "?", "- a"]),
    ),
    st.text(max_size=80),
)


@FUZZ
@given(_YAML)
def test_web_config_raises_only_web_config_error_in_one_line(text: str) -> None:
    try:
        config = parse_web_config(text, source=SOURCE)
        config.ssl_context()  # files are relative to a directory that does not exist
    except WebConfigError as exc:
        message = str(exc)
        assert message.startswith(str(SOURCE)) and "\n" not in message
        assert len(message) < 1000


_MEDIA = st.sampled_from(
    ["application/openmetrics-text", "text/plain", "*/*", "text/*", "application/*", "a/b"]
)
_PARAMS = st.sampled_from(
    ["q=0.5", "q=0", "q=1.0", "q=nan", "q=inf", "q=", "q=-1", "version=1.0.0",
     "version=0.0.4", 'version="1.0.0"', "charset=utf-8", "", "=", ";"]
)  # fmt: skip
_ACCEPT = st.one_of(
    st.text(max_size=60),
    st.lists(
        st.builds(lambda m, ps: ";".join([m, *ps]), _MEDIA, st.lists(_PARAMS, max_size=3)),
        max_size=4,
    ).map(",".join),
)


@FUZZ
@given(_ACCEPT)
def test_accept_headers_never_raise(header: str) -> None:
    assert wants_openmetrics(header) in (True, False)
    assert accepts_gzip(header) in (True, False)
