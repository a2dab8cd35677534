"""Compatibility profiles: which dcgm-exporter release's names, units and label keys to serve.

dcgm-exporter changed its output twice in ways that break dashboards: 4.9.0 renamed fields
and changed units, and 4.6.0-4.8.3 lowercased `Hostname`. Users pick the release their
dashboards were built for; the snapshot stays in legacy units and is converted here.

Pure data and lookups: no I/O, no clock, no logging.
"""

from dataclasses import dataclass
from enum import StrEnum

from gpufleet.exporter.core.fields import CATALOG, FieldSpec


class Profile(StrEnum):
    """Field names and units."""

    LEGACY = "legacy"  # dcgm-exporter <= 4.8: legacy names, MHz / mJ / % / MiB / MB/s
    V49 = "4.9"  # dcgm-exporter 4.9: DCGM 4.7 names, Hz / J / ratio / bytes / B/s


class HostnameLabel(StrEnum):
    """Key of the hostname label."""

    LEGACY = "Hostname"  # every release up to 4.5.3-4.8.2
    LOWER = "hostname"  # 4.6.0-4.8.3 and later (#655)


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelNames:
    """Keys of the identity and workload labels."""

    uuid: str
    pod: str
    namespace: str
    container: str


LABEL_NAMES = LabelNames(uuid="UUID", pod="pod", namespace="namespace", container="container")
# `-o` / DCGM_EXPORTER_USE_OLD_NAMESPACE: dcgm-exporter 1.x keys.
OLD_LABEL_NAMES = LabelNames(
    uuid="uuid", pod="pod_name", namespace="pod_namespace", container="container_name"
)


def served_name(spec: FieldSpec, profile: Profile) -> str:
    """The metric (or label) name a field is served under: its 1.x name where the CSV used
    that (dcgm-exporter serves the CSV's spelling), else the profile's."""
    if spec.served_v1 and spec.name_v1:
        return spec.name_v1
    if profile is Profile.V49 and spec.name_v49:
        return spec.name_v49
    return spec.name


def unit_scale(spec: FieldSpec, profile: Profile) -> float:
    """Factor from the snapshot's legacy unit to the profile's unit.

    A field changes unit only together with a confirmed 4.9 name: serving a new unit under
    the old name would silently corrupt every existing panel and alert built on it.
    """
    if spec.served_v1:
        return 1.0
    return spec.scale_v49 if profile is Profile.V49 and spec.name_v49 else 1.0


def either_profile(name: str, selector: str = "") -> str:
    """PromQL reading field `name` (its legacy name) with `selector` (`{...}` or ""), in its
    legacy unit, from an exporter serving either profile: the legacy series, or the 4.9
    one converted back. The dashboards read fields so, as the rules and the autoscaler do,
    and stay whole under `--compat 4.9`. Always in parentheses: an aggregation takes it as
    its argument (`sum by (gpu) (...)`)."""
    spec = CATALOG[name]
    if not spec.name_v49:
        return f"({name}{selector})"
    renamed = spec.name_v49 + selector
    if spec.scale_v49 < 1:  # a ratio back to percent
        renamed = f"{round(1 / spec.scale_v49)} * {renamed}"
    elif spec.scale_v49 > 1:
        renamed = f"{renamed} / {spec.scale_v49:.0f}"
    return f"({name}{selector} or {renamed})"
