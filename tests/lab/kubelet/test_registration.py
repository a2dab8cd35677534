"""The fake kubelet toward device plugins: registration, ListAndWatch, admission, restart.

Driven by a small stub plugin: a real `DevicePluginServicer` on a unix socket in the fake
kubelet's device-plugins directory that registers itself over the real `kubelet.sock`.
"""

from __future__ import annotations

import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from helpers import wait_for

from gpufleet.kubelet.api import deviceplugin_v1beta1_pb2 as dp
from gpufleet.kubelet.api import deviceplugin_v1beta1_pb2_grpc as dp_grpc
from gpufleet.kubelet.api import podresources_v1_pb2 as pr
from gpufleet.kubelet.api import podresources_v1_pb2_grpc as pr_grpc
from gpufleet.kubelet.checkpoint import read_checkpoint
from gpufleet.lab.kubelet.deviceplugins import is_extended_resource_name
from gpufleet.lab.kubelet.kubelet import (
    AdmissionError,
    ContainerStartError,
    DeviceState,
    FakeKubelet,
)

RESOURCE = "example.com/gpu"
POD = ("ml", "trainer", "uid-trainer")


def device(index: int, *, healthy: bool = True, numa: tuple[int, ...] = ()) -> dp.Device:
    message = dp.Device(ID=f"GPU-{index}", health="Healthy" if healthy else "Unhealthy")
    for node in numa:
        message.topology.nodes.add(ID=node)
    return message


FOUR = [device(0, numa=(0,)), device(1, numa=(0,)), device(2, numa=(1,)), device(3)]


class StubPlugin(dp_grpc.DevicePluginServicer):
    """A device plugin that records every call, in order, and answers as configured."""

    def __init__(
        self,
        directory: Path,
        *,
        socket_name: str = "stub.sock",
        devices: list[dp.Device] = FOUR,
        options: dp.DevicePluginOptions | None = None,
        preferred: Callable[[dp.ContainerPreferredAllocationRequest], list[str]] | None = None,
    ) -> None:
        self.directory = directory
        self.socket_name = socket_name
        self.options = options or dp.DevicePluginOptions()
        self.preferred = preferred
        self.allocate_response = dp.ContainerAllocateResponse(envs={"STUB": "1"})
        self.calls: list[str] = []
        self.requests: list[object] = []
        self._cond = threading.Condition()
        self._devices = devices
        self._version = 0
        self._ended = False
        self._server: grpc.Server | None = None

    def serve(self) -> StubPlugin:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        dp_grpc.add_DevicePluginServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"unix://{self.directory / self.socket_name}")
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()

    def register(self, *, version: str = "v1beta1", resource: str = RESOURCE) -> None:
        request = dp.RegisterRequest(
            version=version, endpoint=self.socket_name, resource_name=resource
        )
        with grpc.insecure_channel(f"unix://{self.directory / 'kubelet.sock'}") as channel:
            dp_grpc.RegistrationStub(channel).Register(request, timeout=15)
        self._record("Register returned", request)

    def set_devices(self, devices: list[dp.Device]) -> None:
        with self._cond:
            self._devices, self._version = devices, self._version + 1
            self._cond.notify_all()

    def end_streams(self) -> None:
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    def _record(self, call: str, request: object) -> None:
        with self._cond:
            self.calls.append(call)
            self.requests.append(request)

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def GetDevicePluginOptions(self, request, context):
        self._record("GetDevicePluginOptions", request)
        return self.options

    def ListAndWatch(self, request, context):
        self._record("ListAndWatch", request)
        context.add_callback(self._wake)
        seen = -1
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda seen=seen: (
                        self._version != seen or self._ended or not context.is_active()
                    )
                )
                if self._ended or not context.is_active():
                    return
                seen, devices = self._version, list(self._devices)
            yield dp.ListAndWatchResponse(devices=devices)

    def GetPreferredAllocation(self, request, context):
        self._record("GetPreferredAllocation", request)
        (container,) = request.container_requests
        try:
            ids = self.preferred(container)  # type: ignore[misc]
        except LookupError as exc:
            context.abort(grpc.StatusCode.INTERNAL, str(exc))
        return dp.PreferredAllocationResponse(
            container_responses=[dp.ContainerPreferredAllocationResponse(deviceIDs=ids)]
        )

    def Allocate(self, request, context):
        self._record("Allocate", request)
        return dp.AllocateResponse(container_responses=[self.allocate_response])

    def PreStartContainer(self, request, context):
        self._record("PreStartContainer", request)
        if "fail" in self.calls:
            context.abort(grpc.StatusCode.UNAVAILABLE, "not ready")
        return dp.PreStartContainerResponse()

    def requests_of(self, call: str) -> list:
        with self._cond:
            return [r for c, r in zip(self.calls, self.requests, strict=True) if c == call]


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    # A short root: unix socket paths are limited to 107 bytes, pytest's tmp_path can be long.
    with (
        tempfile.TemporaryDirectory(prefix="gf-", dir="/tmp") as root,
        FakeKubelet(Path(root), rate_limit=None) as fake,
    ):
        yield fake


