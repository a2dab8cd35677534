"""PodResourcesWatcher against the fake kubelet over a real unix socket."""

import logging
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from helpers import wait_for
from helpers.clock import ManualClock

from gpufleet.exporter.core.attribution import attribute, build_index
from gpufleet.exporter.core.samples import Entity, EntitySample, ProcessSample
from gpufleet.exporter.pods.podresources import (
    EMPTY_VIEW,
    KubeletErrorKind,
    KubeletView,
    PodResourcesWatcher,
    next_wait_seconds,
)
from gpufleet.kubelet.api import podresources_v1_pb2 as pb
from gpufleet.lab.kubelet.kubelet import (
    ClaimAllocation,
    ClaimDevice,
    ContainerAllocation,
    DeviceAllocation,
    FakeKubelet,
    PodAllocation,
    RateLimit,
)

GPU0 = "GPU-00000000-1111-2222-3333-444444444444"
NODE = (Entity(gpu=0, uuid=GPU0, pci_bus_id="00000000:10:00.0", model_name="NVIDIA H100"),)


def _pod(name: str, uid: str, *ids: str, numa: int | None = None) -> PodAllocation:
    devices = DeviceAllocation(resource_name="nvidia.com/gpu", device_ids=ids, numa_node=numa)
    return PodAllocation(
        namespace="ml",
        name=name,
        uid=uid,
        containers=(ContainerAllocation(name="main", devices=(devices,)),),
    )


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    # A short root: unix socket paths are limited to 107 bytes, pytest's tmp_path can be long.
    with tempfile.TemporaryDirectory(prefix="gf-", dir="/tmp") as root:
        fake = FakeKubelet(Path(root))
        fake.set_pods([_pod("a", "uid-a", f"{GPU0}::0"), _pod("b", "uid-b", f"{GPU0}::1")])
        fake.start()
        yield fake
        fake.stop()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def watcher(kubelet: FakeKubelet, clock: ManualClock) -> Iterator[PodResourcesWatcher]:
    made = PodResourcesWatcher(
        socket_path=kubelet.pod_resources_socket,
        checkpoint_path=kubelet.checkpoint_path,
        refresh_seconds=5.0,
        clock=clock,
    )
    yield made
    made.stop()


def _pods(view: KubeletView) -> set[str]:
    return {c.pod for c in view.containers}


def _failures(watcher: PodResourcesWatcher) -> dict[str, int]:
    return {kind: n for kind, n in watcher.errors().items() if n}


def test_labels_and_uids_reach_attribution(
    kubelet: FakeKubelet, watcher: PodResourcesWatcher, clock: ManualClock
) -> None:
    """Get disabled (as on kubelets before 1.34) does not matter: only List is used."""
    kubelet.get_disabled = True
    kubelet.add_pod(_pod("c", "uid-c", f"{GPU0}::2", numa=1))
    view = watcher.refresh_now()

    assert _pods(view) == {"a", "b", "c"}
    assert view.refreshed_monotonic == clock.now
    index = build_index(view.containers, view.checkpoint, NODE)
    sample = EntitySample(
        entity=NODE[0],
        values={"DCGM_FI_DEV_GPU_UTIL": 40.0},
        processes=(ProcessSample(pid=7, sm_util_percent=25.0),),
    )
    shares = attribute(index, [sample], {7: "uid-b"}).pods[(0, None)]
    assert [
        (s.pod.name, s.pod.uid, s.vgpu, s.values.get("DCGM_FI_DEV_GPU_UTIL")) for s in shares
    ] == [
        ("a", "uid-a", "0", 0.0),
        ("b", "uid-b", "1", 25.0),
        ("c", "uid-c", "2", 0.0),
    ]
    assert kubelet.calls == {"List": 1}
    assert _failures(watcher) == {}


def test_background_refresh_drops_a_deleted_pod(kubelet: FakeKubelet) -> None:
    watcher = PodResourcesWatcher(
        socket_path=kubelet.pod_resources_socket,
        checkpoint_path=kubelet.checkpoint_path,
        refresh_seconds=0.05,
    )
    watcher.start()
    try:
        wait_for(lambda: _pods(watcher.view()) == {"a", "b"})
        kubelet.remove_pod("ml", "a")
        wait_for(lambda: _pods(watcher.view()) == {"b"})
        assert {e.pod_uid for e in watcher.view().checkpoint} == {"uid-b"}
    finally:
        watcher.stop()
    assert _failures(watcher) == {}


