"""UnaryClient over real unix sockets: against real grpcio servers (the fake kubelet's
pod-resources server, and a tiny generic one that answers or aborts as told), which is the
interop proof, and against scripted HTTP/2 servers (h2, server side) for what a grpcio
server cannot be made to do on demand: show the request's frames, PING mid-call, drop the
connection mid-reply, never answer.
"""

import contextlib
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import h2.config
import h2.connection
import h2.events
import pytest
from helpers import wait_for

from gpufleet.exporter.pods.grpcunary import UnaryClient
from gpufleet.exporter.pods.grpcwire import CallError, StatusCode, length_prefixed
from gpufleet.exporter.pods.podresources import (
    LIST_METHOD,
    MAX_RECEIVE_BYTES,
    PodResourcesWatcher,
)
from gpufleet.kubelet.api import podresources_v1_pb2 as pb
from gpufleet.kubelet.sockets import UnixSocketServer
from gpufleet.lab.kubelet.kubelet import (
    ContainerAllocation,
    DeviceAllocation,
    FakeKubelet,
    PodAllocation,
)

TIMEOUT_SECONDS = 10.0  # generous: only the deadline tests are meant to reach theirs


@pytest.fixture
def root() -> Iterator[Path]:
    # A short root: unix socket paths are limited to 107 bytes, pytest's tmp_path can be long.
    with tempfile.TemporaryDirectory(prefix="gf-", dir="/tmp") as made:
        yield Path(made)


def _pod(i: int, ids: int = 1) -> PodAllocation:
    device_ids = tuple(f"GPU-{i:08d}-1111-2222-3333-444444444444::{j}" for j in range(ids))
    devices = DeviceAllocation(resource_name="nvidia.com/gpu", device_ids=device_ids)
    return PodAllocation(
        namespace="ml",
        name=f"pod-{i}",
        uid=f"uid-{i}",
        containers=(ContainerAllocation(name="main", devices=(devices,)),),
    )


def _list(socket_path: Path, **client: int) -> bytes:
    made = UnaryClient(socket_path, max_receive_bytes=client.get("max", MAX_RECEIVE_BYTES))
    return made.call(LIST_METHOD, b"", timeout_seconds=TIMEOUT_SECONDS)


def _fake_kubelet_reply(root: Path, pods: list[PodAllocation]) -> tuple[bytes, bytes]:
    """(what the client received, what protobuf encodes for the same pods)."""
    kubelet = FakeKubelet(root, rate_limit=None)
    kubelet.set_pods(pods)
    kubelet.start()
    try:
        received = _list(kubelet.pod_resources_socket)
    finally:
        kubelet.stop()
    expected = pb.ListPodResourcesResponse(
        pod_resources=[
            pb.PodResources(
                name=p.name,
                namespace=p.namespace,
                containers=[
                    pb.ContainerResources(
                        name="main",
                        devices=[
                            pb.ContainerDevices(
                                resource_name="nvidia.com/gpu",
                                device_ids=p.containers[0].devices[0].device_ids,
                            )
                        ],
                    )
                ],
            )
            for p in pods
        ]
    )
    return received, expected.SerializeToString()


@pytest.mark.parametrize(
    ("pods", "ids"),
    [(0, 1), (3, 1), (400, 8)],
    ids=["empty reply", "three pods", "over 64 KiB: flow control windows refilled"],
)
def test_list_from_the_fake_kubelet(root: Path, pods: int, ids: int) -> None:
    received, expected = _fake_kubelet_reply(root, [_pod(i, ids) for i in range(pods)])
    assert received == expected
    if pods == 400:
        assert len(received) > 2 * 65535  # over twice HTTP/2's initial window


# --- a tiny generic grpcio server: raw bytes in and out, or an abort ---------------------


