"""CPU time and memory of another process, read from /proc (Linux only).

The benchmark reads these for the process under test from the outside, so the numbers are
that process's own and the load generator's cost never leaks into them. Read-only: it must
never signal or otherwise touch the process it watches.
"""

import os
import time
from pathlib import Path

_KIB = 1024
_NS = 1e-9
_CPUCLOCK_SCHED = 2  # the kernel's clock-ID encoding, as clock_getcpuclockid(3) builds it


def cpu_seconds(pid: int) -> float:
    """CPU seconds of a whole process, threads that have ended included, to the nanosecond.

    Reads the process's CPU-time clock (what clock_getcpuclockid(3) returns for it), not
    /proc/<pid>/stat, whose clock ticks (10 ms) are too coarse to split one collection.
    """
    return time.clock_gettime((~pid << 3) | _CPUCLOCK_SCHED)


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """CPU seconds of each live thread of a process, by thread id (from schedstat, in ns)."""
    cpu = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            cpu[int(task.name)] = int((task / "schedstat").read_text().split()[0]) * _NS
        except FileNotFoundError:  # the thread ended while the directory was read
            continue
    return cpu


def memory_bytes(pid: int) -> dict[str, int]:
    """VmRSS (resident now) and VmHWM (peak resident) of a process, in bytes."""
    return status_memory_bytes(Path(f"/proc/{pid}/status").read_text())


def status_memory_bytes(status: str) -> dict[str, int]:
    """VmRSS and VmHWM in bytes from the text of a /proc/<pid>/status (one a process printed
    of itself, say); absent keys are left out."""
    values = {}
    for line in status.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) * _KIB  # the kernel reports kB
    return values


def smaps_rollup_bytes(pid: int) -> dict[str, int]:
    """A process's memory summed over its mappings, from /proc/<pid>/smaps_rollup, in bytes.

    Pss (proportional set size) charges each shared page to the processes sharing it in
    equal parts, so a library another process also maps costs each of them half;
    Pss_Anon is the heap and stacks, Pss_File the mapped files (code, shared libraries).
    """
    values = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, _, rest = line.partition(":")
        values[key] = int(rest.split()[0]) * _KIB
    return values


def machine_info() -> dict[str, str | int]:
    """CPU model and logical core count of this machine."""
    model = "unknown"  # some architectures (arm64) have no "model name" line
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.partition(":")[2].strip()
            break
    return {"cpu_model": model, "cores": os.cpu_count() or 0}
