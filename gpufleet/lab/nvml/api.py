"""`SimulatedNvml`: an object that looks like the `pynvml` module, backed by a simulated fleet.

Methods carry pynvml's function names and positional parameter names; module-level names
the sim does not define (constants, struct classes, `NVMLError*`) are read from `pynvml`
itself, so `lib.NVML_CLOCK_SM` or `lib.NVMLError_NotSupported` work on either backend. An
`nvml*` function the sim does not implement raises NVMLError_FunctionNotFound: it must
never fall through to the real library. Scenario controls (processes, XIDs, faults) are
ordinary methods whose names do not start with `nvml`.
"""

import hashlib
import inspect
import pathlib
import time
from collections.abc import Callable
from typing import Any

import pynvml

from gpufleet.lab.nvml import workload
from gpufleet.lab.nvml.counters import CounterCalls
from gpufleet.lab.nvml.devicecalls import DeviceCalls
from gpufleet.lab.nvml.events import EventCalls, EventHub
from gpufleet.lab.nvml.fleet import GpuDevice, parse_fleet
from gpufleet.lab.nvml.gpm import GpmCalls
from gpufleet.lab.nvml.handles import HandleTable
from gpufleet.lab.nvml.machine import UINT_MAX, Machine, Node, SimProcess, nvml_error
from gpufleet.lab.nvml.migcalls import MigCalls
from gpufleet.lab.nvml.models import MODELS
from gpufleet.lab.nvml.procfs import CgroupLayout, ProcRoot, QosClass, cgroup_text

DRIVER_VERSION = "550.90.07"
NVML_VERSION = "12.550.90.07"
CUDA_DRIVER_VERSION = 12040
XID_FALLEN_OFF_BUS = 79
_FIRST_PID = 12000
# pynvml functions that do not touch the library: safe to hand out as they are.
_PURE_HELPERS = frozenset(
    {"nvmlExceptionClass", "nvmlStructToFriendlyObject", "nvmlFriendlyObjectToStruct"}
)


