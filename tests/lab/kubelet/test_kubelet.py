"""The fake kubelet's pod-resources server, driven by a real gRPC client over a unix socket."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from helpers.clock import ManualClock

from gpufleet.kubelet.api import podresources_v1_pb2 as pb
from gpufleet.kubelet.api import podresources_v1_pb2_grpc as pb_grpc
from gpufleet.kubelet.checkpoint import CheckpointEntry, read_checkpoint
from gpufleet.lab.kubelet.kubelet import (
    ContainerAllocation,
    DeviceAllocation,
    FakeKubelet,
    PodAllocation,
    RateLimit,
    TerminatedPods,
)

GPU0 = "GPU-11111111-2222-3333-4444-555555555555"
GPU1 = "GPU-66666666-7777-8888-9999-000000000000"
MIG = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"

TRAINER = PodAllocation(
    namespace="ml",
    name="trainer",
    uid="0f3c9a52-1b7e-4d7a-9d55-6a1f2b3c4d5e",
    containers=(
        ContainerAllocation(
            name="cuda",
            devices=(
                DeviceAllocation(resource_name="nvidia.com/gpu", device_ids=(GPU0,), numa_node=0),
                DeviceAllocation(resource_name="nvidia.com/gpu", device_ids=(GPU1,), numa_node=1),
            ),
        ),
        ContainerAllocation(name="sidecar"),
    ),
)
SHARED = PodAllocation(
    namespace="web",
    name="infer",
    uid="9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d",
    containers=(
        ContainerAllocation(
            name="server",
            devices=(
                DeviceAllocation(
                    resource_name="nvidia.com/gpu.shared", device_ids=(f"{GPU0}::3", f"{GPU0}::7")
                ),
                DeviceAllocation(resource_name="nvidia.com/mig-1g.10gb", device_ids=(MIG,)),
            ),
        ),
    ),
)
ALLOCATABLE = (
    DeviceAllocation(resource_name="nvidia.com/gpu", device_ids=(GPU0,), numa_node=0),
    DeviceAllocation(resource_name="nvidia.com/gpu", device_ids=(GPU1,), numa_node=1),
    DeviceAllocation(resource_name="nvidia.com/mig-1g.10gb", device_ids=(MIG,)),
)

TRAINER_PROTO = pb.PodResources(
    name="trainer",
    namespace="ml",
    containers=[
        pb.ContainerResources(
            name="cuda",
            devices=[
                pb.ContainerDevices(
                    resource_name="nvidia.com/gpu",
                    device_ids=[GPU0],
                    topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=0)]),
                ),
                pb.ContainerDevices(
                    resource_name="nvidia.com/gpu",
                    device_ids=[GPU1],
                    topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=1)]),
                ),
            ],
        ),
        pb.ContainerResources(name="sidecar"),
    ],
)
SHARED_PROTO = pb.PodResources(
    name="infer",
    namespace="web",
    containers=[
        pb.ContainerResources(
            name="server",
            devices=[
                pb.ContainerDevices(
                    resource_name="nvidia.com/gpu.shared", device_ids=[f"{GPU0}::3", f"{GPU0}::7"]
                ),
                pb.ContainerDevices(resource_name="nvidia.com/mig-1g.10gb", device_ids=[MIG]),
            ],
        )
    ],
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def kubelet(tmp_path: Path, clock: ManualClock) -> Iterator[FakeKubelet]:
    fake = FakeKubelet(tmp_path, clock=clock)
    fake.set_pods([TRAINER, SHARED])
    fake.set_allocatable(ALLOCATABLE)
    with fake:
        yield fake


@pytest.fixture
def stub(kubelet: FakeKubelet) -> Iterator[pb_grpc.PodResourcesListerStub]:
    # Fast reconnects so the restart tests do not wait out gRPC's default 1 s backoff.
    options = [("grpc.initial_reconnect_backoff_ms", 50), ("grpc.max_reconnect_backoff_ms", 200)]
    with grpc.insecure_channel(f"unix://{kubelet.pod_resources_socket}", options) as channel:
        yield pb_grpc.PodResourcesListerStub(channel)


def _error(call, request) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as excinfo:
        call(request, timeout=5)
    return excinfo.value.code(), excinfo.value.details()


def _list(stub: pb_grpc.PodResourcesListerStub, **kwargs) -> list[pb.PodResources]:
    return list(stub.List(pb.ListPodResourcesRequest(), timeout=5, **kwargs).pod_resources)


def test_tree_layout(kubelet: FakeKubelet, tmp_path: Path) -> None:
    assert kubelet.pod_resources_socket == tmp_path / "pod-resources" / "kubelet.sock"
    assert kubelet.pod_resources_socket.is_socket()
    assert kubelet.checkpoint_path == tmp_path / "device-plugins" / "kubelet_internal_checkpoint"


def test_list_returns_all_pods(stub) -> None:
    assert _list(stub) == [TRAINER_PROTO, SHARED_PROTO]


@pytest.mark.parametrize(
    ("namespace", "name", "expected"),
    [("ml", "trainer", TRAINER_PROTO), ("web", "infer", SHARED_PROTO)],
    ids=["trainer", "shared"],
)
def test_get_returns_one_pod(stub, namespace: str, name: str, expected) -> None:
    request = pb.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace)
    assert stub.Get(request, timeout=5).pod_resources == expected


def test_get_unknown_pod(stub) -> None:
    request = pb.GetPodResourcesRequest(pod_name="trainer", pod_namespace="web")
    assert _error(stub.Get, request) == (
        grpc.StatusCode.UNKNOWN,
        "pod trainer in namespace web not found",
    )


def test_get_disabled(kubelet: FakeKubelet, stub) -> None:
    kubelet.get_disabled = True
    request = pb.GetPodResourcesRequest(pod_name="trainer", pod_namespace="ml")
    assert _error(stub.Get, request) == (
        grpc.StatusCode.UNKNOWN,
        "PodResources API Get method disabled",
    )
    assert len(_list(stub)) == 2, "List is unaffected by the Get gate"


def test_get_allocatable_one_entry_per_device(stub) -> None:
    response = stub.GetAllocatableResources(pb.AllocatableResourcesRequest(), timeout=5)
    assert [
        (d.resource_name, list(d.device_ids), [n.ID for n in d.topology.nodes])
        for d in response.devices
    ] == [
        ("nvidia.com/gpu", [GPU0], [0]),
        ("nvidia.com/gpu", [GPU1], [1]),
        ("nvidia.com/mig-1g.10gb", [MIG], []),
    ]
    assert not response.devices[2].HasField("topology")


def test_rate_limit(kubelet: FakeKubelet, stub, clock: ManualClock) -> None:
    for _ in range(10):  # the kubelet's burst
        _list(stub)
    assert _error(stub.List, pb.ListPodResourcesRequest()) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "rejected by rate limit",
    )
    clock.now += 0.015  # one and a half tokens at 100 qps
    _list(stub)
    code, _ = _error(stub.GetAllocatableResources, pb.AllocatableResourcesRequest())
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, "the bucket is shared by all methods"
    clock.now += 60  # refill is capped at the burst
    for _ in range(10):
        _list(stub)
    assert _error(stub.List, pb.ListPodResourcesRequest())[0] == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_rate_limit_configurable_and_switchable(kubelet: FakeKubelet, stub) -> None:
    kubelet.set_rate_limit(RateLimit(qps=1, burst=2))
    _list(stub)
    _list(stub)
    assert _error(stub.List, pb.ListPodResourcesRequest())[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
    kubelet.set_rate_limit(None)
    for _ in range(30):
        _list(stub)


def test_fail_next(kubelet: FakeKubelet, stub) -> None:
    kubelet.fail_next(2, grpc.StatusCode.UNAVAILABLE, "kubelet busy")
    request = pb.GetPodResourcesRequest(pod_name="trainer", pod_namespace="ml")
    assert _error(stub.Get, request) == (grpc.StatusCode.UNAVAILABLE, "kubelet busy")
    assert _error(stub.List, pb.ListPodResourcesRequest())[0] == grpc.StatusCode.UNAVAILABLE
    assert len(_list(stub)) == 2


def test_calls_counted_per_method(kubelet: FakeKubelet, stub) -> None:
    kubelet.reset_calls()
    _list(stub)
    stub.GetAllocatableResources(pb.AllocatableResourcesRequest(), timeout=5)
    stub.Get(pb.GetPodResourcesRequest(pod_name="trainer", pod_namespace="ml"), timeout=5)
    _error(stub.Get, pb.GetPodResourcesRequest(pod_name="nope", pod_namespace="ml"))
    assert kubelet.calls == {"List": 1, "GetAllocatableResources": 1, "Get": 2}


def test_stop_then_start_client_reconnects(kubelet: FakeKubelet, stub) -> None:
    assert len(_list(stub)) == 2
    kubelet.stop()
    assert not kubelet.pod_resources_socket.exists()
    assert _error(stub.List, pb.ListPodResourcesRequest())[0] == grpc.StatusCode.UNAVAILABLE
    kubelet.start()
    assert kubelet.pod_resources_socket.is_socket()
    # The same channel reconnects on its own; wait_for_ready rides out its backoff.
    assert len(_list(stub, wait_for_ready=True)) == 2


def test_restart_keeps_table_and_checkpoint(kubelet: FakeKubelet, stub) -> None:
    before = kubelet.checkpoint_path.read_bytes()
    kubelet.restart()
    assert kubelet.serving
    assert _list(stub, wait_for_ready=True) == [TRAINER_PROTO, SHARED_PROTO]
    assert kubelet.checkpoint_path.read_bytes() == before


def test_checkpoint_joins_uids(kubelet: FakeKubelet) -> None:
    assert read_checkpoint(kubelet.checkpoint_path).entries == (
        CheckpointEntry(
            pod_uid=TRAINER.uid,
            container_name="cuda",
            resource_name="nvidia.com/gpu",
            device_ids=(GPU0, GPU1),
        ),
        CheckpointEntry(
            pod_uid=SHARED.uid,
            container_name="server",
            resource_name="nvidia.com/gpu.shared",
            device_ids=(f"{GPU0}::3", f"{GPU0}::7"),
        ),
        CheckpointEntry(
            pod_uid=SHARED.uid,
            container_name="server",
            resource_name="nvidia.com/mig-1g.10gb",
            device_ids=(MIG,),
        ),
    )


def test_remove_pod_reflected_in_list_and_checkpoint(kubelet: FakeKubelet, stub) -> None:
    kubelet.remove_pod("ml", "trainer")
    assert _list(stub) == [SHARED_PROTO]
    assert {e.pod_uid for e in read_checkpoint(kubelet.checkpoint_path).entries} == {SHARED.uid}
    request = pb.GetPodResourcesRequest(pod_name="trainer", pod_namespace="ml")
    assert _error(stub.Get, request)[1] == "pod trainer in namespace ml not found"
    with pytest.raises(KeyError, match="pod trainer in namespace ml"):
        kubelet.remove_pod("ml", "trainer")


def test_add_pod_appends_or_replaces(kubelet: FakeKubelet, stub) -> None:
    moved = PodAllocation(namespace="ml", name="trainer", uid=TRAINER.uid)
    kubelet.add_pod(moved)
    extra = PodAllocation(namespace="ml", name="eval", uid="e")
    kubelet.add_pod(extra)
    assert [(p.namespace, p.name, len(p.containers)) for p in _list(stub)] == [
        ("ml", "trainer", 0),
        ("web", "infer", 1),
        ("ml", "eval", 0),
    ]
    assert {e.pod_uid for e in read_checkpoint(kubelet.checkpoint_path).entries} == {SHARED.uid}


def _devices_by_pod(pods: list[pb.PodResources]) -> dict[str, list[str]]:
    return {
        p.name: [i for c in p.containers for d in c.devices for i in d.device_ids] for p in pods
    }


def _checkpoint_uids(kubelet: FakeKubelet) -> set[str]:
    return {e.pod_uid for e in read_checkpoint(kubelet.checkpoint_path).entries}


@pytest.mark.parametrize(
    ("mode", "listed"),
    [
        (TerminatedPods.HIDDEN, {"infer": [f"{GPU0}::3", f"{GPU0}::7", MIG]}),
        (
            TerminatedPods.WITHOUT_DEVICES,
            {"trainer": [], "infer": [f"{GPU0}::3", f"{GPU0}::7", MIG]},
        ),
        (
            TerminatedPods.WITH_DEVICES,
            {"trainer": [GPU0, GPU1], "infer": [f"{GPU0}::3", f"{GPU0}::7", MIG]},
        ),
    ],
    ids=["1.34+-active-only", "1.16-1.33-listed-without-devices", "pre-1.16-listed-with-devices"],
)
def test_terminated_pod_listed_as_the_kubelet_version_does(
    kubelet: FakeKubelet, stub, mode: TerminatedPods, listed: dict
) -> None:
    kubelet.terminated_pods = mode
    kubelet.terminate_pod("ml", "trainer")
    assert _devices_by_pod(_list(stub)) == listed
    # The device manager writes its checkpoint only when it allocates: the entry stays.
    assert _checkpoint_uids(kubelet) == {TRAINER.uid, SHARED.uid}


@pytest.mark.parametrize("mode", list(TerminatedPods), ids=str)
def test_next_allocation_frees_terminated_pods_devices(
    kubelet: FakeKubelet, stub, mode: TerminatedPods
) -> None:
    kubelet.terminated_pods = mode
    kubelet.terminate_pod("ml", "trainer")
    kubelet.add_pod(PodAllocation(namespace="ml", name="idle", uid="idle"))  # no devices
    assert _checkpoint_uids(kubelet) == {TRAINER.uid, SHARED.uid}
    reuse = PodAllocation(
        namespace="ml",
        name="next",
        uid="next",
        containers=(
            ContainerAllocation(
                name="cuda",
                devices=(DeviceAllocation(resource_name="nvidia.com/gpu", device_ids=(GPU0,)),),
            ),
        ),
    )
    kubelet.add_pod(reuse)
    devices = _devices_by_pod(_list(stub))
    assert devices["next"] == [GPU0]
    assert devices.get("trainer", []) == []  # freed before GPU0 was handed out again
    assert _checkpoint_uids(kubelet) == {SHARED.uid, "next"}


def test_terminate_unknown_pod(kubelet: FakeKubelet) -> None:
    with pytest.raises(KeyError, match="pod nope in namespace ml"):
        kubelet.terminate_pod("ml", "nope")


@pytest.mark.parametrize(
    ("pods", "message"),
    [
        ([TRAINER, TRAINER], "pod ml/trainer appears twice"),
        (
            [TRAINER, PodAllocation(namespace="x", name="y", uid=TRAINER.uid)],
            f"pod uid {TRAINER.uid} \\(x/y\\) appears twice",
        ),
    ],
    ids=["same-name", "same-uid"],
)
def test_bad_table_rejected_and_old_kept(kubelet: FakeKubelet, pods, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        kubelet.set_pods(pods)
    assert kubelet.pods == (TRAINER, SHARED)


def test_context_manager_removes_socket(tmp_path: Path) -> None:
    with FakeKubelet(tmp_path) as fake:
        assert fake.pod_resources_socket.is_socket()
    assert not fake.pod_resources_socket.exists()
    assert fake.checkpoint_path.is_file(), "the checkpoint outlives the kubelet, as on a node"


def test_socket_path_too_long(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="longer than 107 bytes"):
        FakeKubelet(tmp_path / ("x" * 120))
