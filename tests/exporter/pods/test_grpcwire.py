"""grpcwire: gRPC's HTTP/2 rules as data. Rows ported from grpc-go's own tests
(`internal/grpcutil/encode_duration_test.go`, `internal/transport/http_util_test.go`) are
marked; the byte parsers are fuzzed: they return or raise CallError, nothing else.
"""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.exporter.pods.grpcwire import (
    CallError,
    ReplyBuffer,
    StatusCode,
    call_status,
    decode_message,
    encode_timeout,
    length_prefixed,
    request_headers,
    reset_status,
)

NS, US, MS, S, MIN = 1e-9, 1e-6, 1e-3, 1.0, 60.0


@pytest.mark.parametrize(
    ("seconds", "want"),
    [
        # grpc-go TestEncodeDuration
        (12345678 * NS, b"12345678n"),
        (123456789 * NS, b"123457u"),
        (12345678 * US, b"12345678u"),
        (123456789 * US, b"123457m"),
        (12345678 * MS, b"12345678m"),
        (123456789 * MS, b"123457S"),
        (12345678 * S, b"12345678S"),
        (123456789 * S, b"2057614M"),
        (12345678 * MIN, b"12345678M"),
        (123456789 * MIN, b"2057614H"),
        # ours
        (5.0, b"5000000u"),
        (0.0, b"0n"),
        (-1.0, b"0n"),
    ],
    ids=lambda v: repr(v),
)
def test_encode_timeout(seconds: float, want: bytes) -> None:
    assert encode_timeout(seconds) == want


@given(st.floats(min_value=1e-9, max_value=1e20))
def test_encoded_timeout_is_never_shorter_and_fits_eight_digits(seconds: float) -> None:
    """Never shorter than asked, up to the 8-digit cap of 99,999,999 hours."""
    encoded = encode_timeout(seconds)
    value, unit = int(encoded[:-1]), encoded[-1:]
    size = {b"n": NS, b"u": US, b"m": MS, b"S": S, b"M": MIN, b"H": 3600.0}[unit]
    assert value <= 99_999_999
    assert value * size >= min(seconds, 99_999_999 * 3600.0) * (1 - 1e-9)


def test_request_headers_are_the_call_definition_in_order() -> None:
    assert request_headers(
        "/v1.PodResourcesLister/List", authority="localhost", timeout_seconds=5.0
    ) == [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/v1.PodResourcesLister/List"),
        (b":authority", b"localhost"),
        (b"grpc-timeout", b"5000000u"),
        (b"te", b"trailers"),
        (b"content-type", b"application/grpc"),
    ]


def test_length_prefixed() -> None:
    assert length_prefixed(b"") == b"\x00\x00\x00\x00\x00"
    assert length_prefixed(b"ab") == b"\x00\x00\x00\x00\x02ab"


@given(st.binary(max_size=300), st.lists(st.integers(0, 305), max_size=6))
def test_reply_buffer_reassembles_any_split(message: bytes, cuts: list[int]) -> None:
    """DATA frame boundaries have no relation to message boundaries (PROTOCOL-HTTP2.md)."""
    framed = length_prefixed(message)
    buffer = ReplyBuffer(max_bytes=300)
    edges = sorted({0, len(framed), *(c for c in cuts if c < len(framed))})
    for start, end in itertools.pairwise(edges):
        buffer.feed(framed[start:end])
    assert buffer.message() == message


@pytest.mark.parametrize(
    ("chunks", "error"),
    [
        ([], "no reply message from a unary call"),
        ([b"\x00\x00"], "no reply message from a unary call"),
        ([b"\x00\x00\x00\x00\x03ab"], "the reply message is truncated"),
        ([b"\x00\x00\x00\x00\x01a", b"\x00"], "more than one message in a unary reply"),
        ([b"\x01\x00\x00\x00\x01a"], "compressed flag 1 in the reply"),
        ([b"\x07\x00\x00\x00\x01a"], "compressed flag 7 in the reply"),
        ([b"\x00\x00\x00\x00\x0b"], "received message larger than max (11 vs. 10)"),
    ],
    ids=[
        "nothing",
        "half a prefix",
        "truncated",
        "a second message",
        "compressed",
        "bad flag",
        "over the limit: refused at the prefix",
    ],
)
def test_reply_buffer_refuses(chunks: list[bytes], error: str) -> None:
    buffer = ReplyBuffer(max_bytes=10)
    with pytest.raises(CallError) as caught:
        for chunk in chunks:
            buffer.feed(chunk)
        buffer.message()
    assert (caught.value.code, caught.value.message) == (StatusCode.INTERNAL, error)


@given(st.lists(st.binary(max_size=40), max_size=5))
def test_reply_buffer_fuzz(chunks: list[bytes]) -> None:
    buffer = ReplyBuffer(max_bytes=64)
    try:
        for chunk in chunks:
            buffer.feed(chunk)
        message = buffer.message()
    except CallError as exc:
        assert exc.code == StatusCode.INTERNAL
    else:
        assert length_prefixed(message) == b"".join(chunks)


GRPC = {b":status": b"200", b"content-type": b"application/grpc"}


