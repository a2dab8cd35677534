"""Field numbers, names and types of the generated kubelet stubs, read from the descriptors.

These are the wire contract with real kubelets: a wrong number here silently drops data.
"""

from __future__ import annotations

import pytest
from google.protobuf.descriptor import FieldDescriptor

from gpufleet.kubelet.api import deviceplugin_v1beta1_pb2 as dp
from gpufleet.kubelet.api import podresources_v1_pb2 as pr

STRING = FieldDescriptor.TYPE_STRING
INT64 = FieldDescriptor.TYPE_INT64
INT32 = FieldDescriptor.TYPE_INT32
UINT64 = FieldDescriptor.TYPE_UINT64
BOOL = FieldDescriptor.TYPE_BOOL
MESSAGE = FieldDescriptor.TYPE_MESSAGE

# (message class, field name, number, type, repeated)
FIELDS = [
    (pr.AllocatableResourcesResponse, "devices", 1, MESSAGE, True),
    (pr.AllocatableResourcesResponse, "cpu_ids", 2, INT64, True),
    (pr.AllocatableResourcesResponse, "memory", 3, MESSAGE, True),
    (pr.ListPodResourcesResponse, "pod_resources", 1, MESSAGE, True),
    (pr.PodResources, "name", 1, STRING, False),
    (pr.PodResources, "namespace", 2, STRING, False),
    (pr.PodResources, "containers", 3, MESSAGE, True),
    (pr.PodResources, "cpu_ids", 4, INT64, True),
    (pr.PodResources, "memory", 5, MESSAGE, True),
    (pr.ContainerResources, "name", 1, STRING, False),
    (pr.ContainerResources, "devices", 2, MESSAGE, True),
    (pr.ContainerResources, "cpu_ids", 3, INT64, True),
    (pr.ContainerResources, "memory", 4, MESSAGE, True),
    (pr.ContainerResources, "dynamic_resources", 5, MESSAGE, True),
    (pr.ContainerMemory, "memory_type", 1, STRING, False),
    (pr.ContainerMemory, "size", 2, UINT64, False),
    (pr.ContainerMemory, "topology", 3, MESSAGE, False),
    (pr.ContainerDevices, "resource_name", 1, STRING, False),
    (pr.ContainerDevices, "device_ids", 2, STRING, True),
    (pr.ContainerDevices, "topology", 3, MESSAGE, False),
    (pr.TopologyInfo, "nodes", 1, MESSAGE, True),
    (pr.NUMANode, "ID", 1, INT64, False),
    (pr.DynamicResource, "claim_name", 2, STRING, False),
    (pr.DynamicResource, "claim_namespace", 3, STRING, False),
    (pr.DynamicResource, "claim_resources", 4, MESSAGE, True),
    (pr.ClaimResource, "cdi_devices", 1, MESSAGE, True),
    (pr.ClaimResource, "driver_name", 2, STRING, False),
    (pr.ClaimResource, "pool_name", 3, STRING, False),
    (pr.ClaimResource, "device_name", 4, STRING, False),
    (pr.ClaimResource, "share_id", 5, STRING, False),
    (pr.CDIDevice, "name", 1, STRING, False),
    (pr.GetPodResourcesRequest, "pod_name", 1, STRING, False),
    (pr.GetPodResourcesRequest, "pod_namespace", 2, STRING, False),
    (pr.GetPodResourcesResponse, "pod_resources", 1, MESSAGE, False),
    (dp.DevicePluginOptions, "pre_start_required", 1, BOOL, False),
    (dp.DevicePluginOptions, "get_preferred_allocation_available", 2, BOOL, False),
    (dp.RegisterRequest, "version", 1, STRING, False),
    (dp.RegisterRequest, "endpoint", 2, STRING, False),
    (dp.RegisterRequest, "resource_name", 3, STRING, False),
    (dp.RegisterRequest, "options", 4, MESSAGE, False),
    (dp.ListAndWatchResponse, "devices", 1, MESSAGE, True),
    (dp.TopologyInfo, "nodes", 1, MESSAGE, True),
    (dp.NUMANode, "ID", 1, INT64, False),
    (dp.Device, "ID", 1, STRING, False),
    (dp.Device, "health", 2, STRING, False),
    (dp.Device, "topology", 3, MESSAGE, False),
    (dp.PreStartContainerRequest, "devices_ids", 1, STRING, True),
    (dp.PreferredAllocationRequest, "container_requests", 1, MESSAGE, True),
    (dp.ContainerPreferredAllocationRequest, "available_deviceIDs", 1, STRING, True),
    (dp.ContainerPreferredAllocationRequest, "must_include_deviceIDs", 2, STRING, True),
    (dp.ContainerPreferredAllocationRequest, "allocation_size", 3, INT32, False),
    (dp.PreferredAllocationResponse, "container_responses", 1, MESSAGE, True),
    (dp.ContainerPreferredAllocationResponse, "deviceIDs", 1, STRING, True),
    (dp.AllocateRequest, "container_requests", 1, MESSAGE, True),
    (dp.ContainerAllocateRequest, "devices_ids", 1, STRING, True),
    (dp.CDIDevice, "name", 1, STRING, False),
    (dp.AllocateResponse, "container_responses", 1, MESSAGE, True),
    (dp.ContainerAllocateResponse, "envs", 1, MESSAGE, True),
    (dp.ContainerAllocateResponse, "mounts", 2, MESSAGE, True),
    (dp.ContainerAllocateResponse, "devices", 3, MESSAGE, True),
    (dp.ContainerAllocateResponse, "annotations", 4, MESSAGE, True),
    (dp.ContainerAllocateResponse, "cdi_devices", 5, MESSAGE, True),
    (dp.Mount, "container_path", 1, STRING, False),
    (dp.Mount, "host_path", 2, STRING, False),
    (dp.Mount, "read_only", 3, BOOL, False),
    (dp.DeviceSpec, "container_path", 1, STRING, False),
    (dp.DeviceSpec, "host_path", 2, STRING, False),
    (dp.DeviceSpec, "permissions", 3, STRING, False),
]


