"""What the Kubernetes API said, as the collector reads it: plain records only.

Apart from `metadata` so that importing it costs nothing: the collector always reads a view,
while the kubernetes client (tens of MiB) is imported only when a flag needs the API.
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
