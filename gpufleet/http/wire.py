"""HTTP/1.1 on the wire, pure: a request head parsed (RFC 9112), a response head written.

Exists so the daemons' port needs no HTTP framework. Every route is a GET of a body built
beforehand, so the server needs only a request-head parser and a response-head writer;
aiohttp's server cost the exporter 10-13 MiB of RSS for them (BENCHMARKS.md, issue 15).

Strict where leniency lets one request be read two ways (request smuggling): whitespace
before a colon, obs-fold, control characters, a malformed or conflicting Content-Length,
and any Transfer-Encoding are refused, never guessed at. A refusal is a BadRequest with the
status to answer and a one-line reason that quotes at most a few bytes of the client's.
HTTP/1.1 needs exactly one Host (RFC 9112 §3.2). Paths are matched as sent, not
percent-decoded (Prometheus, curl and probes send them plain), and only CRLF ends a line
(RFC 9112 §2.2 lets a recipient accept a bare LF, and does not require it): a bare-LF
request gets no answer and is closed at the read timeout.
"""

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

# Prometheus' text format, what every daemon's /metrics serves (prometheus_client's own
# CONTENT_TYPE_LATEST says version=1.0.0 since 0.22, for the same bytes).
TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_HEAD_BYTES = 64 * 1024  # request line and headers together
MAX_LINE_BYTES = 8190  # per line, as aiohttp and nginx
MAX_HEADERS = 100
MAX_BODY_BYTES = 64 * 1024  # no route reads a body; a small one is read and dropped

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VERSION = re.compile(rb"HTTP/([0-9])\.([0-9])")
# Request targets, visible ASCII: origin-form, and absolute-form, which RFC 9112 §3.2.2
# says a server MUST accept (its authority has no "/" or "?").
_ORIGIN = re.compile(rb"/[\x21-\x7e]*")
_ABSOLUTE = re.compile(rb"(?i:https?)://[\x21-\x2e\x30-\x3e\x40-\x7e]+(/[\x21-\x7e]*)?")
_FIELD_VALUE_BAD = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # CTLs but HTAB
_DIGITS = re.compile(rb"[0-9]{1,18}")
_QUOTED_BYTES = 40

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    414: "URI Too Long",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


