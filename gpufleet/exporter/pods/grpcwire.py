"""gRPC's unary call on HTTP/2, the pure parts: request headers, the length-prefixed
message, and the call's status from the response's headers and trailers.

`grpcunary` moves these over a socket; keeping them apart lets the byte parsing be tested
and fuzzed without one. The rules are gRPC's (grpc/grpc `doc/PROTOCOL-HTTP2.md`,
`doc/statuscodes.md`, `doc/http-grpc-status-mapping.md`); where the documents leave a
choice, this does what grpc-go's client does (`internal/transport`), since the kubelet
is a grpc-go server. Pure: no I/O, no clock.
"""

import math
import re
from enum import IntEnum


class StatusCode(IntEnum):
    """gRPC status codes (doc/statuscodes.md); `name` spells them as every gRPC does."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


_CODES = frozenset(StatusCode)


class CallError(Exception):
    """A call that ended without a reply: the server's status, or one the client made up
    for what it saw on the wire (gRPC's rule: every failure surfaces as a status)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)
        self.code = code  # an int: a server may send a code newer than StatusCode
        self.message = message

    def __str__(self) -> str:
        """As grpcio's `StatusCode` prints, so the exporter's log lines read as before."""
        name = StatusCode(self.code).name if self.code in _CODES else f"Code({self.code})"
        return f"StatusCode.{name}: {self.message}"


# doc/http-grpc-status-mapping.md: only for responses that are not gRPC at all.
_BY_HTTP_STATUS = {
    400: StatusCode.INTERNAL,
    401: StatusCode.UNAUTHENTICATED,
    403: StatusCode.PERMISSION_DENIED,
    404: StatusCode.UNIMPLEMENTED,
    429: StatusCode.UNAVAILABLE,
    431: StatusCode.INTERNAL,
    502: StatusCode.UNAVAILABLE,
    503: StatusCode.UNAVAILABLE,
    504: StatusCode.UNAVAILABLE,
}
# PROTOCOL-HTTP2.md "Errors": RST_STREAM error codes (RFC 9113 section 7); the rest INTERNAL.
_BY_RESET_CODE = {
    7: StatusCode.UNAVAILABLE,  # REFUSED_STREAM: nothing was processed
    8: StatusCode.CANCELLED,  # CANCEL
    11: StatusCode.RESOURCE_EXHAUSTED,  # ENHANCE_YOUR_CALM
    12: StatusCode.PERMISSION_DENIED,  # INADEQUATE_SECURITY
}

_PREFIX_BYTES = 5  # Compressed-Flag (1 byte) and Message-Length (4 bytes, big-endian)
# grpc-timeout: at most 8 digits, then the unit; the finest unit that fits (grpc-go's
# EncodeDuration), rounded up so the server never sees a shorter deadline than ours.
_MAX_TIMEOUT_VALUE = 10**8 - 1
_TIMEOUT_UNITS = (("n", 1), ("u", 10**3), ("m", 10**6), ("S", 10**9), ("M", 60 * 10**9))
_HOUR_NANOS = 3600 * 10**9
_PERCENT_ESCAPE = re.compile(rb"%([0-9A-Fa-f]{2})")
_GRPC_STATUS = re.compile(rb"[+-]?[0-9]+")


def encode_timeout(seconds: float) -> bytes:
    """The grpc-timeout value for a deadline `seconds` away ("0n" when already past)."""
    nanos = math.ceil(seconds * 1e9)
    if nanos <= 0:
        return b"0n"
    for unit, size in _TIMEOUT_UNITS:
        if (value := -(-nanos // size)) <= _MAX_TIMEOUT_VALUE:
            return f"{value}{unit}".encode()
    # Capped at 8 digits: 11,000 years, where grpc-go's int64 nanoseconds end sooner.
    return f"{min(-(-nanos // _HOUR_NANOS), _MAX_TIMEOUT_VALUE)}H".encode()


def request_headers(
    path: str, *, authority: str, timeout_seconds: float
) -> list[tuple[bytes, bytes]]:
    """A unary call's HEADERS: the reserved ones first, then the timeout (as the spec
    asks), then the rest of the Call-Definition. No grpc-accept-encoding: replies come
    uncompressed."""
    return [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path.encode()),
        (b":authority", authority.encode()),
        (b"grpc-timeout", encode_timeout(timeout_seconds)),
        (b"te", b"trailers"),
        (b"content-type", b"application/grpc"),
    ]


def length_prefixed(message: bytes) -> bytes:
    """One Length-Prefixed-Message, uncompressed."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


class ReplyBuffer:
    """Collects a unary reply's DATA, checking its one Length-Prefixed-Message as it
    arrives: a message over `max_bytes` fails on its 5-byte prefix, before it is read.

    DATA frame boundaries mean nothing to gRPC, so `feed` takes any split of the bytes.
    """

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._data = bytearray()
        self._expected: int | None = None  # prefix + message, once the prefix is in

    def feed(self, chunk: bytes) -> None:
        """Add received DATA. Raises CallError (INTERNAL) on a compressed message, one
        over `max_bytes`, or bytes past the first message (unary: exactly one)."""
        self._data += chunk
        if self._expected is None and len(self._data) >= _PREFIX_BYTES:
            flag, size = self._data[0], int.from_bytes(self._data[1:_PREFIX_BYTES], "big")
            if flag != 0:
                # Never asked for (no grpc-accept-encoding); 1 without an encoding, or
                # any other value, is a framing error in grpc-go too.
                raise CallError(StatusCode.INTERNAL, f"compressed flag {flag} in the reply")
            if size > self._max_bytes:
                # grpc-go and grpc core say RESOURCE_EXHAUSTED here, the kubelet's
                # rate-limit code; a reply too big for this client is not that.
                raise CallError(
                    StatusCode.INTERNAL,
                    f"received message larger than max ({size} vs. {self._max_bytes})",
                )
            self._expected = _PREFIX_BYTES + size
        if self._expected is not None and len(self._data) > self._expected:
            raise CallError(StatusCode.INTERNAL, "more than one message in a unary reply")

    def message(self) -> bytes:
        """The reply message, once the stream has ended with status OK. Raises CallError
        (INTERNAL) when no message, or only part of one, arrived."""
        if self._expected is None:
            raise CallError(StatusCode.INTERNAL, "no reply message from a unary call")
        if len(self._data) < self._expected:
            raise CallError(StatusCode.INTERNAL, "the reply message is truncated")
        return bytes(self._data[_PREFIX_BYTES:])


def call_status(
    headers: dict[bytes, bytes], trailers: dict[bytes, bytes] | None
) -> tuple[int, str]:
    """(code, message) of a finished call from its Response-Headers and Trailers.

    A Trailers-Only response (`trailers` None) carries its status in `headers`. A reply
    that is not gRPC (no application/grpc content-type) gets a code from its HTTP status;
    a gRPC one without grpc-status is UNKNOWN, as in grpc-go.
    """
    if not _is_grpc(headers.get(b"content-type", b"")):
        return _http_status(headers)
    fields = headers if trailers is None else trailers
    raw = fields.get(b"grpc-status")
    if raw is None:
        return StatusCode.UNKNOWN, "server closed the stream without a grpc-status"
    if not _GRPC_STATUS.fullmatch(raw) or not -(2**31) <= int(raw) < 2**31:
        return StatusCode.UNKNOWN, f"malformed grpc-status: {raw!r}"
    # grpc-go reads it as a 32-bit int, then as its uint32 code type.
    return int(raw) & 0xFFFFFFFF, decode_message(fields.get(b"grpc-message", b""))


def reset_status(error_code: int) -> int:
    """The status of a call the server reset with RST_STREAM `error_code`."""
    return _BY_RESET_CODE.get(error_code, StatusCode.INTERNAL)


def decode_message(raw: bytes) -> str:
    """grpc-message, percent-decoded and read as UTF-8. Never fails: a broken escape is
    kept as it is and invalid UTF-8 becomes U+FFFD, as the spec allows."""
    decoded = _PERCENT_ESCAPE.sub(lambda m: bytes.fromhex(m[1].decode()), raw)
    return decoded.decode("utf-8", "replace")


def _is_grpc(content_type: bytes) -> bool:
    """application/grpc, alone or with a subtype (`+proto`) or parameters (`;`)."""
    value = content_type.lower()
    return value == b"application/grpc" or value.startswith(
        (b"application/grpc+", b"application/grpc;")
    )


def _http_status(headers: dict[bytes, bytes]) -> tuple[int, str]:
    content_type = headers.get(b"content-type", b"").decode("latin-1")
    unexpected = f'received unexpected content-type "{content_type}"'
    raw = headers.get(b":status")
    if raw is None:
        return StatusCode.INTERNAL, f"missing HTTP status; {unexpected}"
    if not raw.isdigit():
        return StatusCode.INTERNAL, f"malformed HTTP status {raw!r}"
    status = int(raw)
    code = _BY_HTTP_STATUS.get(status, StatusCode.UNKNOWN)
    return code, f"unexpected HTTP status code received from server: {status}; {unexpected}"
