"""DRA attribution (`--kubernetes-enable-dra`): which GPU or MIG device each claim holds.

The kubelet's pod-resources `List` names a container's DRA devices by (driver, pool,
device); only the driver's ResourceSlices say which GPU that is. NVIDIA's DRA driver
(`gpu.nvidia.com`) publishes each device with the attributes `type` ("gpu" or "mig"),
`uuid`, and for MIG `parentUUID` and `profile`. As in dcgm-exporter, a claim device of
that driver gets the pod's labels plus `dra_claim_name`, `dra_claim_namespace`,
`dra_driver_name`, `dra_pool_name`, `dra_device_name`, and for MIG `dra_mig_profile` and
`dra_mig_device_uuid`; other drivers are ignored.

Unlike dcgm-exporter, which puts a MIG claim's labels on its parent GPU's series, a MIG
device is placed on its own MIG instance (found by its `uuid`): that is the entity the pod
uses. A claim whose device no slice describes, or a MIG device without a `uuid`, is left
out and counted, never guessed.

Pure: no I/O, no clock, no logging.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

DRIVER = "gpu.nvidia.com"

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimDevice:
    """One `ClaimResource` of one container, as pod-resources `List` reports it."""

    namespace: str
    pod: str
    container: str
    claim_name: str
    claim_namespace: str
    driver: str
    pool: str
    device: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SliceDevice:
    """One device of a `gpu.nvidia.com` ResourceSlice."""

    pool: str
    name: str
    type: str  # "gpu" or "mig"
    uuid: str  # "GPU-..." or "MIG-..."; "" when the slice gave none
    parent_uuid: str = ""  # MIG: the GPU's UUID
    profile: str = ""  # MIG: e.g. "1g.10gb"


class DraHolding(NamedTuple):
    """A container holding the device `device_id` (a GPU or MIG UUID) through a claim."""

    namespace: str
    pod: str
    container: str
    device_id: str
    attributes: Labels  # the dra_* labels, sorted


def slice_devices(resource_slice: Mapping[str, Any]) -> tuple[SliceDevice, ...]:
    """The devices of one ResourceSlice (JSON, resource.k8s.io v1 or v1beta1); none when it
    belongs to another driver. Devices of unknown type or without a name are skipped."""
    spec = resource_slice.get("spec") or {}
    if spec.get("driver") != DRIVER:
        return ()
    pool = (spec.get("pool") or {}).get("name") or ""
    found = []
    for device in spec.get("devices") or ():
        if not isinstance(device, Mapping) or not device.get("name"):
            continue
        # v1 keeps attributes on the device; v1beta1 under `basic`.
        attributes = device.get("attributes") or (device.get("basic") or {}).get("attributes")
        attrs = attributes if isinstance(attributes, Mapping) else {}
        kind = _string(attrs, "type")
        if kind not in ("gpu", "mig"):
            continue
        found.append(
            SliceDevice(
                pool=pool,
                name=str(device["name"]),
                type=kind,
                uuid=_string(attrs, "uuid"),
                parent_uuid=_string(attrs, "parentUUID"),
                profile=_string(attrs, "profile"),
            )
        )
    return tuple(found)


def _string(attrs: Mapping[str, Any], name: str) -> str:
    """A string attribute, unqualified or qualified with the driver's domain; "" if none."""
    value = attrs.get(name) or attrs.get(f"{DRIVER}/{name}")
    text = value.get("string") if isinstance(value, Mapping) else None
    return text if isinstance(text, str) else ""


def resolve_claims(
    claims: Iterable[ClaimDevice], devices: Mapping[tuple[str, str], SliceDevice]
) -> tuple[tuple[DraHolding, ...], int]:
    """The holdings of `gpu.nvidia.com` claims, and how many such claim devices are unknown.

    `devices` maps (pool, device name) to the slices' devices.
    """
    holdings = []
    unknown = 0
    for claim in claims:
        if claim.driver != DRIVER:
            continue
        device = devices.get((claim.pool, claim.device))
        if device is None or not device.uuid:
            unknown += 1
            continue
        attributes = [
            ("dra_claim_name", claim.claim_name),
            ("dra_claim_namespace", claim.claim_namespace),
            ("dra_device_name", claim.device),
            ("dra_driver_name", claim.driver),
            ("dra_pool_name", claim.pool),
        ]
        if device.type == "mig":
            attributes.append(("dra_mig_device_uuid", device.uuid))
            attributes.append(("dra_mig_profile", device.profile))
        holdings.append(
            DraHolding(
                namespace=claim.namespace,
                pod=claim.pod,
                container=claim.container,
                device_id=device.uuid,
                attributes=tuple(sorted(attributes)),
            )
        )
    return tuple(holdings), unknown
