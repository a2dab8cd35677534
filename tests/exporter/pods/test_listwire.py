"""listwire decodes what protobuf's own encoder writes for the kubelet's List response.

The bytes come from the generated pod-resources v1 classes (the kubelet's API, as the fake
kubelet serves it), with every field the exporter ignores set too: CPU ids, memory,
topology, CDI devices and share ids must be skipped, as protobuf skips what it does not
know. Malformed bytes raise WireError, never anything else.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.exporter.core.attribution import ContainerDevices
from gpufleet.exporter.core.dra import ClaimDevice
from gpufleet.exporter.pods.listwire import WireError, decode_list
from gpufleet.kubelet.api import podresources_v1_pb2 as pb

_text = st.text(max_size=12)
_ids = st.lists(_text, max_size=3)
_cpus = st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=3)
_topology = st.builds(
    pb.TopologyInfo, nodes=st.lists(st.builds(pb.NUMANode, ID=st.integers(0, 2**40)), max_size=2)
)
_memory = st.lists(
    st.builds(
        pb.ContainerMemory,
        memory_type=_text,
        size=st.integers(0, 2**64 - 1),
        topology=_topology,
    ),
    max_size=2,
)
_devices = st.builds(pb.ContainerDevices, resource_name=_text, device_ids=_ids, topology=_topology)
_claim_resource = st.builds(
    pb.ClaimResource,
    cdi_devices=st.lists(st.builds(pb.CDIDevice, name=_text), max_size=2),
    driver_name=_text,
    pool_name=_text,
    device_name=_text,
    share_id=_text,
)
_dynamic = st.builds(
    pb.DynamicResource,
    claim_name=_text,
    claim_namespace=_text,
    claim_resources=st.lists(_claim_resource, max_size=2),
)
_container = st.builds(
    pb.ContainerResources,
    name=_text,
    devices=st.lists(_devices, max_size=3),
    cpu_ids=_cpus,
    memory=_memory,
    dynamic_resources=st.lists(_dynamic, max_size=2),
)
_pod = st.builds(
    pb.PodResources,
    name=_text,
    namespace=_text,
    containers=st.lists(_container, max_size=3),
    cpu_ids=_cpus,
    memory=_memory,
)
_response = st.builds(pb.ListPodResourcesResponse, pod_resources=st.lists(_pod, max_size=4))


def _expected(
    response: pb.ListPodResourcesResponse,
) -> tuple[tuple[ContainerDevices, ...], tuple[ClaimDevice, ...]]:
    """What the exporter reads, taken from protobuf's own parse."""
    containers = tuple(
        ContainerDevices(
            namespace=pod.namespace,
            pod=pod.name,
            container=container.name,
            resource_name=devices.resource_name,
            device_ids=tuple(devices.device_ids),
        )
        for pod in response.pod_resources
        for container in pod.containers
        for devices in container.devices
        if devices.device_ids
    )
    claims = tuple(
        ClaimDevice(
            namespace=pod.namespace,
            pod=pod.name,
            container=container.name,
            claim_name=dynamic.claim_name,
            claim_namespace=dynamic.claim_namespace,
            driver=resource.driver_name,
            pool=resource.pool_name,
            device=resource.device_name,
        )
        for pod in response.pod_resources
        for container in pod.containers
        for dynamic in container.dynamic_resources
        for resource in dynamic.claim_resources
    )
    return containers, claims


@given(_response)
def test_decodes_what_protobuf_encodes(response: pb.ListPodResourcesResponse) -> None:
    assert decode_list(response.SerializeToString()) == _expected(response)


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited field (short payloads only)."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def test_names_after_the_containers_and_a_repeated_name_last_wins() -> None:
    devices = pb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-a", "GPU-b"])
    container = pb.ContainerResources(name="old", devices=[devices]).SerializeToString()
    container += _field(1, b"main")  # the container's name again, after its devices
    pod = _field(3, container) + _field(1, b"p") + _field(2, b"ns")  # names last
    data = _field(1, pod)
    containers, claims = decode_list(data)
    assert containers == (
        ContainerDevices(
            namespace="ns",
            pod="p",
            container="main",
            resource_name="nvidia.com/gpu",
            device_ids=("GPU-a", "GPU-b"),
        ),
    )
    assert (containers, claims) == _expected(pb.ListPodResourcesResponse.FromString(data))


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\x05ab",  # pod_resources longer than what is left
        b"\x0a",  # length missing
        b"\x0b",  # wire type 3 (group start)
        b"\x08\x80",  # varint cut short
        b"\x08" + b"\xff" * 10 + b"\x01",  # varint longer than 10 bytes
        b"\x00\x00",  # field number 0
        b"\x08\x01",  # pod_resources as a varint
        b"\x0a\x02\x0a\x01",  # pod name runs past the pod
        b"\x0a\x03\x0a\x01\xff",  # pod name not UTF-8
        b"\x0d\x01\x02",  # fixed32 cut short
    ],
)
def test_malformed_bytes_raise_wire_error(data: bytes) -> None:
    with pytest.raises(WireError):
        decode_list(data)


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_wire_error(data: bytes) -> None:
    try:
        containers, claims = decode_list(data)
    except WireError:
        return
    assert all(isinstance(c, ContainerDevices) for c in containers)
    assert all(isinstance(c, ClaimDevice) for c in claims)
