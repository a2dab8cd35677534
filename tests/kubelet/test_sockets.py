"""The unix-socket gRPC server both fake kubelet servers run on."""

from pathlib import Path

import grpc
import pytest

from gpufleet.kubelet.api import podresources_v1_pb2 as pb
from gpufleet.kubelet.api import podresources_v1_pb2_grpc as pb_grpc
from gpufleet.kubelet.sockets import UnixSocketServer


class _Empty(pb_grpc.PodResourcesListerServicer):
    def List(self, request, context):
        return pb.ListPodResourcesResponse()


def _server(path: Path) -> UnixSocketServer:
    return UnixSocketServer(
        path,
        lambda server: pb_grpc.add_PodResourcesListerServicer_to_server(_Empty(), server),
        max_workers=2,
        thread_name_prefix="test-uds",
    )


def _list(path: Path) -> pb.ListPodResourcesResponse:
    with grpc.insecure_channel(f"unix://{path}") as channel:
        return pb_grpc.PodResourcesListerStub(channel).List(pb.ListPodResourcesRequest(), timeout=5)


def test_serves_over_a_stale_socket_file_and_removes_it_on_stop(tmp_path: Path) -> None:
    path = tmp_path / "run" / "api.sock"
    path.parent.mkdir()
    path.write_text("left by a crashed run")
    server = _server(path)
    server.start()
    try:
        assert server.serving
        assert _list(path) == pb.ListPodResourcesResponse()
    finally:
        server.stop()
    assert not server.serving
    assert not path.exists()


def test_restarts_after_stop_and_refuses_a_second_start(tmp_path: Path) -> None:
    server = _server(tmp_path / "api.sock")
    server.start()
    server.stop()
    server.start()
    try:
        with pytest.raises(RuntimeError, match="already started"):
            server.start()
        assert _list(tmp_path / "api.sock") == pb.ListPodResourcesResponse()
    finally:
        server.stop()


def test_a_path_too_long_to_bind_is_refused_up_front(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"longer than 107 bytes.*shorter directory"):
        _server(tmp_path / ("x" * 120) / "api.sock")
