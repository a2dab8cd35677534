"""What the Kubernetes API said, as the collector reads it: plain records only.

Apart from `metadata`, which builds these, so that the records cost no import of the
kubernetes client (tens of MiB); without a flag that needs the API the collector reads no
view and loads neither.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.exporter.core.dra import SliceDevice
from gpufleet.exporter.core.podmeta import PodMeta


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiView:
    """This node's pods and the DRA driver's devices, as last seen."""

    pods: Mapping[tuple[str, str], PodMeta] = field(default_factory=dict)  # (ns, name)
    devices: Mapping[tuple[str, str], SliceDevice] = field(default_factory=dict)  # (pool, name)


EMPTY_API_VIEW = ApiView()
