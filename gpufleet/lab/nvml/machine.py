"""The simulated machine's mutable state: devices and handles, processes, counters, faults.

`SimulatedNvml` and its call mixins read everything through this one object. Thread-safe:
one re-entrant lock guards every mutation; per-device process lists are immutable tuples
swapped under the lock, so readers never see a half-applied change. Injected hangs sleep
outside the lock. It never calls the real NVML library.
"""

import dataclasses
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import pynvml

from gpufleet.lab.nvml import workload
from gpufleet.lab.nvml.fleet import GpuDevice, MigDevice
from gpufleet.lab.nvml.handles import HandleTable
from gpufleet.lab.nvml.models import MODELS, GpuModel, MigProfile

UINT_MAX = 0xFFFFFFFF
_MIB = 1 << 20
_SAMPLE_S = 0.1  # values change at most this often, like NVML's own sampling
_ENERGY_STEP_S = 1.0
_MAX_ENERGY_STEPS = 600  # beyond this gap, integrate in coarser steps


def nvml_error(code: int) -> pynvml.NVMLError:
    """pynvml's own subclass for `code`, e.g. NVMLError_GpuIsLost."""
    return pynvml.NVMLError(code)


@dataclass(frozen=True, slots=True, kw_only=True)
class SimProcess:
    """A simulated compute process."""

    pid: int
    gpu: int
    gi_id: int | None  # None: not on a MIG device
    ci_id: int | None
    pod_uid: str | None
    container_id: str
    used_memory_bytes: int
    sm_share: float  # demand as a fraction of its device's SMs
    activity: workload.Wave
    started_at: float  # elapsed simulated seconds
    info: Any  # the pynvml friendly object GetComputeRunningProcesses returns


class Load(NamedTuple):
    util: float  # 0..1
    scale: float  # a process's share of util is its demand / scale
    t: float  # elapsed seconds the values were computed for


class Node:
    """What a device handle points at: a whole GPU, or one MIG device of it."""

    __slots__ = (
        "background",
        "cache",
        "children",
        "gpu",
        "handle",
        "mig",
        "model",
        "parent",
        "procs",
        "profile",
        "traits",
    )

    def __init__(self, gpu: GpuDevice, mig: MigDevice | None, traits: workload.GpuTraits) -> None:
        self.gpu = gpu
        self.mig = mig
        self.model: GpuModel = MODELS[gpu.model]
        self.profile: MigProfile | None = self.model.mig_profile(mig.profile) if mig else None
        self.traits = traits
        self.background = (
            traits.background if mig is None else workload.background(f"{mig.uuid}:bg")
        )
        self.procs: tuple[SimProcess, ...] = ()
        self.children: tuple[Node, ...] = ()
        self.parent: Node | None = None
        self.handle: Any = None
        self.cache: tuple[tuple[float, int], Load] | None = None

    @property
    def mig_parent(self) -> bool:
        return self.mig is None and self.gpu.mig_enabled

    def memory_mib(self) -> tuple[int, int]:
        """(total, reserved) MiB."""
        if self.profile is not None:
            return self.profile.memory_mib, 0
        return self.model.memory_mib, self.model.reserved_mib