@pytest.fixture
def make_plugin(kubelet: FakeKubelet) -> Iterator[Callable[..., StubPlugin]]:
    plugins: list[StubPlugin] = []

    def make(**kwargs) -> StubPlugin:
        plugins.append(StubPlugin(kubelet.device_plugins_dir, **kwargs).serve())
        return plugins[-1]

    yield make
    for plugin in plugins:
        plugin.stop()


def _registered(kubelet: FakeKubelet, plugin: StubPlugin, *, healthy: int = 4) -> StubPlugin:
    plugin.register()
    wait_for(
        lambda: kubelet.device_plugins.allocatable().get(RESOURCE) == healthy,
        what="the plugin's devices",
    )
    return plugin


def _list(kubelet: FakeKubelet) -> list[pr.PodResources]:
    with grpc.insecure_channel(f"unix://{kubelet.pod_resources_socket}") as channel:
        stub = pr_grpc.PodResourcesListerStub(channel)
        return list(stub.List(pr.ListPodResourcesRequest(), timeout=5).pod_resources)


def _preferred_last(request: dp.ContainerPreferredAllocationRequest) -> list[str]:
    return sorted(request.available_deviceIDs)[-request.allocation_size :]


def _preferred_first(request: dp.ContainerPreferredAllocationRequest) -> list[str]:
    return sorted(request.available_deviceIDs)[: request.allocation_size]


def _preferred_fails(request: dp.ContainerPreferredAllocationRequest) -> list[str]:
    raise LookupError("nvml: GPU is lost")


# -- registration -------------------------------------------------------------------------


def test_options_are_fetched_before_register_returns(kubelet, make_plugin) -> None:
    plugin = _registered(kubelet, make_plugin())
    calls = plugin.calls
    assert calls.index("GetDevicePluginOptions") < calls.index("Register returned")
    assert calls.count("GetDevicePluginOptions") == 1
    assert kubelet.device_plugins.registrations(RESOURCE) == 1


@pytest.mark.parametrize(
    ("version", "resource", "message"),
    [
        (
            "v1alpha",
            RESOURCE,
            'requested API version "v1alpha" is not supported by kubelet. '
            'Supported version is ["v1beta1"]',
        ),
        ("v1beta1", "gpu", 'the ResourceName "gpu" is invalid'),
        ("v1beta1", "kubernetes.io/gpu", 'the ResourceName "kubernetes.io/gpu" is invalid'),
        ("v1beta1", "Example.com/gpu", 'the ResourceName "Example.com/gpu" is invalid'),
    ],
    ids=["old-version", "no-domain", "kubernetes.io-domain", "uppercase-domain"],
)
def test_bad_registration_rejected(kubelet, make_plugin, version, resource, message) -> None:
    plugin = make_plugin()
    with pytest.raises(grpc.RpcError) as excinfo:
        plugin.register(version=version, resource=resource)
    assert (excinfo.value.code(), excinfo.value.details()) == (grpc.StatusCode.UNKNOWN, message)
    assert "GetDevicePluginOptions" not in plugin.calls
    assert kubelet.device_plugins.registrations(resource) == 0


def test_an_absolute_endpoint_is_joined_to_the_directory(kubelet, make_plugin) -> None:
    """`filepath.Join(dir, "/stub.sock")` is `dir/stub.sock`; Python's `/` dialled
    `/stub.sock`, outside the directory, a socket a kubelet would never reach."""
    plugin = make_plugin()
    plugin.socket_name = "/stub.sock"
    _registered(kubelet, plugin)