@pytest.mark.parametrize(
    ("headers", "trailers", "want"),
    [
        (GRPC, {b"grpc-status": b"0"}, (0, "")),
        (GRPC, {b"grpc-status": b"14", b"grpc-message": b"down"}, (14, "down")),
        ({**GRPC, b"grpc-status": b"8", b"grpc-message": b"slow%20down"}, None, (8, "slow down")),
        (
            {**GRPC, b"content-type": b"application/grpc+proto"},
            {b"grpc-status": b"4"},
            (4, ""),
        ),
        (
            {**GRPC, b"content-type": b"application/grpc; charset=utf-8"},
            {b"grpc-status": b"0"},
            (0, ""),
        ),
        (GRPC, {}, (2, "server closed the stream without a grpc-status")),
        (GRPC, {b"grpc-status": b"1x"}, (2, "malformed grpc-status: b'1x'")),
        (GRPC, {b"grpc-status": b"99999999999"}, (2, "malformed grpc-status: b'99999999999'")),
        (GRPC, {b"grpc-status": b"17"}, (17, "")),
        (
            {b":status": b"404", b"content-type": b"text/html"},
            None,
            (
                12,
                "unexpected HTTP status code received from server: 404; "
                'received unexpected content-type "text/html"',
            ),
        ),
        (
            {b":status": b"503"},
            None,
            (
                14,
                "unexpected HTTP status code received from server: 503; "
                'received unexpected content-type ""',
            ),
        ),
        (
            {b":status": b"200", b"content-type": b"application/grpcx"},
            {b"grpc-status": b"0"},
            (
                2,
                "unexpected HTTP status code received from server: 200; "
                'received unexpected content-type "application/grpcx"',
            ),
        ),
        ({}, None, (13, 'missing HTTP status; received unexpected content-type ""')),
    ],
    ids=[
        "ok",
        "error in trailers",
        "trailers-only",
        "+proto subtype",
        "parameters",
        "no grpc-status: UNKNOWN",
        "malformed grpc-status",
        "grpc-status beyond int32",
        "a code newer than ours is kept",
        "not gRPC: 404 is UNIMPLEMENTED",
        "not gRPC: 503 is UNAVAILABLE",
        "not gRPC: 200 is UNKNOWN",
        "no headers at all",
    ],
)
def test_call_status(
    headers: dict[bytes, bytes], trailers: dict[bytes, bytes] | None, want: tuple[int, str]
) -> None:
    assert call_status(headers, trailers) == want


_header_names = st.sampled_from(
    [b":status", b"content-type", b"grpc-status", b"grpc-message", b"x"]
)
_header_values = st.one_of(
    st.binary(max_size=12), st.sampled_from([b"application/grpc", b"200", b"0", b"14"])
)
_fields = st.dictionaries(_header_names, _header_values, max_size=5)


@given(_fields, st.one_of(st.none(), _fields))
def test_call_status_fuzz(headers: dict[bytes, bytes], trailers: dict[bytes, bytes] | None) -> None:
    code, message = call_status(headers, trailers)
    assert 0 <= code < 2**32 and isinstance(message, str)


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        # grpc-go TestDecodeGrpcMessage
        (b"", ""),
        (b"Hello", "Hello"),
        (b"H%61o", "Hao"),
        (b"H%6", "H%6"),
        (b"%G0", "%G0"),
        (b"%E7%B3%BB%E7%BB%9F", "系统"),
        (b"%EF%BF%BD", "\ufffd"),
        # ours
        (b"%25", "%"),
        (b"%%41", "%A"),
        (b"%FF", "\ufffd"),
    ],
)
def test_decode_message(raw: bytes, want: str) -> None:
    assert decode_message(raw) == want


def test_decode_message_of_every_ascii_character() -> None:
    """grpc-go: printable ASCII but '%' stays; every byte percent-encoded comes back."""
    for byte in range(0x20, 0x7F):
        if byte != ord("%"):
            assert decode_message(bytes([byte])) == chr(byte)
    for byte in range(0x80):
        assert decode_message(b"%%%02X" % byte) == chr(byte)


@given(st.binary(max_size=40))
def test_decode_message_never_fails(raw: bytes) -> None:
    assert isinstance(decode_message(raw), str)


@pytest.mark.parametrize(
    ("error_code", "want"),
    [
        (0, StatusCode.INTERNAL),  # NO_ERROR
        (1, StatusCode.INTERNAL),  # PROTOCOL_ERROR
        (2, StatusCode.INTERNAL),  # INTERNAL_ERROR
        (3, StatusCode.INTERNAL),  # FLOW_CONTROL_ERROR
        (7, StatusCode.UNAVAILABLE),  # REFUSED_STREAM
        (8, StatusCode.CANCELLED),  # CANCEL
        (11, StatusCode.RESOURCE_EXHAUSTED),  # ENHANCE_YOUR_CALM
        (12, StatusCode.PERMISSION_DENIED),  # INADEQUATE_SECURITY
        (0xFF, StatusCode.INTERNAL),
    ],
)
def test_reset_status(error_code: int, want: StatusCode) -> None:
    """PROTOCOL-HTTP2.md's RST_STREAM to gRPC code table."""
    assert reset_status(error_code) == want


def test_call_error_prints_as_grpcio_status_codes_do() -> None:
    assert str(CallError(14, "gone")) == "StatusCode.UNAVAILABLE: gone"
    assert str(CallError(17, "new")) == "StatusCode.Code(17): new"