def test_socket_missing_then_restarted_recovers(
    kubelet: FakeKubelet, watcher: PodResourcesWatcher, clock: ManualClock, caplog
) -> None:
    assert _pods(watcher.refresh_now()) == {"a", "b"}
    kubelet.stop()
    caplog.set_level(logging.INFO, logger="gpufleet.exporter.pods.podresources")

    for _ in range(3):
        clock.now += 1
        assert _pods(watcher.refresh_now()) == {"a", "b"}  # last good view, not yet stale
    assert _failures(watcher) == {"socket_missing": 3}
    assert [r.getMessage() for r in caplog.records].count(
        "pod-resources List failing; keeping the last view until it is stale"
    ) == 1

    kubelet.remove_pod("ml", "b")
    kubelet.start()
    assert _pods(watcher.refresh_now()) == {"a"}
    assert "pod-resources List ok" in [r.getMessage() for r in caplog.records]


def test_kubelet_restart_while_connected_recovers(
    kubelet: FakeKubelet, watcher: PodResourcesWatcher
) -> None:
    """The kubelet restarts between Lists; the next List connects to the new one."""
    assert _pods(watcher.refresh_now()) == {"a", "b"}
    kubelet.restart()
    kubelet.remove_pod("ml", "a")
    wait_for(lambda: _pods(watcher.refresh_now()) == {"b"})
    assert set(_failures(watcher)) <= {"unavailable"}


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (grpc.StatusCode.UNAVAILABLE, "unavailable"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "deadline"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "rate_limited"),
        (grpc.StatusCode.INTERNAL, "error"),
        (grpc.StatusCode.PERMISSION_DENIED, "error"),
    ],
    ids=lambda v: getattr(v, "name", v),
)
def test_failures_counted_by_kind_and_recovered(
    kubelet: FakeKubelet, watcher: PodResourcesWatcher, code: grpc.StatusCode, kind: str
) -> None:
    assert _pods(watcher.refresh_now()) == {"a", "b"}
    kubelet.remove_pod("ml", "a")
    kubelet.fail_next(2, code)
    assert _pods(watcher.refresh_now()) == {"a", "b"}
    assert _pods(watcher.refresh_now()) == {"a", "b"}
    assert _failures(watcher) == {kind: 2}
    assert _pods(watcher.refresh_now()) == {"b"}


def test_real_rate_limit_counted_and_recovered(
    kubelet: FakeKubelet, watcher: PodResourcesWatcher
) -> None:
    kubelet.set_rate_limit(RateLimit(qps=0.001, burst=1))
    assert _pods(watcher.refresh_now()) == {"a", "b"}
    assert _pods(watcher.refresh_now()) == {"a", "b"}
    assert _failures(watcher) == {"rate_limited": 1}
    kubelet.set_rate_limit(None)
    kubelet.remove_pod("ml", "b")
    assert _pods(watcher.refresh_now()) == {"a"}


@pytest.mark.parametrize(
    ("failure", "want"),
    [
        (None, 5.0),
        (KubeletErrorKind.UNAVAILABLE, 5.0),
        (KubeletErrorKind.RATE_LIMITED, 1.0),
    ],
    ids=["ok: normal interval", "unavailable: normal interval", "rate limited: a second"],
)
def test_next_wait(failure: KubeletErrorKind | None, want: float) -> None:
    """A rate-limited List used to back off, doubling up to 60 s: the view went stale
    (15 s) while the kubelet, whose refused calls spend no token, took every call."""
    assert next_wait_seconds(failure, refresh=5.0) == want
    assert next_wait_seconds(failure, refresh=0.5) == 0.5  # never slower than the refresh


def test_stale_view_dropped_after_max_staleness(
    kubelet: FakeKubelet, watcher: PodResourcesWatcher, clock: ManualClock, caplog
) -> None:
    """Default max staleness is 3 refreshes (15 s); the view is dropped even between
    refreshes, then restored by the next good List."""
    assert _pods(watcher.refresh_now()) == {"a", "b"}
    kubelet.stop()
    clock.now += 15.0
    assert _pods(watcher.refresh_now()) == {"a", "b"}
    clock.now += 0.5
    assert watcher.view() is EMPTY_VIEW  # no refresh needed for the drop
    caplog.set_level(logging.WARNING, logger="gpufleet.exporter.pods.podresources")
    assert watcher.refresh_now() is EMPTY_VIEW
    assert watcher.refresh_now() is EMPTY_VIEW
    dropped = [r for r in caplog.records if r.getMessage().startswith("kubelet view dropped")]
    assert len(dropped) == 1

    kubelet.start()
    assert _pods(watcher.refresh_now()) == {"a", "b"}


def test_corrupt_checkpoint_keeps_pods_without_uids(
    kubelet: FakeKubelet, watcher: PodResourcesWatcher
) -> None:
    kubelet.checkpoint_path.write_text('{"Data": []}')
    view = watcher.refresh_now()
    assert _pods(view) == {"a", "b"}
    assert view.checkpoint == ()
    assert _failures(watcher) == {"checkpoint": 1}
    index = build_index(view.containers, view.checkpoint, NODE)
    assert index.stats.unresolved_uids == 2