def test_missing_plugin_sockets_do_not_hold_up_another_registration(kubelet, make_plugin) -> None:
    """Four registrations dialling missing sockets (10 s each) filled the fake's four
    Register workers; the kubelet serves each on a goroutine of its own."""
    bad = [make_plugin(socket_name=f"gone{i}.sock") for i in range(6)]
    failed: list[str] = []

    def register(plugin: StubPlugin) -> None:
        try:
            plugin.register()
        except grpc.RpcError as exc:
            failed.append(exc.details())

    for plugin in bad:
        plugin.stop()
        (kubelet.device_plugins_dir / plugin.socket_name).unlink(missing_ok=True)
    threads = [threading.Thread(target=register, args=(plugin,)) for plugin in bad]
    for thread in threads:
        thread.start()
    try:
        _registered(kubelet, make_plugin())  # Register's own deadline is 15 s
    finally:
        for thread in threads:
            thread.join()
    assert failed == ["failed to dial device plugin: context deadline exceeded"] * 6


def test_stop_leaves_a_registration_in_flight_behind(kubelet) -> None:
    """A dying kubelet waits for no Register in flight. The fake's stop waited for one
    whose plugin hung in GetDevicePluginOptions, up to 30 s; the registration, finishing
    after the restart, is dropped."""
    release = threading.Event()
    answered = threading.Event()

    class HungOptions(StubPlugin):
        def GetDevicePluginOptions(self, request, context):
            self._record("GetDevicePluginOptions", request)
            release.wait(20)
            answered.set()
            return self.options

    plugin = HungOptions(kubelet.device_plugins_dir).serve()
    refused: list[grpc.RpcError] = []

    def register() -> None:
        try:
            plugin.register()
        except grpc.RpcError as exc:
            refused.append(exc)

    registering = threading.Thread(target=register)
    registering.start()
    try:
        wait_for(lambda: "GetDevicePluginOptions" in plugin.calls, what="options asked")
        kubelet.restart()
        assert not answered.is_set(), "the restart waited for the plugin's answer"
    finally:
        release.set()
        registering.join()
        plugin.stop()
    assert len(refused) == 1  # cut off by the stop
    wait_for(  # the handler has seen the answer, and dropped the registration
        lambda: not any(t.name.startswith("fake-reg") for t in threading.enumerate()),
        what="the handler done",
    )
    assert kubelet.device_plugins.registrations(RESOURCE) == 0
    assert kubelet.device_plugins.allocatable() == {}


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/mig-1g.10gb", True),
        ("nvidia.com/gpu.shared", True),
        ("gpu", False),
        ("kubernetes.io/gpu", False),
        ("foo.kubernetes.io/gpu", False),
        ("requests.nvidia.com/gpu", False),
        ("a/b/c", False),
        ("nvidia.com/", False),
        ("nvidia.com/-gpu", False),
        ("nvidia.com/" + "g" * 64, False),
        ("Nvidia.com/gpu", False),
    ],
    ids=lambda value: str(value)[:24],
)
def test_extended_resource_names(name: str, valid: bool) -> None:
    assert is_extended_resource_name(name) is valid


def test_second_registration_replaces_the_first(kubelet, make_plugin) -> None:
    first = _registered(kubelet, make_plugin())
    second = make_plugin(socket_name="stub2.sock", devices=[device(7)])
    _registered(kubelet, second, healthy=1)
    first.end_streams()  # its stream was already closed by the kubelet: no effect
    assert kubelet.device_plugins.devices(RESOURCE) == (DeviceState("GPU-7", "Healthy", ()),)
    assert kubelet.device_plugins.registrations(RESOURCE) == 2


# -- ListAndWatch -------------------------------------------------------------------------


def test_list_and_watch_sets_capacity_and_allocatable(kubelet, make_plugin) -> None:
    plugin = _registered(kubelet, make_plugin())
    plugins = kubelet.device_plugins
    assert plugins.devices(RESOURCE)[2] == DeviceState("GPU-2", "Healthy", (1,))
    plugin.set_devices([device(0), device(1, healthy=False), device(2, healthy=False)])
    wait_for(lambda: plugins.allocatable() == {RESOURCE: 1}, what="health flip")
    assert plugins.capacity() == {RESOURCE: 3}
    with grpc.insecure_channel(f"unix://{kubelet.pod_resources_socket}") as channel:
        response = pr_grpc.PodResourcesListerStub(channel).GetAllocatableResources(
            pr.AllocatableResourcesRequest(), timeout=5
        )
    assert [list(d.device_ids) for d in response.devices] == [["GPU-0"]]
    plugin.set_devices(FOUR)
    wait_for(lambda: plugins.allocatable() == {RESOURCE: 4}, what="recovery")