@pytest.fixture
def grpc_server(
    root: Path,
) -> Iterator[Callable[[Callable[[bytes, grpc.ServicerContext], bytes]], Path]]:
    """Serve v1.PodResourcesLister/List with a given behaviour; returns the socket path."""
    servers: list[UnixSocketServer] = []

    def serve(behaviour: Callable[[bytes, grpc.ServicerContext], bytes]) -> Path:
        handler = grpc.method_handlers_generic_handler(
            "v1.PodResourcesLister", {"List": grpc.unary_unary_rpc_method_handler(behaviour)}
        )
        server = UnixSocketServer(
            root / "podres.sock",
            lambda s: s.add_generic_rpc_handlers((handler,)),
            max_workers=2,
            thread_name_prefix="test-grpc",
        )
        server.start()
        servers.append(server)
        return server.path

    yield serve
    for server in servers:
        server.stop()


def _abort(code: grpc.StatusCode, message: str) -> Callable[[bytes, grpc.ServicerContext], bytes]:
    def behaviour(request: bytes, context: grpc.ServicerContext) -> bytes:
        context.abort(code, message)

    return behaviour


@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNKNOWN,
    ],
    ids=lambda c: c.name,
)
def test_server_status_and_message_arrive_as_sent(grpc_server, code: grpc.StatusCode) -> None:
    """grpcio percent-encodes the message; it comes back decoded, UTF-8 and '%' intact."""
    path = grpc_server(_abort(code, "rejected: 100% of 系统"))
    with pytest.raises(CallError) as caught:
        _list(path)
    assert (caught.value.code, caught.value.message) == (code.value[0], "rejected: 100% of 系统")
    assert str(caught.value) == f"StatusCode.{code.name}: rejected: 100% of 系统"


def test_request_reaches_the_server_as_an_empty_message(grpc_server) -> None:
    seen: list[bytes] = []

    def echo(request: bytes, context: grpc.ServicerContext) -> bytes:
        seen.append(request)
        return b"\x0a\x00"

    assert _list(grpc_server(echo)) == b"\x0a\x00"
    assert seen == [b""]


@pytest.mark.parametrize(
    ("size", "max_bytes", "ok"),
    [
        (MAX_RECEIVE_BYTES, MAX_RECEIVE_BYTES, True),
        (MAX_RECEIVE_BYTES + 1, MAX_RECEIVE_BYTES, False),
        (70_000, 65_536, False),
    ],
    ids=["exactly the limit", "one byte over 16 MiB", "over a small limit"],
)
def test_receive_limit(grpc_server, size: int, max_bytes: int, ok: bool) -> None:
    payload = bytes(size)
    path = grpc_server(lambda request, context: payload)
    if ok:
        assert _list(path, max=max_bytes) == payload
        return
    with pytest.raises(CallError) as caught:
        _list(path, max=max_bytes)
    assert caught.value.code == StatusCode.INTERNAL
    assert caught.value.message == f"received message larger than max ({size} vs. {max_bytes})"


# --- scripted HTTP/2 servers ---------------------------------------------------------------


class ScriptedServer:
    """One connection at a time on a unix socket, answered by `script(conn, sock)` after
    the request's headers and body are in; records the request headers."""

    def __init__(
        self, path: Path, script: Callable[[h2.connection.H2Connection, socket.socket], None]
    ):
        self.path = path
        self.requests: list[list[tuple[bytes, bytes]]] = []
        self._script = script
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            sock, _ = self._listener.accept()
        except OSError:
            return  # closed by close()
        with sock:
            conn = h2.connection.H2Connection(
                h2.config.H2Configuration(client_side=False, header_encoding=None)
            )
            conn.initiate_connection()
            sock.sendall(conn.data_to_send())
            ended = False
            while not ended:
                data = sock.recv(65536)
                if not data:
                    return
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        self.requests.append(list(event.headers))
                    ended = ended or isinstance(event, h2.events.StreamEnded)
                sock.sendall(conn.data_to_send())
            self._script(conn, sock)

    def close(self) -> None:
        self._listener.close()
        self._thread.join(10)