class BadRequest(Exception):
    """A request head refused with `status`; `reason` is one line for the log and body."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """A parsed request head. `headers` has lowercase names; a repeated field's values
    are joined with ", " (RFC 9110 §5.3)."""

    method: str
    path: str  # the target before any "?", as sent (not percent-decoded)
    query: str
    version: tuple[int, int]
    headers: dict[str, str] = field(default_factory=dict)
    content_length: int = 0
    keep_alive: bool = True
    expects_continue: bool = False  # `Expect: 100-continue` on an HTTP/1.1 request


def parse_request_head(head: bytes) -> Request:
    """Parse a request line and header fields; `head` may end with the blank line's CRLF.
    Raises BadRequest."""
    if len(head) > MAX_HEAD_BYTES:
        raise BadRequest(431, f"request head over {MAX_HEAD_BYTES} bytes")
    while head.startswith(b"\r\n"):  # RFC 9112 §2.2: empty lines before a request
        head = head[2:]
    line, *fields = head.removesuffix(b"\r\n\r\n").split(b"\r\n")
    method, path, query, version = _request_line(line)
    if len(fields) > MAX_HEADERS:
        raise BadRequest(431, f"more than {MAX_HEADERS} header fields")
    headers: dict[str, str] = {}
    hosts = 0
    for raw in fields:
        name, value = _field(raw)
        if name == "host":
            hosts += 1
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    if hosts > 1 or (hosts == 0 and version == (1, 1)):  # RFC 9112 §3.2: MUST be refused
        raise BadRequest(400, f"{hosts} Host header fields; HTTP/1.1 requires exactly one")
    if "transfer-encoding" in headers:
        if "content-length" in headers:  # RFC 9112 §6.1: a smuggling attempt
            raise BadRequest(400, "both Transfer-Encoding and Content-Length")
        raise BadRequest(501, "Transfer-Encoding is not supported: no route reads a body")
    length = _content_length(headers.get("content-length"))
    if length > MAX_BODY_BYTES:
        raise BadRequest(413, f"body of {length} bytes, over {MAX_BODY_BYTES}")
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    keep_alive = "keep-alive" in tokens if version == (1, 0) else "close" not in tokens
    return Request(
        method=method,
        path=path,
        query=query,
        version=version,
        headers=headers,
        content_length=length,
        keep_alive=keep_alive,
        expects_continue=version == (1, 1) and headers.get("expect", "").lower() == "100-continue",
    )


def _request_line(line: bytes) -> tuple[str, str, str, tuple[int, int]]:
    if len(line) > MAX_LINE_BYTES:
        raise BadRequest(414, f"request line over {MAX_LINE_BYTES} bytes")
    parts = line.split(b" ")
    if len(parts) != 3:
        raise BadRequest(400, f"malformed request line {_quote(line)}")
    method, target, version = parts
    if not _TOKEN.fullmatch(method):
        raise BadRequest(400, f"malformed method {_quote(method)}")
    matched = _VERSION.fullmatch(version)
    if not matched:
        raise BadRequest(400, f"malformed HTTP version {_quote(version)}")
    if matched.group(1) != b"1":
        raise BadRequest(505, f"HTTP version {version.decode()} is not supported")
    if _ORIGIN.fullmatch(target):
        origin = target
    elif absolute := _ABSOLUTE.fullmatch(target):
        origin = absolute.group(1) or b"/"  # "http://host" alone asks for "/"
    else:
        raise BadRequest(400, f"malformed request target {_quote(target)}")
    path, _, query = origin.decode("ascii").partition("?")
    return method.decode("ascii"), path, query, (1, int(matched.group(2)))


def _field(raw: bytes) -> tuple[str, str]:
    if len(raw) > MAX_LINE_BYTES:
        raise BadRequest(431, f"header field over {MAX_LINE_BYTES} bytes")
    if raw[:1] in (b" ", b"\t"):
        raise BadRequest(400, "obsolete line folding in the header fields")
    name, colon, value = raw.partition(b":")
    if not colon or not _TOKEN.fullmatch(name):
        raise BadRequest(400, f"malformed header field {_quote(raw)}")
    value = value.strip(b" \t")
    if _FIELD_VALUE_BAD.search(value):
        raise BadRequest(400, f"control character in header field {name.decode()!r}")
    return name.decode("ascii").lower(), value.decode("latin-1")


def _content_length(value: str | None) -> int:
    if value is None:
        return 0
    # A repeated field, or a list in one, is valid only when every member is the same.
    members = {m.strip() for m in value.split(",")}
    if len(members) != 1 or not _DIGITS.fullmatch((only := members.pop()).encode()):
        raise BadRequest(400, f"malformed Content-Length {_quote(value.encode())}")
    return int(only)


def _quote(data: bytes) -> str:
    """A few bytes of client input, safe on one log line."""
    shown = repr(data[:_QUOTED_BYTES])
    return shown + "..." if len(data) > _QUOTED_BYTES else shown


# --- responses ---

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def http_date(epoch_seconds: float) -> str:
    """IMF-fixdate (RFC 9110 §5.6.7), e.g. `Sun, 06 Nov 1994 08:49:37 GMT`; no locale."""
    t = time.gmtime(epoch_seconds)
    return (
        f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT"
    )


def response_head(
    status: int,
    headers: Iterable[tuple[str, str]],
    *,
    content_length: int,
    date: str,
    connection: str | None,
) -> bytes:
    """A response's status line and header fields, ending with the blank line.
    `connection` is the Connection field's value, if one is sent."""
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, '')}", f"Date: {date}"]
    for name, value in headers:
        if _FIELD_VALUE_BAD.search(f"{name}{value}".encode()):
            raise ValueError(f"response header {name!r}: control character in {value!r}")
        lines.append(f"{name}: {value}")
    lines.append(f"Content-Length: {content_length}")
    if connection is not None:
        lines.append(f"Connection: {connection}")
    lines.append("\r\n")
    # Values beyond ASCII (a web config's header, say) go out as UTF-8, as Go's
    # exporter-toolkit and aiohttp send them.
    return "\r\n".join(lines).encode()
