"""Pod metadata from the Kubernetes API, as series labels: `--kubernetes-enable-pod-labels`.

dcgm-exporter copies every pod label (or those whose key matches one of the
`--kubernetes-pod-label-allowlist-regex` patterns, comma separated, unanchored as Go's
`MatchString`) onto the pod's series, with the key sanitised by replacing each character
outside `[a-zA-Z0-9_]` with `_` (its `utils.SanitizeLabelName`). Beyond that, a label that
would break the scrape is dropped rather than served: a key that clashes with a label the
series already has or may have (Prometheus rejects a sample with a repeated label name: the
identity and attribute names, and `DCGM_*`, the CSV's label rows), a key starting with a
digit or `__` (not a valid or not a user label name), and the second of two keys that
sanitise to the same name (the first by original key wins).

Pure: no I/O, no clock, no logging.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass

Labels = tuple[tuple[str, str], ...]

_INVALID = re.compile(r"[^a-zA-Z0-9_]")
# Labels a series of a pod may carry already, in any profile (identity, hostname, -o names,
# attributes, XID, window and GPU status labels, dra_*): a pod label of the same name is
# dropped, as Prometheus refuses a whole scrape over one repeated label name.
RESERVED = frozenset(
    {
        "gpu", "UUID", "uuid", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE",
        "GPU_I_ID", "Hostname", "hostname", "container", "namespace", "pod", "pod_uid",
        "vgpu", "pod_name", "pod_namespace", "container_name", "err_code", "err_msg",
        "hpc_job", "xid", "window_size_in_ms", "clock_event", "dra_claim_name",
        "dra_claim_namespace", "dra_driver_name", "dra_pool_name", "dra_device_name",
        "dra_mig_profile", "dra_mig_device_uuid", "peer_gpu", "link_status", "health_watch",
        "health_error_code",
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class PodMeta:
    """What the API says about one pod: its UID and the labels to serve (sanitised)."""

    uid: str | None = None
    labels: Labels = ()


def sanitize_label_name(key: str) -> str:
    """dcgm-exporter's SanitizeLabelName: every character outside [a-zA-Z0-9_] becomes `_`."""
    return _INVALID.sub("_", key)


def parse_allowlist(value: str) -> tuple[re.Pattern[str], ...]:
    """Compile the comma-separated allowlist patterns; empty means every label.

    Raises ValueError naming the first pattern that does not compile (dcgm-exporter skips
    it with a warning, which silently widens the list to every other pattern).
    """
    patterns = []
    for pattern in (p.strip() for p in value.split(",")):
        if not pattern:
            continue
        try:
            patterns.append(re.compile(pattern))
        # OverflowError: a repeat count over 2^32; RecursionError: nesting too deep
        except (re.error, OverflowError, RecursionError) as err:
            raise ValueError(f"pattern {pattern[:80]!r} is not a valid regex: {err}") from None
    return tuple(patterns)


def pod_labels(labels: Mapping[str, str], allowlist: tuple[re.Pattern[str], ...]) -> Labels:
    """The pod's labels to serve, sorted by sanitised key; see the module docstring."""
    served: dict[str, str] = {}
    for key in sorted(labels):
        if allowlist and not any(p.search(key) for p in allowlist):
            continue
        name = sanitize_label_name(key)
        if not name or name in RESERVED or name in served or name[0].isdigit():
            continue
        if name.startswith(("__", "DCGM_")):
            continue
        served[name] = labels[key]
    return tuple(sorted(served.items()))
