"""Per-process SM use from NVML's samples, on answers in nvmlDeviceGetProcessUtilization's
shape from a stand-in (what is under test is how samples become each pid's value, not NVML):
a sample only for a process that used the SM in a period, each stamped by NVML's clock."""

import logging
from collections import Counter
from types import SimpleNamespace

import pynvml

from gpufleet.exporter.core.samples import Entity
from gpufleet.exporter.nvml.calls import NvmlCalls
from gpufleet.exporter.nvml.discovery import Target
from gpufleet.exporter.nvml.processes import ProcessReader

S = 1_000_000  # µs
TARGET = Target(
    entity=Entity(gpu=0, uuid="GPU-0", pci_bus_id="0", model_name="H100"),
    handle=object(),
    labels={},
    key="GPU-0",
    model="H100",
)


class Answers:
    """Pids 1 and 2 run; `samples` holds what NVML has sampled, (pid, SM %, µs stamp)."""

    def __init__(self) -> None:
        self.samples: list[tuple[int, int, int]] = []

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [SimpleNamespace(pid=pid, usedGpuMemory=1) for pid in (1, 2)]

    def nvmlDeviceGetProcessUtilization(self, handle, since):
        newer = [
            SimpleNamespace(pid=pid, smUtil=sm, timeStamp=ts)
            for pid, sm, ts in self.samples
            if ts > since
        ]
        if not newer:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return newer


def test_processes_stamped_apart_each_keep_their_value_until_idle_past_the_bound() -> None:
    """NVML may stamp each process apart within a period: a collection between two stamps
    found pid 2 missing from an answer with new samples, and read 0 for a busy process."""
    lib = Answers()
    reader = ProcessReader(lib, NvmlCalls(logging.getLogger(__name__)))

    def sm(at: float) -> dict[int, float]:
        return reader.read(TARGET, Counter(), at)[1]

    lib.samples = [(1, 50, 1 * S), (2, 40, 1 * S + S // 10)]
    assert sm(1.2) == {1: 50.0, 2: 40.0}
    lib.samples.append((1, 50, 2 * S))  # pid 2's next stamp is not in yet
    assert sm(2.05) == {1: 50.0, 2: 40.0}
    lib.samples.append((1, 50, 4 * S))  # pid 2 sampled no more for 2.9 s: idle
    assert sm(4.05) == {1: 50.0}


def test_a_wall_clock_stepped_back_reads_the_new_samples() -> None:
    """NVML stamps by the wall clock. Stepped back an hour (an NTP step, a VM resumed),
    the stamp asked from stayed an hour ahead of every new sample: none came, and a busy
    process read 0 for the hour. A sample stamped ahead of the clock is from before it."""
    lib, wall = Answers(), [10_000.0]
    reader = ProcessReader(lib, NvmlCalls(logging.getLogger(__name__)), wall_clock=lambda: wall[0])

    def sm(at: float) -> dict[int, float]:
        return reader.read(TARGET, Counter(), at)[1]

    lib.samples = [(1, 50, 9_999 * S)]
    assert sm(1.0) == {1: 50.0}
    wall[0] -= 3600  # the step; NVML's buffer still holds the sample stamped before it
    for at in (2.0, 3.0, 4.0, 5.0):
        wall[0] += 1.0
        lib.samples.append((1, 70, int((wall[0] - 0.5) * S)))
        assert sm(at) == {1: 70.0}