@pytest.fixture
def scripted(root: Path) -> Iterator[Callable[..., ScriptedServer]]:
    made: list[ScriptedServer] = []

    def start(
        script: Callable[[h2.connection.H2Connection, socket.socket], None],
    ) -> ScriptedServer:
        made.append(ScriptedServer(root / "h2.sock", script))
        return made[-1]

    yield start
    for server in made:
        server.close()


_OK_HEADERS = [(b":status", b"200"), (b"content-type", b"application/grpc")]


def _answer(conn: h2.connection.H2Connection, sock: socket.socket, message: bytes) -> None:
    conn.send_headers(1, _OK_HEADERS)
    framed = length_prefixed(message)
    frame = conn.max_outbound_frame_size
    for start in range(0, len(framed), frame):
        conn.send_data(1, framed[start : start + frame])
    conn.send_headers(1, [(b"grpc-status", b"0")], end_stream=True)
    sock.sendall(conn.data_to_send())


def test_request_frames_follow_grpcs_http2_mapping(scripted) -> None:
    server = scripted(lambda conn, sock: _answer(conn, sock, b"reply"))
    client = UnaryClient(server.path, max_receive_bytes=1024)
    assert client.call(LIST_METHOD, b"", timeout_seconds=2.5) == b"reply"
    (headers,) = server.requests
    assert headers[:4] == [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/v1.PodResourcesLister/List"),
        (b":authority", b"localhost"),
    ]
    name, timeout = headers[4]
    assert name == b"grpc-timeout"
    assert timeout.endswith(b"u") and 0 < int(timeout[:-1]) <= 2_500_000  # what was left
    assert headers[5:] == [(b"te", b"trailers"), (b"content-type", b"application/grpc")]


def test_server_ping_mid_call_is_answered(scripted) -> None:
    """The server sends a PING and answers only once the client has echoed it."""

    def ping_first(conn: h2.connection.H2Connection, sock: socket.socket) -> None:
        conn.ping(b"12345678")
        sock.sendall(conn.data_to_send())
        acked = False
        while not acked:
            events = conn.receive_data(sock.recv(65536))
            acked = any(isinstance(e, h2.events.PingAckReceived) for e in events)
        _answer(conn, sock, b"after the ping")

    server = scripted(ping_first)
    assert _list(server.path) == b"after the ping"


def test_trailers_only_response(scripted) -> None:
    def trailers_only(conn: h2.connection.H2Connection, sock: socket.socket) -> None:
        conn.send_headers(
            1,
            [*_OK_HEADERS, (b"grpc-status", b"8"), (b"grpc-message", b"rejected by rate limit")],
            end_stream=True,
        )
        sock.sendall(conn.data_to_send())

    with pytest.raises(CallError) as caught:
        _list(scripted(trailers_only).path)
    assert (caught.value.code, caught.value.message) == (8, "rejected by rate limit")


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(lambda conn, sock: None, id="closed before answering"),
        pytest.param(
            lambda conn, sock: (
                conn.send_headers(1, _OK_HEADERS),
                conn.send_data(1, length_prefixed(b"x" * 100)[:50]),
                sock.sendall(conn.data_to_send()),
            ),
            id="closed mid-reply",
        ),
        pytest.param(
            lambda conn, sock: (conn.close_connection(), sock.sendall(conn.data_to_send())),
            id="GOAWAY mid-call",
        ),
    ],
)
def test_server_closing_mid_call_is_unavailable(scripted, script) -> None:
    with pytest.raises(CallError) as caught:
        _list(scripted(script).path)
    assert caught.value.code == StatusCode.UNAVAILABLE


def test_stream_reset_maps_to_its_status(scripted) -> None:
    def refuse(conn: h2.connection.H2Connection, sock: socket.socket) -> None:
        conn.reset_stream(1, error_code=7)  # REFUSED_STREAM
        sock.sendall(conn.data_to_send())

    with pytest.raises(CallError) as caught:
        _list(scripted(refuse).path)
    assert caught.value.code == StatusCode.UNAVAILABLE


# --- no server, or one that never answers ----------------------------------------------------


