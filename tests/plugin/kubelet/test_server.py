"""`DevicePluginService` over a real unix socket and gRPC, as the kubelet calls it: preferred
allocation that never fails, ListAndWatch re-sending on health changes and ending on stop,
and Allocate's errors in NVIDIA's words."""

from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from helpers import wait_for
from helpers.plugin_node import from_fleet

from gpufleet.kubelet.api import deviceplugin_v1beta1_pb2 as pb
from gpufleet.kubelet.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from gpufleet.plugin.core.config import PluginConfig
from gpufleet.plugin.core.model import Health
from gpufleet.plugin.daemon import build_services
from gpufleet.plugin.kubelet.registration import new_server
from gpufleet.plugin.kubelet.server import MAX_WATCHERS, DevicePluginService, RpcStats

Serve = Callable[[DevicePluginService], pb_grpc.DevicePluginStub]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    """Serves a service on a unix socket; returns a client stub connected to it."""
    running: list[tuple[grpc.Server, grpc.Channel]] = []

    def start(service: DevicePluginService) -> pb_grpc.DevicePluginStub:
        path = tmp_path / f"plugin-{len(running)}.sock"
        server = new_server()  # the daemon's, with its worker pool
        pb_grpc.add_DevicePluginServicer_to_server(service, server)
        server.add_insecure_port(f"unix://{path}")
        server.start()
        channel = grpc.insecure_channel(f"unix://{path}")
        running.append((server, channel))
        return pb_grpc.DevicePluginStub(channel)

    yield start
    for server, channel in running:
        channel.close()
        server.stop(None)


def gpu_service(stats: RpcStats | None = None) -> DevicePluginService:
    """The real `nvidia.com/gpu` service of a 4-GPU node, as the daemon builds it."""
    (service,) = build_services(from_fleet("4xH100"), PluginConfig(), stats=stats or RpcStats())
    return service


def preferred(
    stub: pb_grpc.DevicePluginStub, available: list[str], must: list[str], size: int
) -> list[str]:
    request = pb.PreferredAllocationRequest(
        container_requests=[
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size
            )
        ]
    )
    (answer,) = stub.GetPreferredAllocation(request, timeout=10).container_responses
    return list(answer.deviceIDs)


def allocate(stub: pb_grpc.DevicePluginStub, ids: list[str]) -> pb.AllocateResponse:
    request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])
    return stub.Allocate(request, timeout=10)


@pytest.mark.parametrize(
    ("must", "size", "expected"),
    [
        pytest.param([], 2, [0, 1], id="first-available"),
        pytest.param([2], 2, [2, 0], id="must-include-first"),
        pytest.param([3, 1], 3, [3, 1, 0], id="two-must-include"),
        pytest.param([], 4, [0, 1, 2, 3], id="everything"),
    ],
)
def test_preferred_allocation_falls_back_when_the_preferrer_raises(serve, must, size, expected):
    real = gpu_service()

    def broken(available, must_include, allocation_size):
        raise RuntimeError("NVML said no")

    stats = RpcStats()
    service = DevicePluginService(
        real.resource,
        real.devices,
        allocator=lambda ids: pb.ContainerAllocateResponse(),
        preferrer=broken,
        stats=stats,
    )
    stub = serve(service)
    ids = [d.id for d in real.devices]
    answer = preferred(stub, ids, [ids[i] for i in must], size)
    assert answer == [ids[i] for i in expected]
    assert stats.preferred_fallbacks == 1
    assert stats.errors.get("GetPreferredAllocation", 0) == 0


def test_preferred_allocation_avoids_unhealthy_devices(serve):
    service = gpu_service()
    stub = serve(service)
    ids = [d.id for d in service.devices]
    service.set_health({ids[0]: Health.UNHEALTHY})
    (chosen,) = preferred(stub, ids, [], 1)
    assert chosen != ids[0]
    assert service.stats.preferred_fallbacks == 0


def test_list_and_watch_sends_resends_on_health_and_ends_on_stop(serve):
    service = gpu_service()
    stub = serve(service)
    stream = stub.ListAndWatch(pb.Empty(), timeout=10)
    first = next(stream)
    ids = [d.ID for d in first.devices]
    assert ids == [d.id for d in service.devices]
    assert {d.health for d in first.devices} == {"Healthy"}
    service.set_health({ids[1]: Health.UNHEALTHY})
    second = next(stream)
    assert {d.ID: d.health for d in second.devices} == {
        i: "Unhealthy" if i == ids[1] else "Healthy" for i in ids
    }
    service.stop()
    assert list(stream) == []  # the stream ends cleanly, no error


def test_streams_past_the_limit_are_refused_and_allocate_still_answers(serve, caplog):
    """Each stream holds a worker thread: eight held ones left Allocate, pod admission,
    waiting until its deadline. A live stream is never ended for a new one (the kubelet
    takes an ended stream for the plugin gone); a stream whose client left frees its
    place at once."""
    stub = serve(gpu_service())
    streams = [stub.ListAndWatch(pb.Empty(), timeout=60) for _ in range(MAX_WATCHERS)]
    lists = [next(stream) for stream in streams]  # every stream sends its first list
    for _ in range(3):
        with pytest.raises(grpc.RpcError) as refused:
            next(stub.ListAndWatch(pb.Empty(), timeout=10))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert allocate(stub, [lists[0].devices[0].ID]).container_responses  # a worker left
    said = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(said) == 1, said  # the refusals are one outage, not a line each
    streams[0].cancel()
    fresh = wait_for(lambda: _opened(stub), timeout=30, what="a place freed by a client gone")
    for stream in (*streams[1:], fresh):
        stream.cancel()


def _opened(stub: pb_grpc.DevicePluginStub):
    """A new stream that sent its first list, else None (refused)."""
    stream = stub.ListAndWatch(pb.Empty(), timeout=60)
    try:
        next(stream)
    except grpc.RpcError:
        return None
    return stream


def test_allocate_answers_known_devices(serve):
    service = gpu_service()
    stub = serve(service)
    ids = [d.id for d in service.devices]
    (response,) = allocate(stub, ids[:2]).container_responses
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(ids[:2])
    assert service.stats.allocations == 1


@pytest.mark.parametrize(
    ("unknown", "text"),
    [
        pytest.param(
            ["GPU-nope"],
            'invalid allocation request for "nvidia.com/gpu": invalid request: unknown device: '
            "GPU-nope",
            id="one",
        ),
        pytest.param(
            ["GPU-a", "GPU-b"],
            'invalid allocation request for "nvidia.com/gpu": invalid request: unknown device: '
            "GPU-a",
            id="two: the first is named, as in v0.20",
        ),
        pytest.param(
            [f"GPU-{n:06d}" for n in range(200_000)],
            'invalid allocation request for "nvidia.com/gpu": invalid request: unknown device: '
            "GPU-000000",
            id="200k unknown IDs fit gRPC's metadata limit (issue 16)",
        ),
    ],
)
def test_allocate_rejects_unknown_ids_in_nvidia_words(serve, unknown, text):
    service = gpu_service()
    stub = serve(service)
    known = service.devices[0].id
    with pytest.raises(grpc.RpcError) as exc:
        allocate(stub, [known, *unknown])
    assert exc.value.code() is grpc.StatusCode.UNKNOWN
    assert exc.value.details() == text
    assert service.stats.errors["Allocate"] == 1
