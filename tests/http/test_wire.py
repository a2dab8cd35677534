"""The request-head parser and response-head writer (`gpufleet.http.wire`): RFC 9112's
rules as tables, and hypothesis fuzzing (nothing but BadRequest ever escapes the parser)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.http.wire import (
    MAX_BODY_BYTES,
    MAX_HEADERS,
    MAX_LINE_BYTES,
    BadRequest,
    http_date,
    parse_request_head,
    response_head,
)


def test_a_scrape_parses() -> None:
    request = parse_request_head(
        b"GET /metrics?x=1 HTTP/1.1\r\nHost: node:9400\r\nAccept-Encoding: gzip\r\n"
        b"User-Agent: Prometheus/3.1.0\r\nAccept: text/plain;q=0.5\r\n"
        b"X-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n"
    )
    assert (request.method, request.path, request.query) == ("GET", "/metrics", "x=1")
    assert request.version == (1, 1) and request.keep_alive and request.content_length == 0
    assert request.headers["accept-encoding"] == "gzip"
    assert request.headers["x-prometheus-scrape-timeout-seconds"] == "10"


@pytest.mark.parametrize(
    ("head", "keep_alive"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", True),
        (b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", False),
        (b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, CLOSE\r\n\r\n", False),
        (b"GET / HTTP/1.0\r\n\r\n", False),
        (b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", True),
    ],
    ids=["1.1 default", "1.1 close", "1.1 close in a list", "1.0 default", "1.0 keep-alive"],
)
def test_keep_alive_follows_version_and_connection(head: bytes, keep_alive: bool) -> None:
    assert parse_request_head(head).keep_alive is keep_alive


def test_empty_lines_before_the_request_line_are_ignored() -> None:
    assert parse_request_head(b"\r\n\r\nGET / HTTP/1.0\r\n\r\n").path == "/"


@pytest.mark.parametrize(
    ("head", "expects"),
    [
        (b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n", True),
        (b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", False),
    ],
    ids=["HTTP/1.1", "ignored in HTTP/1.0 (RFC 9110 §10.1.1)"],
)
def test_expect_100_continue(head: bytes, expects: bool) -> None:
    assert parse_request_head(head).expects_continue is expects


def test_repeated_fields_are_joined_and_values_trimmed() -> None:
    request = parse_request_head(
        b"GET / HTTP/1.1\r\nHost: x\r\nAccept: a/b\r\naccept:\t c/d \r\nX-Latin: caf\xe9\r\n\r\n"
    )
    assert request.headers["accept"] == "a/b, c/d"
    assert request.headers["x-latin"] == "café"  # obs-text: latin-1, kept


@pytest.mark.parametrize(
    ("target", "path", "query"),
    [
        (b"http://node:9400/metrics?a=b", "/metrics", "a=b"),
        (b"https://node", "/", ""),
        (b"HTTP://node/metrics", "/metrics", ""),
    ],
    ids=["with a path", "authority only", "scheme in capitals"],
)
def test_absolute_form_targets_are_served_by_their_path(
    target: bytes, path: str, query: str
) -> None:
    """RFC 9112 §3.2.2: a server MUST accept the absolute form (clients send it to proxies)."""
    request = parse_request_head(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (request.path, request.query) == (path, query)


def test_a_small_body_is_announced_for_the_server_to_read_and_drop() -> None:
    request = parse_request_head(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\n")
    assert request.content_length == 5


REFUSED = [
    (b"GET /metrics\r\n\r\n", 400, "no version"),
    (b"GET  /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 400, "two spaces"),
    (b"G@T / HTTP/1.1\r\nHost: x\r\n\r\n", 400, "method not a token"),
    (b"GET metrics HTTP/1.1\r\nHost: x\r\n\r\n", 400, "target not a path"),
    (b"GET /a\x7fb HTTP/1.1\r\nHost: x\r\n\r\n", 400, "control byte in target"),
    (b"GET / HTTP/1.x\r\n\r\n", 400, "malformed version"),
    (b"GET / HTTP/2.0\r\n\r\n", 505, "HTTP/2 on an HTTP/1 port"),
    (b"GET / HTTP/9.9\r\n\r\n", 505, "unknown version"),
    (b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", 400, "no colon"),
    (b"GET / HTTP/1.1\r\nHost: x\r\nHost : x\r\n\r\n", 400, "space before the colon"),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n  folded\r\n\r\n", 400, "obs-fold"),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX: \x00\x01\r\n\r\n", 400, "NUL in a value"),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n", 400, "bare CR"),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX: a\nb\r\n\r\n", 400, "bare LF"),
    (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400, "negative length"),
    (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1e3\r\n\r\n", 400, "length not digits"),
    (
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        400,
        "two lengths",
    ),
    (
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
        400,
        "huge length",
    ),
    (
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1),
        413,
        "body too large",
    ),
    (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", 501, "chunked"),
    (
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        400,
        "chunked and a length: smuggling",
    ),
    (b"GET /" + b"a" * MAX_LINE_BYTES + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "long target"),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"a" * MAX_LINE_BYTES + b"\r\n\r\n", 431, "long field"),
    (
        b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X: a\r\n" * (MAX_HEADERS + 1) + b"\r\n",
        431,
        "many fields",
    ),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03junk\r\n\r\n", 400, "TLS on the plain port"),
    (b"GET / HTTP/1.1\r\n\r\n", 400, "HTTP/1.1 without Host"),
    (b"GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", 400, "two Hosts"),
]


@pytest.mark.parametrize(("head", "status"), [r[:2] for r in REFUSED], ids=[r[2] for r in REFUSED])
def test_refused_heads(head: bytes, status: int) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_request_head(head)
    assert caught.value.status == status
    reason = caught.value.reason
    assert "\n" not in reason and "\r" not in reason and len(reason) < 120


def test_http_date_is_imf_fixdate_in_any_locale() -> None:
    assert http_date(784111777) == "Sun, 06 Nov 1994 08:49:37 GMT"  # RFC 9110's example


def test_response_head() -> None:
    head = response_head(
        404,
        [("Content-Type", "text/plain")],
        content_length=9,
        date="Sun, 06 Nov 1994 08:49:37 GMT",
        connection="close",
    )
    assert head == (
        b"HTTP/1.1 404 Not Found\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
        b"Content-Type: text/plain\r\nContent-Length: 9\r\nConnection: close\r\n\r\n"
    )


def test_a_response_header_cannot_inject_lines() -> None:
    with pytest.raises(ValueError, match="control character"):
        response_head(
            200, [("X", "a\r\nSet-Cookie: b")], content_length=0, date="d", connection=None
        )


_PIECES = st.sampled_from(
    [b"GET", b"HEAD", b" ", b"/", b"/metrics", b"?", b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2",
     b"\r\n", b"\n", b"\r", b":", b": ", b"Host", b"Content-Length", b"Transfer-Encoding",
     b"Connection", b"close", b"keep-alive", b"0", b"12", b"-1", b",", b"\t", b"\x00",
     b"\xff", b"\x7f", b"chunked", b"a" * 9000]
)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.binary(max_size=8)), max_size=30))
def test_the_parser_raises_only_bad_request(pieces: list[bytes]) -> None:
    head = b"".join(pieces) + b"\r\n\r\n"
    try:
        request = parse_request_head(head)
    except BadRequest as exc:
        assert 400 <= exc.status < 600 and "\n" not in exc.reason
        return
    assert request.path.startswith("/") and request.version in ((1, 0), (1, 1))
    assert 0 <= request.content_length <= MAX_BODY_BYTES