class Machine:
    """Devices, processes, counters and injected faults of one simulated host."""

    def __init__(
        self,
        gpus: tuple[GpuDevice, ...],
        *,
        seed: int,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
    ) -> None:
        self.seed = seed
        self.gpus = gpus
        self.lock = threading.RLock()
        self.initialized = 0  # nvmlInit refcount
        self.lost: set[int] = set()
        # The caller has CAP_SYS_ADMIN: nvml.h gives a MIG-enabled GPU's aggregates (memory,
        # processes) and its GPU instances by id to such a caller only.
        self.privileged = True
        # gpu index -> uncorrectable ECC errors injected since the driver loaded; a row
        # remapping GPU holds each as a pending remap, an older one as a pending retirement.
        self.uncorrectable: dict[int, int] = {}
        self.version = 0  # bumped on every process change; invalidates load caches
        self.processes: dict[int, SimProcess] = {}
        self.device_handles: HandleTable[Node] = HandleTable(pynvml.c_nvmlDevice_t)
        self._clock = clock
        self._t0 = clock()
        self._wall0 = wall_clock()
        self._last_elapsed = 0.0
        self._not_supported: list[tuple[str | int, str | None, int | None]] = []
        self._hangs: list[tuple[str, float, int | None]] = []
        self.nodes: list[Node] = []
        self.by_uuid: dict[str, Node] = {}
        for gpu in gpus:
            traits = workload.gpu_traits(seed, gpu.index)
            node = Node(gpu, None, traits)
            node.children = tuple(Node(gpu, m, traits) for m in gpu.mig)
            for n in (node, *node.children):
                n.parent = node if n.mig else None
                n.handle = self.device_handles.new(n)
                self.by_uuid[n.mig.uuid if n.mig else gpu.uuid] = n
            self.nodes.append(node)
        # per GPU: [grid time, energy mJ at grid time, highest value returned]
        self._energy = [[0.0, float(n.traits.energy_base_mj), 0.0] for n in self.nodes]

    # --- time ---------------------------------------------------------------

    def now(self) -> float:
        """Elapsed simulated seconds; never goes backwards, so counters never do."""
        elapsed = self._clock() - self._t0
        with self.lock:
            self._last_elapsed = max(self._last_elapsed, elapsed)
            return self._last_elapsed

    def wall_us(self, elapsed: float) -> int:
        """Wall-clock microseconds for an elapsed time: NVML's timestamp unit."""
        return int((self._wall0 + elapsed) * 1e6)

    # --- entry checks ---------------------------------------------------------

    def enter(self, fn: str, handle: Any = None, *, mig_ok: bool = True) -> Node:
        """Check init, faults and handle for an API call; return the handle's node.

        Raises NVMLError_Uninitialized, _InvalidArgument (unknown handle), _GpuIsLost,
        _NotSupported (injected, or a MIG handle where `mig_ok` is False).
        """
        if not self.initialized:
            raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
        node = self.device_handles.get(handle)
        if node is None:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._faults(fn, node)
        if node.mig is not None and not mig_ok:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return node

    def require_privilege(self, node: Node) -> None:
        """NoPermission for a MIG-enabled GPU's aggregate when the caller is unprivileged."""
        if node.mig_parent and not self.privileged:
            raise nvml_error(pynvml.NVML_ERROR_NO_PERMISSION)

    def require_init(self) -> None:
        if not self.initialized:
            raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)

    def enter_system(self, fn: str) -> None:
        """Entry checks for a call that takes no device handle."""
        self.require_init()
        if self._hangs or self._not_supported:
            self._faults(fn, None)

    def _faults(self, fn: str, node: Node | None) -> None:
        index = None if node is None else node.gpu.index
        if self._hangs:
            delay = sum(s for f, s, i in self._hangs if f == fn and i in (None, index))
            if delay > 0:
                time.sleep(delay)  # outside the lock: a hang must not stall other threads
        if index is not None and index in self.lost:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if self._not_supported and self.is_not_supported(fn, node):
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def is_not_supported(self, target: str | int, node: Node | None) -> bool:
        """Whether an injected NotSupported rule covers a function name or field id."""
        for t, model, index in self._not_supported:
            if t != target:
                continue
            if model is not None and (node is None or node.model.key != model):
                continue
            if index is not None and (node is None or node.gpu.index != index):
                continue
            return True
        return False

    def add_not_supported(self, target: str | int, model: str | None, index: int | None) -> None:
        with self.lock:
            self._not_supported = [*self._not_supported, (target, model, index)]

    def set_hang(self, fn: str, seconds: float, index: int | None) -> None:
        with self.lock:
            kept = [h for h in self._hangs if (h[0], h[2]) != (fn, index)]
            self._hangs = kept + ([(fn, seconds, index)] if seconds > 0 else [])

    def clear_injections(self) -> None:
        with self.lock:
            self._not_supported, self._hangs = [], []

    # --- load -------------------------------------------------------------

    def load(self, node: Node) -> Load:
        """The node's load at the current sample time (cached per sample and process set)."""
        t = math.floor(self.now() / _SAMPLE_S) * _SAMPLE_S
        key = (t, self.version)
        cached = node.cache
        if cached is not None and cached[0] == key:
            return cached[1]
        load = self.load_at(node, t)
        node.cache = (key, load)
        return load

    def load_at(self, node: Node, t: float) -> Load:
        if node.mig_parent:
            util = sum(self.load_at(c, t).util * c.profile.slices for c in node.children) / 7
            return Load(util, 1.0, t)
        util, scale = workload.utilization(
            node.background.at(t), (p.sm_share * p.activity.at(t) for p in node.procs)
        )
        return Load(util, scale, t)

    def process_sm_percent(self, proc: SimProcess, load: Load) -> int:
        return round(100 * proc.sm_share * proc.activity.at(load.t) / load.scale)

    def memory_bytes(self, node: Node) -> tuple[int, int, int]:
        """(total, reserved, used) bytes of a GPU or MIG device."""
        total, reserved = node.memory_mib()
        return total * _MIB, reserved * _MIB, sum(p.used_memory_bytes for p in node.procs)

    # --- counters -----------------------------------------------------------

    def energy_mj(self, node: Node) -> int:
        """Energy since driver load: power integrated over simulated time, never decreasing."""
        with self.lock:
            e = self.now()
            state = self._energy[node.gpu.index]
            self._advance_energy(node, state, e)
            partial = workload.power_mw(node.model, self.load_at(node, e).util)  # mW * s = mJ
            value = max(state[2], state[1] + partial * (e - state[0]))
            state[2] = value
            return int(value)

    def _advance_energy(self, node: Node, state: list[float], e: float) -> None:
        steps = math.floor((e - state[0]) / _ENERGY_STEP_S)
        if steps <= 0:
            return
        step = steps * _ENERGY_STEP_S / min(steps, _MAX_ENERGY_STEPS)
        for _ in range(min(steps, _MAX_ENERGY_STEPS)):
            util = self.load_at(node, state[0] + step / 2).util
            state[1] += workload.power_mw(node.model, util) * step
            state[0] += step

    def counter(self, wave: workload.Wave, e: float) -> int:
        return int(wave.integral(e))

    # --- processes ----------------------------------------------------------

    def add_process(self, proc: SimProcess) -> None:
        with self.lock:
            gpu = self.nodes[proc.gpu]
            self._advance_energy(gpu, self._energy[proc.gpu], self.now())
            self.processes[proc.pid] = proc
            self._reindex(gpu)

    def remove_process(self, pid: int) -> SimProcess:
        with self.lock:
            proc = self.processes.pop(pid)
            gpu = self.nodes[proc.gpu]
            self._advance_energy(gpu, self._energy[proc.gpu], self.now())
            self._reindex(gpu)
            return proc

    def set_sm_share(self, pid: int, sm_share: float) -> None:
        with self.lock:
            proc = self.processes[pid]
            gpu = self.nodes[proc.gpu]
            self._advance_energy(gpu, self._energy[proc.gpu], self.now())
            self.processes[pid] = dataclasses.replace(proc, sm_share=sm_share)
            self._reindex(gpu)

    def _reindex(self, gpu: Node) -> None:
        procs = tuple(
            sorted((p for p in self.processes.values() if p.gpu == gpu.gpu.index), key=_pid)
        )
        gpu.procs = procs
        for child in gpu.children:
            child.procs = tuple(p for p in procs if p.gi_id == child.mig.gi_id)
        self.version += 1


def _pid(proc: SimProcess) -> int:
    return proc.pid
