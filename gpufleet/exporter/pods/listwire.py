"""A pod-resources v1 `ListPodResourcesResponse`, decoded from protobuf's wire format.

The exporter needs a few strings per device group of the kubelet's answer; the protobuf
runtime that would parse it costs 1.2 MiB resident on every GPU node (BENCHMARKS.md,
issue 15), so the exporter's gRPC call (`grpcunary`) hands the raw bytes here. Field
numbers are the kubelet's pod-resources v1 API (kubernetes/kubelet
`pkg/apis/podresources/v1/api.proto`, copied in
`gpufleet/kubelet/proto/podresources_v1.proto`). As in protobuf, unknown fields are
skipped (a newer kubelet's additions are harmless) and the last value of a repeated
singular field wins. Pure.
"""

from collections.abc import Iterator

from gpufleet.exporter.core.attribution import ContainerDevices
from gpufleet.exporter.core.dra import ClaimDevice

# Wire types (protobuf encoding guide); groups (3, 4) are not in proto3 and are refused.
_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
_MAX_VARINT_BYTES = 10

# Field numbers, message by message.
_RESPONSE_POD_RESOURCES = 1
_POD_NAME, _POD_NAMESPACE, _POD_CONTAINERS = 1, 2, 3
_CONTAINER_NAME, _CONTAINER_DEVICES, _CONTAINER_DYNAMIC = 1, 2, 5
_DEVICES_RESOURCE_NAME, _DEVICES_IDS = 1, 2
_DYNAMIC_CLAIM_NAME, _DYNAMIC_CLAIM_NAMESPACE, _DYNAMIC_CLAIM_RESOURCES = 2, 3, 4
_CLAIM_DRIVER, _CLAIM_POOL, _CLAIM_DEVICE = 2, 3, 4


# What `decode_list` returns: the containers' device groups and their claim devices.
Listed = tuple[tuple[ContainerDevices, ...], tuple[ClaimDevice, ...]]


class WireError(ValueError):
    """The bytes are not a well-formed ListPodResourcesResponse."""


def decode_list(data: bytes) -> Listed:
    """One record per (container, device group) with device ids, and one per container
    claim device. Raises WireError on malformed bytes."""
    containers: list[ContainerDevices] = []
    claims: list[ClaimDevice] = []
    for number, value in _fields(memoryview(data)):
        if number == _RESPONSE_POD_RESOURCES:
            _pod(_message(value), containers, claims)
    return tuple(containers), tuple(claims)


def _pod(data: memoryview, containers: list[ContainerDevices], claims: list[ClaimDevice]) -> None:
    name = namespace = ""
    bodies = []
    for number, value in _fields(data):
        if number == _POD_NAME:
            name = _string(value)
        elif number == _POD_NAMESPACE:
            namespace = _string(value)
        elif number == _POD_CONTAINERS:
            bodies.append(_message(value))
    for body in bodies:  # the pod's names may follow its containers on the wire
        _container(body, namespace, name, containers, claims)


def _container(
    data: memoryview,
    namespace: str,
    pod: str,
    containers: list[ContainerDevices],
    claims: list[ClaimDevice],
) -> None:
    name = ""
    groups: list[tuple[str, tuple[str, ...]]] = []
    dynamic: list[tuple[str, str, list[tuple[str, str, str]]]] = []
    for number, value in _fields(data):
        if number == _CONTAINER_NAME:
            name = _string(value)
        elif number == _CONTAINER_DEVICES:
            groups.append(_devices(_message(value)))
        elif number == _CONTAINER_DYNAMIC:
            dynamic.append(_dynamic(_message(value)))
    containers.extend(
        ContainerDevices(
            namespace=namespace,
            pod=pod,
            container=name,
            resource_name=resource,
            device_ids=ids,
        )
        for resource, ids in groups
        if ids
    )
    claims.extend(
        ClaimDevice(
            namespace=namespace,
            pod=pod,
            container=name,
            claim_name=claim_name,
            claim_namespace=claim_namespace,
            driver=driver,
            pool=pool,
            device=device,
        )
        for claim_name, claim_namespace, resources in dynamic
        for driver, pool, device in resources
    )


def _devices(data: memoryview) -> tuple[str, tuple[str, ...]]:
    resource = ""
    ids = []
    for number, value in _fields(data):
        if number == _DEVICES_RESOURCE_NAME:
            resource = _string(value)
        elif number == _DEVICES_IDS:
            ids.append(_string(value))
    return resource, tuple(ids)


def _dynamic(data: memoryview) -> tuple[str, str, list[tuple[str, str, str]]]:
    claim_name = claim_namespace = ""
    resources = []
    for number, value in _fields(data):
        if number == _DYNAMIC_CLAIM_NAME:
            claim_name = _string(value)
        elif number == _DYNAMIC_CLAIM_NAMESPACE:
            claim_namespace = _string(value)
        elif number == _DYNAMIC_CLAIM_RESOURCES:
            resources.append(_claim_resource(_message(value)))
    return claim_name, claim_namespace, resources


def _claim_resource(data: memoryview) -> tuple[str, str, str]:
    driver = pool = device = ""
    for number, value in _fields(data):
        if number == _CLAIM_DRIVER:
            driver = _string(value)
        elif number == _CLAIM_POOL:
            pool = _string(value)
        elif number == _CLAIM_DEVICE:
            device = _string(value)
    return driver, pool, device


def _message(value: int | memoryview) -> memoryview:
    if isinstance(value, int):
        raise WireError("a message field is not length-delimited")
    return value


def _string(value: int | memoryview) -> str:
    """A proto3 string: length-delimited, valid UTF-8 (protobuf refuses anything else)."""
    try:
        return str(_message(value), "utf-8")
    except UnicodeDecodeError:
        raise WireError("a string field is not UTF-8") from None


def _fields(data: memoryview) -> Iterator[tuple[int, int | memoryview]]:
    """(field number, value) of each field of one message: an int for numeric wire types,
    the payload for length-delimited ones."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        if wire_type == _VARINT:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire_type == _LEN:
            size, pos = _varint(data, pos)
            if size > end - pos:
                raise WireError("a length-delimited field runs past its message")
            yield number, data[pos : pos + size]
            pos += size
        elif wire_type in (_FIXED64, _FIXED32):
            size = 8 if wire_type == _FIXED64 else 4
            if size > end - pos:
                raise WireError("a fixed-width field runs past its message")
            yield number, int.from_bytes(data[pos : pos + size], "little")
            pos += size
        else:
            raise WireError(f"wire type {wire_type} of field {number}")


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(pos, min(pos + _MAX_VARINT_BYTES, len(data))):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
    raise WireError("a varint is truncated or longer than 10 bytes")
