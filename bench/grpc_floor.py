"""The gRPC floor under the plugin's Allocate latency: what any Python plugin pays here.

Allocate's p99 target (1 ms) is within a few tenths of a millisecond of what gRPC Python
itself costs per unary call on a small machine: the plugin's handler takes ~0.05 ms of
it. To tell the plugin's share from the machine's, `floor_server` serves the same
DevicePlugin service, from the same server factory the plugin uses
(`registration.new_server`), whose Allocate returns a canned response (the plugin's own
answer to the first request, so the same bytes cross the socket) without doing anything.
The benchmark times it with the same client and requests, right before and after the
plugin, so both see the same machine.

It must never run outside the benchmark: it answers every Allocate with the same devices.
"""

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from gpufleet.kubelet.api import deviceplugin_v1beta1_pb2 as pb
from gpufleet.kubelet.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from gpufleet.kubelet.sockets import wait_until_connectable
from gpufleet.plugin.kubelet.registration import new_server


class _Canned(pb_grpc.DevicePluginServicer):
    def __init__(self, response: pb.AllocateResponse) -> None:
        self._response = response

    def Allocate(self, request, context):
        return self._response


@contextlib.contextmanager
def floor_server(response: pb.AllocateResponse) -> Iterator[Path]:
    """Serve `response` to every Allocate on a fresh unix socket; yield its path."""
    with tempfile.TemporaryDirectory(prefix="gfpb-floor-") as root:
        socket = Path(root) / "floor.sock"
        server = new_server()
        pb_grpc.add_DevicePluginServicer_to_server(_Canned(response), server)
        server.add_insecure_port(f"unix://{socket}")
        server.start()
        try:
            wait_until_connectable(socket)
            yield socket
        finally:
            server.stop(grace=None).wait(1)