@pytest.mark.parametrize(
    ("message", "name", "number", "kind", "repeated"),
    FIELDS,
    ids=[f"{m.DESCRIPTOR.full_name}.{n}" for m, n, *_ in FIELDS],
)
def test_field(message, name: str, number: int, kind: int, repeated: bool) -> None:
    field = message.DESCRIPTOR.fields_by_name[name]
    assert (field.number, field.type, field.is_repeated) == (
        number,
        kind,
        repeated,
    )


@pytest.mark.parametrize(
    "message",
    sorted(
        {m for m, *_ in FIELDS} | {pr.ListPodResourcesRequest, dp.Empty},
        key=lambda m: m.DESCRIPTOR.full_name,
    ),
    ids=lambda m: m.DESCRIPTOR.full_name,
)
def test_no_undeclared_fields(message) -> None:
    expected = {name for m, name, *_ in FIELDS if m is message}
    assert set(message.DESCRIPTOR.fields_by_name) == expected


def test_share_id_is_proto3_optional() -> None:
    field = pr.ClaimResource.DESCRIPTOR.fields_by_name["share_id"]
    assert field.has_presence
    assert field.containing_oneof is not None and field.containing_oneof.name == "_share_id"
    claim = pr.ClaimResource()
    assert not claim.HasField("share_id")
    claim.share_id = ""
    assert claim.HasField("share_id")


def test_dynamic_resource_field_1_is_reserved() -> None:
    descriptor = pr.DynamicResource.DESCRIPTOR
    assert 1 not in descriptor.fields_by_number
    # An old kubelet's class_name (field 1) must parse as unknown, not as another field.
    old_wire = b"\x0a\x03gpu" + pr.DynamicResource(claim_name="c").SerializeToString()
    parsed = pr.DynamicResource.FromString(old_wire)
    assert parsed.claim_name == "c"


def test_map_fields_are_string_to_string() -> None:
    for name in ("envs", "annotations"):
        entry = dp.ContainerAllocateResponse.DESCRIPTOR.fields_by_name[name].message_type
        assert entry.GetOptions().map_entry
        assert [(f.name, f.type) for f in entry.fields] == [("key", STRING), ("value", STRING)]


@pytest.mark.parametrize(
    ("module", "service", "methods"),
    [
        (pr, "v1.PodResourcesLister", ["List", "GetAllocatableResources", "Get"]),
        (dp, "v1beta1.Registration", ["Register"]),
        (
            dp,
            "v1beta1.DevicePlugin",
            [
                "GetDevicePluginOptions",
                "ListAndWatch",
                "GetPreferredAllocation",
                "Allocate",
                "PreStartContainer",
            ],
        ),
    ],
    ids=["PodResourcesLister", "Registration", "DevicePlugin"],
)
def test_service_paths(module, service: str, methods: list[str]) -> None:
    name = service.split(".")[1]
    descriptor = module.DESCRIPTOR.services_by_name[name]
    assert descriptor.full_name == service
    assert [m.name for m in descriptor.methods] == methods


def test_list_and_watch_is_server_streaming() -> None:
    method = dp.DESCRIPTOR.services_by_name["DevicePlugin"].methods_by_name["ListAndWatch"]
    assert method.server_streaming and not method.client_streaming
