"""The fake kubelet's allocation table as pure functions: admission and checkpoint bookkeeping.

`FakeKubelet` holds the table (a `NodeAllocations`) and its lock; these functions compute
from it what a kubelet's device manager would: which devices pods hold, whether a change is
an allocation, what a pod looks like once granted or freed, and the checkpoint's entries.
They must never touch the table, a socket or a file: the caller commits what they return.
"""

from collections.abc import Iterable
from dataclasses import replace

from gpufleet.kubelet.checkpoint import CheckpointEntry
from gpufleet.lab.kubelet.deviceplugins import DeviceState
from gpufleet.lab.kubelet.podresources import (
    ContainerAllocation,
    DeviceAllocation,
    NodeAllocations,
    PodAllocation,
)


def checkpoint_entries(node: NodeAllocations) -> tuple[CheckpointEntry, ...]:
    """The checkpoint's entries for `node`: one per (pod, container, resource), in order."""
    entries = []
    for pod in node.pods:
        for container in pod.containers:
            per_resource: dict[str, dict[str, None]] = {}
            for allocation in container.devices:
                ids = per_resource.setdefault(allocation.resource_name, {})
                ids.update(dict.fromkeys(allocation.device_ids))
            entries.extend(
                CheckpointEntry(
                    pod_uid=pod.uid,
                    container_name=container.name,
                    resource_name=resource,
                    device_ids=tuple(ids),
                )
                for resource, ids in per_resource.items()
            )
    return tuple(entries)


def registered_devices(node: NodeAllocations) -> dict[str, tuple[str, ...]]:
    """Devices per resource the kubelet knows: the allocatable ones plus any allocated."""
    registered: dict[str, dict[str, None]] = {}
    allocated = (
        allocation
        for pod in node.pods
        for container in pod.containers
        for allocation in container.devices
    )
    for allocation in (*node.allocatable, *allocated):
        registered.setdefault(allocation.resource_name, {}).update(
            dict.fromkeys(allocation.device_ids)
        )
    return {resource: tuple(ids) for resource, ids in registered.items()}


def holdings(pods: Iterable[PodAllocation]) -> set[tuple[str, str, str, str]]:
    """Every (pod uid, container, resource, device ID) that `pods` hold."""
    return {
        (pod.uid, container.name, allocation.resource_name, device_id)
        for pod in pods
        for container in pod.containers
        for allocation in container.devices
        for device_id in allocation.device_ids
    }


def allocates(before: Iterable[PodAllocation], after: Iterable[PodAllocation]) -> bool:
    """Whether going from `before` to `after` gives some container a device it lacked."""
    return bool(holdings(after) - holdings(before))


def freed(pod: PodAllocation) -> PodAllocation:
    """`pod` after the device manager freed its devices: its containers hold none."""
    return replace(pod, containers=tuple(replace(c, devices=()) for c in pod.containers))


def check_admissible(
    pods: Iterable[PodAllocation], pod: tuple[str, str, str], container: str, resource: str
) -> None:
    """ValueError for an admission the kubelet could not be asked for: a name taken by a
    pod with another UID, or a container that already holds `resource`."""
    namespace, name, uid = pod
    for existing in pods:
        if (existing.namespace, existing.name) != (namespace, name):
            continue
        if existing.uid != uid:
            raise ValueError(f"pod {namespace}/{name} already exists with uid {existing.uid}")
        for held in existing.containers:
            if held.name == container and any(d.resource_name == resource for d in held.devices):
                raise ValueError(f"container {container} of {namespace}/{name} holds {resource}")


def by_numa_node(resource: str, devices: Iterable[DeviceState]) -> tuple[DeviceAllocation, ...]:
    """Granted devices as the kubelet files them: one entry per NUMA node (ascending, no
    topology first), a device on several nodes under each."""
    per_node: dict[int | None, list[str]] = {}
    for device in devices:
        for node in device.numa_nodes or (None,):
            per_node.setdefault(node, []).append(device.id)
    return tuple(
        DeviceAllocation(resource_name=resource, device_ids=tuple(ids), numa_node=node)
        for node, ids in sorted(
            per_node.items(), key=lambda item: -1 if item[0] is None else item[0]
        )
    )


def with_devices(
    pod: PodAllocation, container: str, devices: tuple[DeviceAllocation, ...]
) -> PodAllocation:
    """`pod` with `devices` added to `container` (created, last, if it is new)."""
    containers = list(pod.containers)
    for index, held in enumerate(containers):
        if held.name == container:
            containers[index] = replace(held, devices=held.devices + devices)
            break
    else:
        containers.append(ContainerAllocation(name=container, devices=devices))
    return replace(pod, containers=tuple(containers))


def find_pod(pods: list[PodAllocation], namespace: str, name: str) -> int | None:
    """The index of the pod named `namespace`/`name` in `pods`, or None."""
    for index, pod in enumerate(pods):
        if (pod.namespace, pod.name) == (namespace, name):
            return index
    return None


def validate(node: NodeAllocations) -> None:
    """ValueError when two pods share a namespace/name or a UID."""
    names: set[tuple[str, str]] = set()
    uids: set[str] = set()
    for pod in node.pods:
        if (pod.namespace, pod.name) in names:
            raise ValueError(f"pod {pod.namespace}/{pod.name} appears twice")
        if pod.uid in uids:
            raise ValueError(f"pod uid {pod.uid} ({pod.namespace}/{pod.name}) appears twice")
        names.add((pod.namespace, pod.name))
        uids.add(pod.uid)