def test_a_checkpoint_missing_while_pods_hold_devices_is_said_and_counted(
    kubelet: FakeKubelet, watcher: PodResourcesWatcher, caplog
) -> None:
    """dcgm-exporter's chart mounts only pod-resources: the checkpoint's directory is not
    there, and pods sharing a GPU went without UIDs, split values and a word why (a
    missing file read as no allocations yet)."""
    kubelet.checkpoint_path.unlink()
    caplog.set_level(logging.WARNING, logger="gpufleet.exporter.pods.podresources")
    for _ in range(3):
        view = watcher.refresh_now()
    assert _pods(view) == {"a", "b"} and view.checkpoint == ()
    assert _failures(watcher) == {"checkpoint": 3}
    (said,) = [r for r in caplog.records if r.getMessage() == "kubelet checkpoint unreadable"]
    assert "mount /var/lib/kubelet/device-plugins" in said.fields["error"]


def test_a_checkpoint_missing_on_a_node_without_allocations_is_none_yet(
    kubelet: FakeKubelet, watcher: PodResourcesWatcher
) -> None:
    kubelet.checkpoint_path.unlink()
    kubelet.set_pods([])
    assert watcher.refresh_now().containers == ()
    assert _failures(watcher) == {}


def test_stop_cancels_promptly(kubelet: FakeKubelet) -> None:
    watcher = PodResourcesWatcher(
        socket_path=kubelet.pod_resources_socket,
        checkpoint_path=kubelet.checkpoint_path,
        refresh_seconds=3600.0,
    )
    watcher.start()
    wait_for(lambda: _pods(watcher.view()) == {"a", "b"})
    watcher.stop(timeout_seconds=10.0)
    assert "podresources" not in {t.name for t in threading.enumerate()}
    assert _failures(watcher) == {}
    assert watcher.errors() == {kind: 0 for kind in KubeletErrorKind}


# --- DRA: `dynamic_resources` over the real socket (issue 15 §2) -----------------------------


def test_dynamic_resources_field_numbers_are_the_kubelets() -> None:
    """k8s.io/kubelet pkg/apis/podresources/v1/api.proto, as the fake and the client use it."""
    numbers = {
        f"{message.DESCRIPTOR.name}.{field.name}": field.number
        for message in (pb.ContainerResources, pb.DynamicResource, pb.ClaimResource, pb.CDIDevice)
        for field in message.DESCRIPTOR.fields
        if message is not pb.ContainerResources or field.name == "dynamic_resources"
    }
    assert numbers == {
        "ContainerResources.dynamic_resources": 5,
        "DynamicResource.claim_name": 2,
        "DynamicResource.claim_namespace": 3,
        "DynamicResource.claim_resources": 4,
        "ClaimResource.cdi_devices": 1,
        "ClaimResource.driver_name": 2,
        "ClaimResource.pool_name": 3,
        "ClaimResource.device_name": 4,
        "ClaimResource.share_id": 5,
        "CDIDevice.name": 1,
    }
    assert pb.ClaimResource.DESCRIPTOR.fields_by_name["share_id"].has_presence  # optional


def test_dra_claims_reach_the_view(kubelet: FakeKubelet) -> None:
    claim = ClaimAllocation(
        claim_name="big-gpu",
        claim_namespace="ml",
        devices=(
            ClaimDevice(
                driver_name="gpu.nvidia.com",
                pool_name="node-a",
                device_name="gpu-0",
                cdi_devices=("k8s.gpu.nvidia.com/device=gpu-0",),
                share_id="3f1c",
            ),
            ClaimDevice(driver_name="nic.example.com", pool_name="node-a", device_name="eth1"),
        ),
    )
    kubelet.add_pod(
        PodAllocation(
            namespace="ml",
            name="c",
            uid="uid-c",
            containers=(ContainerAllocation(name="main", claims=(claim,)),),
        )
    )
    watcher = PodResourcesWatcher(
        socket_path=kubelet.pod_resources_socket, checkpoint_path=kubelet.checkpoint_path
    )
    try:
        view = watcher.refresh_now()
    finally:
        watcher.stop()
    assert [
        (
            c.namespace,
            c.pod,
            c.container,
            c.claim_name,
            c.claim_namespace,
            c.driver,
            c.pool,
            c.device,
        )
        for c in view.claims
    ] == [
        ("ml", "c", "main", "big-gpu", "ml", "gpu.nvidia.com", "node-a", "gpu-0"),
        ("ml", "c", "main", "big-gpu", "ml", "nic.example.com", "node-a", "eth1"),
    ]