def test_socket_missing_is_unavailable(root: Path) -> None:
    with pytest.raises(CallError) as caught:
        _list(root / "absent.sock")
    assert caught.value.code == StatusCode.UNAVAILABLE
    assert "No such file" in caught.value.message


def test_connection_refused_is_unavailable(root: Path) -> None:
    """A socket file nobody listens on: a kubelet that died without removing it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bound:
        bound.bind(str(root / "dead.sock"))
        with pytest.raises(CallError) as caught:
            _list(root / "dead.sock")
    assert caught.value.code == StatusCode.UNAVAILABLE
    assert "Connection refused" in caught.value.message


@pytest.fixture
def silent(root: Path) -> Iterator[tuple[Path, list[socket.socket]]]:
    """A server that accepts connections (listed as they come) and never answers."""
    accepted: list[socket.socket] = []
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(root / "silent.sock"))
    listener.listen()

    def accept() -> None:
        with contextlib.suppress(OSError):  # closed at teardown
            while True:
                accepted.append(listener.accept()[0])

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    yield root / "silent.sock", accepted
    listener.shutdown(socket.SHUT_RDWR)
    listener.close()
    acceptor.join(10)
    for sock in accepted:
        sock.close()


def test_deadline_covers_a_server_that_never_answers(silent) -> None:
    client = UnaryClient(silent[0], max_receive_bytes=1024)
    with pytest.raises(CallError) as caught:
        client.call(LIST_METHOD, b"", timeout_seconds=0.2)
    assert caught.value.code == StatusCode.DEADLINE_EXCEEDED


def test_close_cancels_the_call_in_flight_and_later_ones(silent) -> None:
    path, accepted = silent
    client = UnaryClient(path, max_receive_bytes=1024)
    failures: list[CallError] = []

    def call() -> None:
        try:
            client.call(LIST_METHOD, b"", timeout_seconds=3600.0)
        except CallError as exc:
            failures.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    wait_for(lambda: accepted, what="the call's connection")
    client.close()
    caller.join(30)
    assert not caller.is_alive()
    assert [f.code for f in failures] == [StatusCode.CANCELLED]
    with pytest.raises(CallError) as caught:
        client.call(LIST_METHOD, b"", timeout_seconds=1.0)
    assert caught.value.code == StatusCode.CANCELLED


# --- through the watcher: the kinds of gpufleet_exporter_kubelet_errors_total ----------------


def _watcher_failures(socket_path: Path, **options: float) -> dict[str, int]:
    watcher = PodResourcesWatcher(
        socket_path=socket_path, checkpoint_path=socket_path.parent / "none", **options
    )
    try:
        watcher.refresh_now()
    finally:
        watcher.stop()
    return {kind: n for kind, n in watcher.errors().items() if n}


def test_reply_over_16_mib_is_counted_as_error(grpc_server) -> None:
    """grpcio said RESOURCE_EXHAUSTED here, which read as the kubelet's rate limit and
    backed off; a reply this client cannot take is an `error`."""
    path = grpc_server(lambda request, context: bytes(MAX_RECEIVE_BYTES + 1))
    assert _watcher_failures(path) == {"error": 1}


def test_deadline_is_counted_as_deadline(silent) -> None:
    assert _watcher_failures(silent[0], call_timeout_seconds=0.2) == {"deadline": 1}


def test_server_gone_mid_call_is_counted_as_unavailable(scripted) -> None:
    assert _watcher_failures(scripted(lambda conn, sock: None).path) == {"unavailable": 1}


@pytest.mark.parametrize("size", [5, 65_530], ids=["small reply", "a whole window"])
def test_a_reply_sent_whole_before_the_server_closes_is_received(scripted, size: int) -> None:
    """The server answers and closes at once, as a server on its way down may. The client's
    SETTINGS ack, and its window update after a first read of a whole window's reply (over
    one 64 KiB recv), then meet a closed socket (EPIPE), yet every byte of the reply is in
    the client's receive buffer, so the call succeeds. CI once lost the small case."""
    reply = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    server = scripted(lambda conn, sock: _answer(conn, sock, reply))
    assert _list(server.path) == reply