class SimulatedNvml(DeviceCalls, CounterCalls, MigCalls, GpmCalls, EventCalls):
    """A simulated NVML for the GPUs of a fleet spec such as "6xH100+2xH100:mig=all-1g.10gb".

    Call `nvmlInit()` before anything else, exactly as with pynvml. `clock` (monotonic
    seconds) drives the load model; `wall_clock` only dates timestamps. Thread-safe.
    """

    def __init__(
        self,
        fleet: str,
        *,
        seed: int = 0,
        proc_root: pathlib.Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._m = Machine(
            parse_fleet(fleet, seed=seed), seed=seed, clock=clock, wall_clock=wall_clock
        )
        self._events = EventHub()
        self._gpm_samples = HandleTable(pynvml.c_nvmlGpmSample_t)
        self._gpu_instances: HandleTable[Node] = HandleTable(pynvml.c_nvmlGpuInstance_t)
        self._gi_handles = {
            (c.gpu.index, c.mig.gi_id): self._gpu_instances.new(c)
            for n in self._m.nodes
            for c in n.children
        }
        self._proc = ProcRoot(proc_root)
        self._next_pid = _FIRST_PID
        self._closed = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        value = getattr(pynvml, name)
        if name.startswith("nvml") and inspect.isfunction(value) and name not in _PURE_HELPERS:
            return _function_not_found
        return value

    # --- read-only description -------------------------------------------------

    @property
    def devices(self) -> tuple[GpuDevice, ...]:
        """The simulated GPUs and their MIG devices, by NVML index."""
        return self._m.gpus

    @property
    def proc_root(self) -> pathlib.Path:
        """Where `<pid>/cgroup` files of simulated processes live."""
        return self._proc.path

    # --- system ------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        if self._closed:
            raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
        with self._m.lock:
            self._m.initialized += 1

    def nvmlShutdown(self) -> None:
        with self._m.lock:
            if not self._m.initialized:
                raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
            self._m.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._m.enter_system("nvmlSystemGetDriverVersion")
        return DRIVER_VERSION

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._m.enter_system("nvmlSystemGetNVMLVersion")
        return NVML_VERSION

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._m.enter_system("nvmlSystemGetCudaDriverVersion")
        return CUDA_DRIVER_VERSION

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._m.enter_system("nvmlSystemGetCudaDriverVersion_v2")
        return CUDA_DRIVER_VERSION

    def nvmlErrorString(self, result: int) -> str:
        return pynvml.NVMLError._errcode_to_string.get(result, f"NVML Error with code {result}")

    # --- scenario control ------------------------------------------------------

    def spawn_process(
        self,
        device_uuid: str,
        *,
        pod_uid: str | None,
        container_id: str | None = None,
        used_memory_bytes: int,
        sm_share: float,
        cgroup_layout: CgroupLayout | None = None,
        qos_class: QosClass | None = None,
    ) -> int:
        """Start a compute process on a GPU ("GPU-...") or MIG device ("MIG-...").

        Writes `<proc_root>/<pid>/cgroup` (layout and QoS rotate with the pid unless given;
        `pod_uid=None` = a process outside Kubernetes). Returns the pid. Raises ValueError
        for an unknown device, a MIG-enabled GPU, memory that does not fit, or a bad share.
        """
        node = self._node_for(device_uuid)
        if not 0.0 <= sm_share <= 1.0:
            raise ValueError(f"sm_share must be within [0, 1], got {sm_share}")
        with self._m.lock:
            total, reserved, used = self._m.memory_bytes(node)
            if not 0 <= used_memory_bytes <= total - reserved - used:
                raise ValueError(
                    f"used_memory_bytes={used_memory_bytes} does not fit {device_uuid}: "
                    f"{total - reserved - used} bytes free"
                )
            pid = self._next_pid
            self._next_pid += 1
            container = (
                container_id or hashlib.sha256(f"{self._m.seed}:ctr:{pid}".encode()).hexdigest()
            )
            layout = cgroup_layout or tuple(CgroupLayout)[pid % 3]
            qos = qos_class or tuple(QosClass)[pid // 3 % 3]
            self._proc.write(
                pid, cgroup_text(layout=layout, qos=qos, pod_uid=pod_uid, container_id=container)
            )
            gi = node.mig.gi_id if node.mig else None
            ci = node.mig.ci_id if node.mig else None
            raw = pynvml.c_nvmlProcessInfo_v2_t(
                pid,
                used_memory_bytes,
                UINT_MAX if gi is None else gi,
                UINT_MAX if ci is None else ci,
            )
            self._m.add_process(
                SimProcess(
                    pid=pid,
                    gpu=node.gpu.index,
                    gi_id=gi,
                    ci_id=ci,
                    pod_uid=pod_uid,
                    container_id=container,
                    used_memory_bytes=used_memory_bytes,
                    sm_share=sm_share,
                    activity=workload.activity(self._m.seed, pid),
                    started_at=self._m.now(),
                    info=pynvml.nvmlStructToFriendlyObject(raw),
                )
            )
            return pid

    def kill_process(self, pid: int) -> None:
        """End a simulated process and remove its `<proc_root>/<pid>` directory."""
        with self._m.lock:
            if pid not in self._m.processes:
                raise ValueError(f"no simulated process with pid {pid}")
            self._m.remove_process(pid)
            self._proc.remove(pid)

    def set_process_sm_share(self, pid: int, sm_share: float) -> None:
        """Change how much of its GPU's SM a running process wants (0: it sits idle, alive,
        holding its memory, as a pod between requests does)."""
        if not 0.0 <= sm_share <= 1.0:
            raise ValueError(f"sm_share must be within [0, 1], got {sm_share}")
        with self._m.lock:
            if pid not in self._m.processes:
                raise ValueError(f"no simulated process with pid {pid}")
            self._m.set_sm_share(pid, sm_share)

    def processes(self) -> tuple[SimProcess, ...]:
        """Running simulated processes, by pid."""
        with self._m.lock:
            return tuple(sorted(self._m.processes.values(), key=lambda p: p.pid))

    def inject_xid(self, gpu_index: int, xid: int, *, gi_id: int | None = None) -> None:
        """Deliver an XID critical error event to every event set registered on the GPU."""
        gpu = self._gpu_node(gpu_index)
        if gi_id is not None and all(c.mig.gi_id != gi_id for c in gpu.children):
            raise ValueError(f"GPU {gpu_index} has no GPU instance {gi_id}")
        self._deliver_xid(gpu, xid, gi_id)

    def fail_gpu(self, index: int) -> None:
        """The GPU falls off the bus: XID 79 is delivered, then its handles raise GpuIsLost."""
        gpu = self._gpu_node(index)
        self._deliver_xid(gpu, XID_FALLEN_OFF_BUS, None)
        with self._m.lock:
            self._m.lost.add(index)

    def inject_uncorrectable_ecc(self, index: int) -> None:
        """An uncorrectable (double-bit) ECC error on the GPU's memory: the volatile and
        aggregate DBE counts grow, and the row waits for a remap (H100, A100) or the page
        for retirement (older GPUs) until a reset. The XIDs the driver logs with it (48,
        63) are `inject_xid`'s."""
        self._gpu_node(index)
        with self._m.lock:
            self._m.uncorrectable[index] = self._m.uncorrectable.get(index, 0) + 1

    def restore_gpu(self, index: int) -> None:
        self._gpu_node(index)
        with self._m.lock:
            self._m.lost.discard(index)

    def set_not_supported(
        self, function_or_field: str | int, *, model: str | None = None, index: int | None = None
    ) -> None:
        """Make an nvml* function (or a field id of GetFieldValues) answer NotSupported,
        on every GPU or only on a model (e.g. "H100") or a GPU index (MIG handles included)."""
        if isinstance(function_or_field, str):
            self._check_function(function_or_field)
        elif not 0 < function_or_field < pynvml.NVML_FI_MAX:
            raise ValueError(f"unknown NVML field id {function_or_field}")
        if model is not None and model not in MODELS:
            raise ValueError(f"unknown GPU model {model!r}; valid models: {', '.join(MODELS)}")
        if index is not None:
            self._gpu_node(index)
        self._m.add_not_supported(function_or_field, model, index)

    def set_privileged(self, privileged: bool) -> None:
        """The caller's privileges (CAP_SYS_ADMIN; True by default). Unprivileged, a
        MIG-enabled GPU's memory and processes and GPU instances by id answer
        NoPermission (nvml.h), as they do to gpufleet's exporter, which runs with every
        capability dropped."""
        self._m.privileged = privileged

    def set_hang(self, function_name: str, seconds: float, *, index: int | None = None) -> None:
        """Make a function sleep `seconds` (real time) before answering; 0 removes the hang."""
        self._check_function(function_name)
        if index is not None:
            self._gpu_node(index)
        self._m.set_hang(function_name, seconds, index)

    def clear_injections(self) -> None:
        """Remove every NotSupported and hang injection (lost GPUs stay lost)."""
        self._m.clear_injections()

    def close(self) -> None:
        """End all processes, wake event waiters, remove an owned proc root. Idempotent."""
        with self._m.lock:
            if self._closed:
                return
            self._closed = True
            for pid in list(self._m.processes):
                self.kill_process(pid)
            self._m.initialized = 0
        self._events.close()
        self._proc.close()

    def __enter__(self) -> "SimulatedNvml":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _node_for(self, uuid: str) -> Node:
        node = self._m.by_uuid.get(uuid)
        if node is None:
            raise ValueError(f"no simulated GPU or MIG device with UUID {uuid!r}")
        if node.mig_parent:
            migs = ", ".join(m.uuid for m in node.gpu.mig)
            raise ValueError(f"GPU {uuid} is in MIG mode; use one of its MIG devices: {migs}")
        return node

    def _gpu_node(self, index: int) -> Node:
        if not 0 <= index < len(self._m.nodes):
            raise ValueError(f"no simulated GPU {index}; indices 0..{len(self._m.nodes) - 1}")
        return self._m.nodes[index]

    def _check_function(self, name: str) -> None:
        if not name.startswith("nvml") or not callable(getattr(type(self), name, None)):
            raise ValueError(f"{name!r} is not an NVML function the simulator implements")


def _function_not_found(*args: Any, **kwargs: Any) -> Any:
    """Stands in for every nvml* function the simulator does not implement."""
    raise nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
