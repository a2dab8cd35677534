"""A gRPC unary call over HTTP/2 on a unix socket, with `h2` on a blocking socket.

Why not grpcio: the exporter makes one call, the kubelet's pod-resources `List`, every few
seconds, and grpcio costs 14 MiB resident plus gRPC core's channel and 6 threads in every
exporter on every GPU node (BENCHMARKS.md, issue 15); h2 (the protocol library httpx and
hypercorn use, sans-I/O, pure Python) costs about 1 MiB. The framing and status rules are
in `grpcwire`; this module moves bytes.

One connection per call: a List every few seconds on a unix socket costs a connect and
one SETTINGS exchange more than a kept connection (measured, BENCHMARKS.md), and keeps
nothing to look after between calls: no idle PINGs to answer, no GOAWAY or reconnect
state, no thread. During a call h2 answers the server's PING and SETTINGS frames, and
received DATA is acknowledged as it arrives, so flow control never stalls a large reply.
The deadline covers the whole call, connecting included, through socket timeouts.

Never raises anything but CallError, whose code follows gRPC's rules for what the client
sees: no connection or a dropped one is UNAVAILABLE, a passed deadline DEADLINE_EXCEEDED,
a broken reply INTERNAL.
"""

import contextlib
import socket
import threading
import time
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.exceptions

from gpufleet.exporter.pods.grpcwire import (
    CallError,
    ReplyBuffer,
    StatusCode,
    call_status,
    length_prefixed,
    request_headers,
    reset_status,
)

# grpc-go's :authority for unix targets (internal/resolver/unix: OverrideAuthority).
UNIX_AUTHORITY = "localhost"
_RECV_BYTES = 1 << 16


class _Reply:
    """What the server has sent on the call's stream so far."""

    def __init__(self, max_bytes: int) -> None:
        self.headers: dict[bytes, bytes] | None = None
        self.trailers: dict[bytes, bytes] | None = None
        self.data = ReplyBuffer(max_bytes)
        self.ended = False


class UnaryClient:
    """Unary calls to the gRPC server on `socket_path`. Thread-safe; `close` from any
    thread ends a call in flight (CANCELLED) and every later one."""

    def __init__(
        self, socket_path: Path, *, max_receive_bytes: int, authority: str = UNIX_AUTHORITY
    ) -> None:
        self._address = str(socket_path)
        self._max_receive_bytes = max_receive_bytes
        self._authority = authority
        self._lock = threading.Lock()  # guards _closed and _in_flight
        self._closed = False
        self._in_flight: set[socket.socket] = set()

    def call(self, path: str, request: bytes, *, timeout_seconds: float) -> bytes:
        """Call method `path` (`/package.Service/Method`) with a serialized request of at
        most 16 KiB (one DATA frame); returns the serialized reply. Raises CallError."""
        deadline = time.monotonic() + timeout_seconds
        sock = self._open()
        try:
            _connect(sock, self._address, deadline)
            if self._closed:  # closed while connecting: shutdown() could not reach it
                raise CallError(StatusCode.CANCELLED, "client closed")
            return self._exchange(sock, path, request, deadline)
        except CallError:
            if self._closed:  # close() ended it: the dropped connection is ours
                raise CallError(StatusCode.CANCELLED, "client closed") from None
            raise
        except TimeoutError:
            raise CallError(StatusCode.DEADLINE_EXCEEDED, "deadline exceeded") from None
        except OSError as exc:
            if self._closed:
                raise CallError(StatusCode.CANCELLED, "client closed") from None
            raise CallError(StatusCode.UNAVAILABLE, f"{self._address}: {exc}") from None
        except h2.exceptions.H2Error as exc:
            raise CallError(StatusCode.INTERNAL, f"HTTP/2: {exc}") from None
        finally:
            with self._lock:
                self._in_flight.discard(sock)
            sock.close()

    def close(self) -> None:
        """End the call in flight, if any, and refuse later ones."""
        with self._lock:
            self._closed = True
            in_flight = list(self._in_flight)
        for sock in in_flight:
            # Not connected yet, or already closed: the call then stops at its next step.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the caller's recv()

    def _open(self) -> socket.socket:
        with self._lock:
            if self._closed:
                raise CallError(StatusCode.CANCELLED, "client closed")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._in_flight.add(sock)
        return sock

    def _exchange(self, sock: socket.socket, path: str, request: bytes, deadline: float) -> bytes:
        conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        conn.initiate_connection()
        stream = conn.get_next_available_stream_id()
        remaining = max(deadline - time.monotonic(), 0.0)
        headers = request_headers(path, authority=self._authority, timeout_seconds=remaining)
        conn.send_headers(stream, headers)
        conn.send_data(stream, length_prefixed(request), end_stream=True)
        _send(sock, conn, deadline)
        reply = _Reply(self._max_receive_bytes)
        while True:
            sock.settimeout(_remaining(deadline))
            data = sock.recv(_RECV_BYTES)
            if not data:
                raise CallError(StatusCode.UNAVAILABLE, "connection closed by the server")
            for event in conn.receive_data(data):
                _on_event(conn, stream, event, reply)
            if reply.ended:
                break
            # Window updates, PING and SETTINGS acks. A server that sent its whole reply
            # and closed has no use for them, and the reply is in our receive buffer: keep
            # reading, and a reply that was not whole ends at EOF as UNAVAILABLE.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                _send(sock, conn, deadline)
        # The reply is complete: a GOAWAY says goodbye if the server still listens, and
        # nothing that happens to the connection now changes the call's outcome.
        conn.close_connection()
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.sendall(conn.data_to_send())
        # No headers at all reads as a reply without :status (INTERNAL).
        code, message = call_status(reply.headers or {}, reply.trailers)
        if code != StatusCode.OK:
            raise CallError(code, message)
        return reply.data.message()


def _on_event(
    conn: h2.connection.H2Connection, stream: int, event: h2.events.Event, reply: _Reply
) -> None:
    """Apply one h2 event to the reply; events of other streams cannot occur (one call)."""
    if isinstance(event, h2.events.ResponseReceived):
        reply.headers = dict(event.headers)  # type: ignore[arg-type]  # bytes: no encoding
    elif isinstance(event, h2.events.DataReceived):
        reply.data.feed(event.data)
        conn.acknowledge_received_data(event.flow_controlled_length, stream)
    elif isinstance(event, h2.events.TrailersReceived):
        reply.trailers = dict(event.headers)  # type: ignore[arg-type]
    elif isinstance(event, h2.events.StreamEnded):
        reply.ended = True
    elif isinstance(event, h2.events.StreamReset):
        code = reset_status(event.error_code)
        raise CallError(code, f"stream reset by the server (HTTP/2 error {event.error_code})")
    elif isinstance(event, h2.events.ConnectionTerminated) and not reply.ended:
        # GOAWAY before the reply ended: h2 accepts no frame after it, so the call is lost.
        raise CallError(
            StatusCode.UNAVAILABLE,
            f"connection closed by the server (GOAWAY, HTTP/2 error {event.error_code})",
        )


def _connect(sock: socket.socket, address: str, deadline: float) -> None:
    sock.settimeout(_remaining(deadline))
    sock.connect(address)


def _send(sock: socket.socket, conn: h2.connection.H2Connection, deadline: float) -> None:
    if data := conn.data_to_send():
        sock.settimeout(_remaining(deadline))
        sock.sendall(data)


def _remaining(deadline: float) -> float:
    """Seconds to the deadline; raises TimeoutError once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left
