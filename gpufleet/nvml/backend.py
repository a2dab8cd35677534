"""Backend injection: the real `pynvml` module or a simulated NVML, chosen in one place.

Callers receive an object that looks like the `pynvml` module and never branch on which one
they got; `NvmlBackend` adds what differs in lifetime (a simulator owns a temp proc root and
must be closed). `open_nvml`/`open_backend` never call NVML; `start_backend` also
initialises it, with the error message every daemon gives when it cannot.
"""

import pathlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pynvml

if TYPE_CHECKING:
    from gpufleet.lab.nvml.api import SimulatedNvml


@dataclass(frozen=True, slots=True, kw_only=True)
class NvmlBackend:
    """An NVML library and what its owner must know to run and release it."""

    lib: Any  # `pynvml` or a `SimulatedNvml`
    proc_root: pathlib.Path | None  # the simulated processes' /proc; None: the host's
    # Releases what the backend owns (a no-op for real NVML). Safe to call while an NVML
    # call is still in flight on another thread, and more than once.
    close: Callable[[], None]


def open_nvml(
    fleet: str | None, *, seed: int = 0, proc_root: pathlib.Path | None = None
) -> "ModuleType | SimulatedNvml":
    """Return `pynvml` when `fleet` is None, else a `SimulatedNvml` built from the fleet spec.

    Raises ValueError naming the bad part of an invalid fleet spec (e.g. "8xH200").
    `proc_root` is where the simulator writes `<pid>/cgroup` files; None = a temp dir the
    simulator owns and removes on `close()`.
    """
    if fleet is None:
        return pynvml
    # Imported here: a production exporter never loads the simulator (it costs ~6 MiB).
    from gpufleet.lab.nvml.api import SimulatedNvml

    return SimulatedNvml(fleet, seed=seed, proc_root=proc_root)


def open_backend(
    fleet: str | None, *, seed: int = 0, proc_root: pathlib.Path | None = None
) -> NvmlBackend:
    """`open_nvml` as an `NvmlBackend`, so a daemon runs and releases either kind alike."""
    if fleet is None:
        return NvmlBackend(lib=pynvml, proc_root=None, close=lambda: None)
    sim = open_nvml(fleet, seed=seed, proc_root=proc_root)
    return NvmlBackend(lib=sim, proc_root=sim.proc_root, close=sim.close)


class NvmlStartError(Exception):
    """NVML could not be opened or initialised; the message says why and what to try."""


def start_backend(fleet: str | None) -> NvmlBackend:
    """`open_backend`, then `nvmlInit`. Raises NvmlStartError naming a bad fleet spec, or
    explaining a missing driver (with the way to run without a GPU)."""
    try:
        backend = open_backend(fleet)
    except ValueError as exc:
        raise NvmlStartError(f"--sim-fleet: {exc}") from None
    try:
        backend.lib.nvmlInit()
    except pynvml.NVMLError as exc:
        backend.close()
        raise NvmlStartError(
            f"cannot initialise NVML: {exc}. Is the NVIDIA driver visible in this container "
            "(runtimeClassName: nvidia, or the NVIDIA container toolkit)? To try gpufleet "
            "without a GPU, use --sim-fleet 8xH100."
        ) from None
    return backend