def test_allocatable_lists_a_device_under_each_of_its_numa_nodes(kubelet, make_plugin) -> None:
    """As `List` files a granted one. It was listed once, under its lowest node."""
    _registered(kubelet, make_plugin(devices=[device(0, numa=(0, 1)), device(1)]), healthy=2)
    with grpc.insecure_channel(f"unix://{kubelet.pod_resources_socket}") as channel:
        response = pr_grpc.PodResourcesListerStub(channel).GetAllocatableResources(
            pr.AllocatableResourcesRequest(), timeout=5
        )
    listed = [(list(d.device_ids), [n.ID for n in d.topology.nodes]) for d in response.devices]
    assert listed == [(["GPU-0"], [0]), (["GPU-0"], [1]), (["GPU-1"], [])]


def test_stream_end_marks_devices_unhealthy(kubelet, make_plugin) -> None:
    plugin = _registered(kubelet, make_plugin())
    plugin.end_streams()
    wait_for(lambda: kubelet.device_plugins.allocatable() == {RESOURCE: 0}, what="disconnect")
    assert kubelet.device_plugins.capacity() == {RESOURCE: 4}
    with pytest.raises(AdmissionError, match="no healthy devices present; cannot allocate"):
        kubelet.admit(POD, "cuda", RESOURCE, 1)


@pytest.mark.parametrize("pre_start_required", [False, True])
def test_a_disconnected_plugin_keeps_its_endpoint_for_pre_start(
    kubelet, make_plugin, pre_start_required: bool
) -> None:
    """A container admitted just before its plugin's stream ended failed to start with
    "endpoint not found", though the plugin never asked for PreStartContainer: the
    kubelet keeps a disconnected endpoint (`PluginDisconnected` stamps its stop time)."""
    options = dp.DevicePluginOptions(pre_start_required=pre_start_required)
    plugin = _registered(kubelet, make_plugin(options=options))
    plugin.end_streams()
    wait_for(lambda: kubelet.device_plugins.allocatable() == {RESOURCE: 0}, what="disconnect")
    wait_for(
        lambda: not any(t.name.startswith("fake-kubelet-law-") for t in threading.enumerate()),
        what="the connection closed",
    )
    if not pre_start_required:
        kubelet.device_plugins.pre_start(RESOURCE, ["GPU-0"])  # nothing to call
        return
    with pytest.raises(ContainerStartError) as raised:  # a call on the closed connection
        kubelet.device_plugins.pre_start(RESOURCE, ["GPU-0"])
    assert str(raised.value) == (
        "device plugin PreStartContainer rpc failed with err: rpc error: code = Canceled "
        "desc = grpc: the client connection is closing"
    )


def test_after_a_restart_pre_start_knows_the_resource_from_the_checkpoint(
    kubelet, make_plugin
) -> None:
    options = dp.DevicePluginOptions(pre_start_required=True)
    plugin = _registered(kubelet, make_plugin(options=options))
    kubelet.restart()
    kubelet.device_plugins.pre_start(RESOURCE, ["GPU-0"])  # no options known: no call
    with pytest.raises(ContainerStartError, match="endpoint not found in cache"):
        kubelet.device_plugins.pre_start("example.com/other", ["x"])
    assert "PreStartContainer" not in plugin.calls


# -- admission ----------------------------------------------------------------------------


def test_admit_without_preferred_takes_any_available(kubelet, make_plugin) -> None:
    plugin = _registered(kubelet, make_plugin())
    first = kubelet.admit(POD, "cuda", RESOURCE, 2)
    assert "GetPreferredAllocation" not in plugin.calls
    (allocate,) = plugin.requests_of("Allocate")
    assert [sorted(c.devices_ids) for c in allocate.container_requests] == [sorted(first)]
    second = kubelet.admit(("ml", "other", "uid-other"), "cuda", RESOURCE, 2)
    assert sorted(first + second) == ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]


