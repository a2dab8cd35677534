"""`listen`: dcgm-exporter's listen-address syntax, shared by the exporter and the plugin."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.core.listen import parse_listen_address

LISTEN = [
    (":9400", (None, 9400), "all-interfaces"),
    ("0.0.0.0:9400", (None, 9400), "ipv4-any-is-every-interface"),
    ("127.0.0.1:9400", ("127.0.0.1", 9400), "ipv4-loopback"),
    ("[::1]:9400", ("::1", 9400), "ipv6-loopback"),
    ("[::]:9400", (None, 9400), "ipv6-any-is-every-interface"),
    ("localhost:8080", ("localhost", 8080), "hostname"),
    (" :0 ", (None, 0), "ephemeral-port-trimmed"),
]


@pytest.mark.parametrize(("text", "expected"), [r[:2] for r in LISTEN], ids=[r[2] for r in LISTEN])
def test_parse_listen_address(text: str, expected: tuple[str | None, int]) -> None:
    assert parse_listen_address(text) == expected


BAD_LISTEN = [
    ("9400", "missing port", "no-colon"),
    ("", "missing port", "empty"),
    ("::1:9400", "put an IPv6 host in brackets", "ipv6-without-brackets"),
    ("[::1]9400", "expected [IPV6]:PORT", "bracket-without-colon"),
    ("[]:9400", "expected [IPV6]:PORT", "empty-brackets"),
    (":http", "port must be a number", "service-name"),
    (":65536", "port must be a number from 0 to 65535", "port-too-big"),
    (":-1", "port must be a number", "negative-port"),
    ("127.0.0.1:", "port must be a number", "empty-port"),
    ("my host:9400", "the host contains whitespace", "space-in-host"),
]


@pytest.mark.parametrize(
    ("text", "message"), [r[:2] for r in BAD_LISTEN], ids=[r[2] for r in BAD_LISTEN]
)
def test_parse_listen_address_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        parse_listen_address(text)

    assert repr(text) in str(caught.value)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=30),
        st.from_regex(r"\A\[?[0-9a-z:. \x00]{0,12}\]?:[0-9²٣ ]{0,8}\Z"),
        st.just(":" + "9" * 5000),
    )
)
def test_listen_addresses_raise_only_value_error_naming_them(text: str) -> None:
    """Issue 15 fuzz: a 5,000-digit port hit int()'s digit limit and said so."""
    try:
        host, port = parse_listen_address(text)
    except ValueError as exc:
        assert str(exc).startswith(f"listen address {text!r}:")
        return
    assert 0 <= port <= 65535 and (host is None or host == host.strip())
