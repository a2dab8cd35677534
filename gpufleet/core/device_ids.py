"""Device IDs as GPU device plugins advertise them, and NVIDIA's `<id>::<n>` replica suffix.

A shared (time-sliced or MPS) device is advertised once per replica as `<id>::<n>`, where
`<id>` is the GPU or MIG UUID. The plugin writes that form, the exporter reads it back from
the kubelet, and the lab allocates it to its pods: one spelling, kept here.
"""

from gpufleet.core.numbers import ascii_int

REPLICA_SEPARATOR = "::"


def replica_id(base_id: str, replica: int) -> str:
    """NVIDIA's annotated ID: `<id>::<replica>`."""
    return f"{base_id}{REPLICA_SEPARATOR}{replica}"


def is_replica(device_id: str) -> bool:
    """Whether `device_id` names one replica of a shared device."""
    return REPLICA_SEPARATOR in device_id


MAX_REPLICA_DIGITS = 9


def base_id(device_id: str) -> str:
    """The GPU or MIG ID without a `::<n>` replica suffix."""
    return device_id.split(REPLICA_SEPARATOR, 1)[0]


def split_replica(device_id: str) -> tuple[str, int | None] | None:
    """`<id>::<n>` -> (`<id>`, n); `<id>` -> (`<id>`, None); None when the suffix after the
    last `::` is not a decimal number of at most MAX_REPLICA_DIGITS digits (past 4300,
    int() raises: one such ID stopped the exporter's every collection on its node)."""
    base, sep, suffix = device_id.rpartition(REPLICA_SEPARATOR)
    if not sep:
        return device_id, None
    replica = ascii_int(suffix, max_digits=MAX_REPLICA_DIGITS)
    return None if replica is None else (base, replica)