def test_admit_asks_for_the_preferred_allocation(kubelet, make_plugin) -> None:
    options = dp.DevicePluginOptions(get_preferred_allocation_available=True)
    plugin = _registered(kubelet, make_plugin(options=options, preferred=_preferred_last))
    kubelet.admit(("ml", "first", "uid-first"), "cuda", RESOURCE, 1)  # takes GPU-3
    assert sorted(kubelet.admit(POD, "cuda", RESOURCE, 2)) == ["GPU-1", "GPU-2"]
    request = plugin.requests_of("GetPreferredAllocation")[1].container_requests[0]
    assert sorted(request.available_deviceIDs) == ["GPU-0", "GPU-1", "GPU-2"]
    assert (list(request.must_include_deviceIDs), request.allocation_size) == ([], 2)
    allocate = plugin.requests_of("Allocate")[1].container_requests[0]
    assert sorted(allocate.devices_ids) == ["GPU-1", "GPU-2"]


def test_device_ids_come_in_no_order_and_the_preference_is_asked_every_time(
    kubelet, make_plugin
) -> None:
    """The kubelet sends `available_deviceIDs` and Allocate's IDs as Go sets'
    `UnsortedList()`: a plugin that relied on their order worked only against a fake that
    kept it. With no NUMA hint it asks for a preference even when every available device
    is needed (`devicesToAllocate`)."""
    options = dp.DevicePluginOptions(get_preferred_allocation_available=True)
    plugin = _registered(kubelet, make_plugin(options=options, preferred=_preferred_last))
    orders = set()
    for i in range(8):
        kubelet.admit(("ml", f"p{i}", f"uid-{i}"), "cuda", RESOURCE, 3)
        request = plugin.requests_of("GetPreferredAllocation")[-1].container_requests[0]
        orders.add(tuple(request.available_deviceIDs))
        kubelet.remove_pod("ml", f"p{i}")
    assert len(orders) > 1
    asked = len(plugin.requests_of("GetPreferredAllocation"))
    granted = kubelet.admit(POD, "cuda", RESOURCE, 4)
    assert sorted(granted) == ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]
    assert len(plugin.requests_of("GetPreferredAllocation")) == asked + 1


def test_preferred_allocation_error_fails_admission(kubelet, make_plugin) -> None:
    options = dp.DevicePluginOptions(get_preferred_allocation_available=True)
    plugin = _registered(kubelet, make_plugin(options=options, preferred=_preferred_fails))
    with pytest.raises(AdmissionError) as excinfo:
        kubelet.admit(POD, "cuda", RESOURCE, 1)
    assert excinfo.value.reason == "UnexpectedAdmissionError"
    assert excinfo.value.message == (
        "Allocate failed due to device plugin GetPreferredAllocation rpc failed with err: "
        "rpc error: code = Internal desc = nvml: GPU is lost, which is unexpected"
    )
    assert "Allocate" not in plugin.calls
    assert kubelet.pods == ()


@pytest.mark.parametrize(
    ("resource", "n", "message"),
    [
        (RESOURCE, 5, f"requested number of devices unavailable for {RESOURCE}. "),
        ("example.com/other", 1, "cannot allocate unregistered device example.com/other"),
    ],
    ids=["too-many", "unregistered"],
)
def test_admission_refused(kubelet, make_plugin, resource: str, n: int, message: str) -> None:
    _registered(kubelet, make_plugin())
    with pytest.raises(AdmissionError, match=message.replace(".", r"\.")):
        kubelet.admit(POD, "cuda", resource, n)


def test_allocate_response_recorded(kubelet, make_plugin) -> None:
    plugin = make_plugin()
    plugin.allocate_response = dp.ContainerAllocateResponse(
        envs={"NVIDIA_VISIBLE_DEVICES": "GPU-0"},
        annotations={"cdi.k8s.io/x": "k8s.device-plugin.nvidia.com/gpu=GPU-0"},
        cdi_devices=[dp.CDIDevice(name="k8s.device-plugin.nvidia.com/gpu=GPU-0")],
    )
    _registered(kubelet, plugin)
    kubelet.admit(POD, "cuda", RESOURCE, 1)
    assert kubelet.allocation_response("ml", "trainer", "cuda") == plugin.allocate_response
    with pytest.raises(KeyError):
        kubelet.allocation_response("ml", "trainer", "sidecar")


