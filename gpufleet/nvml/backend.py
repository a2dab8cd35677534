"""Backend injection: the real `pynvml` module or a simulated NVML, chosen in one place.

Callers receive an object that looks like the `pynvml` module and never branch on which one
they got. This module must never call NVML itself (not even `nvmlInit`): the caller owns the
library's lifetime.
"""

import pathlib
from types import ModuleType

import pynvml

from gpufleet.nvml.sim.api import SimulatedNvml


def open_nvml(
    fleet: str | None, *, seed: int = 0, proc_root: pathlib.Path | None = None
) -> ModuleType | SimulatedNvml:
    """Return `pynvml` when `fleet` is None, else a `SimulatedNvml` built from the fleet spec.

    Raises ValueError naming the bad part of an invalid fleet spec (e.g. "8xH200").
    `proc_root` is where the simulator writes `<pid>/cgroup` files; None = a temp dir the
    simulator owns and removes on `close()`.
    """
    if fleet is None:
        return pynvml
    return SimulatedNvml(fleet, seed=seed, proc_root=proc_root)