def test_pre_start_container_when_required(kubelet, make_plugin) -> None:
    options = dp.DevicePluginOptions(pre_start_required=True)
    plugin = _registered(kubelet, make_plugin(options=options))
    granted = kubelet.admit(POD, "cuda", RESOURCE, 2)
    (request,) = plugin.requests_of("PreStartContainer")
    assert sorted(request.devices_ids) == sorted(granted) and len(granted) == 2
    plugin.calls.append("fail")
    with pytest.raises(ContainerStartError, match="PreStartContainer rpc failed with err: rpc"):
        kubelet.admit(("ml", "b", "uid-b"), "cuda", RESOURCE, 1)
    assert [p.name for p in kubelet.pods] == ["trainer", "b"], "its devices stay allocated"


def test_pod_resources_list_reports_exactly_the_admitted(kubelet, make_plugin) -> None:
    options = dp.DevicePluginOptions(get_preferred_allocation_available=True)
    _registered(kubelet, make_plugin(options=options, preferred=_preferred_first))
    kubelet.admit(POD, "cuda", RESOURCE, 3)
    topology = sorted(
        (d.resource_name, sorted(d.device_ids), [n.ID for n in d.topology.nodes])
        for pod in _list(kubelet)
        for container in pod.containers
        for d in container.devices
    )
    assert topology == [
        (RESOURCE, ["GPU-0", "GPU-1"], [0]),
        (RESOURCE, ["GPU-2"], [1]),
    ]
    (entry,) = read_checkpoint(kubelet.checkpoint_path).entries
    assert entry.pod_uid == "uid-trainer"
    assert sorted(entry.device_ids) == ["GPU-0", "GPU-1", "GPU-2"]
    kubelet.remove_pod("ml", "trainer")
    assert _list(kubelet) == []
    assert sorted(kubelet.admit(("ml", "next", "uid-next"), "cuda", RESOURCE, 4)) == [
        f"GPU-{i}" for i in range(4)
    ], "deleting the pod freed its devices"


# -- kubelet restart ----------------------------------------------------------------------


def test_restart_wipes_sockets_but_the_checkpoint(kubelet, make_plugin) -> None:
    plugin = _registered(kubelet, make_plugin())
    held = kubelet.admit(POD, "cuda", RESOURCE, 1)
    directory = kubelet.device_plugins_dir
    (directory / "state.json").write_text("x")  # a plugin's: the kubelet removes sockets only
    (directory / "subdir").mkdir()
    stray = socket.socket(socket.AF_UNIX)
    stray.bind(str(directory / "stray.sock"))
    stray.close()
    checkpoint = kubelet.checkpoint_path.read_bytes()
    kubelet.restart()
    assert sorted(p.name for p in directory.iterdir()) == [
        "kubelet.sock",
        "kubelet_internal_checkpoint",
        "state.json",
        "subdir",
    ]
    assert (directory / "kubelet.sock").is_socket()
    assert kubelet.checkpoint_path.read_bytes() == checkpoint
    assert kubelet.device_plugins.allocatable() == {RESOURCE: 0}
    with pytest.raises(AdmissionError, match="no healthy devices present"):
        kubelet.admit(("ml", "b", "uid-b"), "cuda", RESOURCE, 1)

    # The plugin notices, serves again on its socket and re-registers.
    plugin.stop()
    plugin.serve()
    _registered(kubelet, plugin, healthy=4)
    assert kubelet.device_plugins.wait_for_registrations(RESOURCE, 2, timeout_seconds=5)
    assert kubelet.device_plugins.registrations(RESOURCE) == 2
    times = kubelet.device_plugins.registration_times(RESOURCE)
    assert times[1] >= kubelet.device_plugins.serving_since
    granted = kubelet.admit(("ml", "b", "uid-b"), "cuda", RESOURCE, 1)
    assert len(granted) == 1 and granted != held  # the checkpoint kept the first pod's


def test_restart_with_a_late_socket(kubelet) -> None:
    kubelet.restart(delay_socket_seconds=0.05)
    assert kubelet.serving
    assert (kubelet.device_plugins_dir / "kubelet.sock").is_socket()
