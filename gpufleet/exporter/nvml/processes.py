"""Per-process sampling for the NVML reader: running compute processes and their SM use.

Exists because process utilization is read incrementally (NVML returns samples newer than a
timestamp, so the last one seen is kept per GPU and MIG instance) and because a MIG
instance's processes may have to be taken from its parent GPU's lists. Keeping that here lets
`reader` treat processes as one more read.

NVML samples only the processes that used the GPU in a sample period (nvml.h: "that had some
non-zero utilization during the last sample period"; NotFound when none did). A running
process whose last sample is older than the entity's newest by IDLE_AFTER_SECONDS used
none since: 0, not its last busy value, which an idle pod sharing a GPU kept for as long
as it lived. An answer with no new sample may only mean no period ended since the last
call (a collection faster than NVML's sampling): the last values stand, for at most
IDLE_AFTER_SECONDS.

NVML stamps the samples by the wall clock. Where it steps back (an NTP step, a VM
resumed), the last stamp seen is ahead of every new one: asking for samples newer than it
found none for as long as the step, and every busy process read 0. A stamp asked from
that is ahead of the clock is taken back to IDLE_AFTER_SECONDS before it, and a sample
stamped ahead of it (by more than IDLE_AFTER_SECONDS) is from before the step: not now.

It must never attribute a parent GPU's process to a MIG instance it does not run on (the
fallback matches GPU and compute instance ids), must keep "NVML could not tell" apart from
"no processes" all the way into the snapshot (MISSING here, None in `EntitySample`), so
that attribution never turns an unknown into a pod using 0, and never logs: failures go
through the given `NvmlCalls`.
"""

import math
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pynvml

from gpufleet.exporter.core.samples import ProcessSample
from gpufleet.exporter.nvml.calls import MISSING, NvmlCalls
from gpufleet.exporter.nvml.discovery import Target

# Past NVML's longest sample period (1 s, "between 1 second and 1/6 second depending on the
# product"): this long without a new sample, no process used the GPU.
IDLE_AFTER_SECONDS = 2.0


class ProcessReader:
    """Reads the processes of GPUs and MIG instances; remembers each one's last sample time."""

    def __init__(
        self, lib: Any, calls: NvmlCalls, *, wall_clock: Callable[[], float] = time.time
    ) -> None:
        self._lib = lib
        self._calls = calls
        self._wall = wall_clock
        self._seen_us: dict[str, int] = {}  # last process-utilization timestamp
        # Each entity's latest sample per pid, (SM util, its timestamp): NVML answers only
        # samples newer than the last call, and none when its sampling period is longer
        # than the collection's.
        self._last_util: dict[str, dict[int, tuple[float, int]]] = {}
        self._sampled_at: dict[str, float] = {}  # when an answer last held a new sample

    def read(self, target: Target, errors: Counter[str], now: float) -> tuple[Any, Any]:
        """(running compute processes, pid -> SM util %) of a handle at `now` (monotonic
        seconds); MISSING where NVML could not tell. A pid left out used no SM."""
        running = self._calls.read(
            errors,
            "nvmlDeviceGetComputeRunningProcesses",
            target.model,
            self._lib.nvmlDeviceGetComputeRunningProcesses,
            target.handle,
        )
        idle_us = IDLE_AFTER_SECONDS * 1e6
        now_us = self._wall() * 1e6
        ahead_us = now_us + idle_us  # a stamp past this is from before a step back
        since = self._seen_us.get(target.key, 0)
        if since > now_us:  # the clock stepped back past it: from the samples of now
            since = int(now_us - idle_us)
        samples = self._calls.read(
            errors,
            "nvmlDeviceGetProcessUtilization",
            target.model,
            _process_utilization,
            self._lib,
            target.handle,
            since,
        )
        if samples is MISSING:
            return running, MISSING
        if samples:
            self._sampled_at[target.key] = now
        # none new may only mean no period ended yet: the last values stand a while
        recent = now - self._sampled_at.get(target.key, -math.inf) < IDLE_AFTER_SECONDS
        kept = dict(self._last_util.get(target.key, {})) if recent else {}
        for sample in sorted(samples, key=lambda s: s.timeStamp):  # the latest wins
            if sample.timeStamp > ahead_us:
                continue
            kept[sample.pid] = (float(sample.smUtil), sample.timeStamp)
            since = max(since, sample.timeStamp)
        # Per pid, by NVML's own clock: a pid whose last sample is older than the newest by
        # more than IDLE_AFTER_SECONDS used none since (NVML may stamp each process apart,
        # so one answer missing a pid says nothing alone).
        kept = {
            pid: (u, ts) for pid, (u, ts) in kept.items() if since - ts < idle_us and ts <= ahead_us
        }
        if running is not MISSING:  # forget processes that ended
            alive = {p.pid for p in running}
            kept = {pid: v for pid, v in kept.items() if pid in alive}
        self._seen_us[target.key] = since
        self._last_util[target.key] = kept
        return running, {pid: u for pid, (u, _) in kept.items()}

    def read_mig(
        self,
        mig: Target,
        parent_running: Any,
        parent_utilization: Any,
        errors: Counter[str],
        now: float,
    ) -> tuple[Any, Any]:
        """A MIG instance's processes; where its own handle cannot tell, the parent's lists,
        matched by GPU and compute instance id."""
        running, utilization = self.read(mig, errors, now)
        instance = mig.entity.mig
        if running is MISSING and parent_running is not MISSING:
            running = [
                p
                for p in parent_running
                if (p.gpuInstanceId, p.computeInstanceId) == (instance.gi_id, instance.ci_id)
            ]
        if utilization is MISSING:
            utilization = parent_utilization
        return running, utilization

    def forget(self, keys: set[str]) -> None:
        """Drop the sample times of entities whose UUID is not in `keys`."""
        self._seen_us = {k: v for k, v in self._seen_us.items() if k in keys}
        self._last_util = {k: v for k, v in self._last_util.items() if k in keys}
        self._sampled_at = {k: v for k, v in self._sampled_at.items() if k in keys}


def process_samples(running: Any, utilization: Any) -> tuple[ProcessSample, ...] | None:
    """The `read` results as ProcessSamples by pid; None when the running processes are
    MISSING. MISSING utilization leaves each process's `sm_util_percent` None; a process
    the answered utilization leaves out used no SM."""
    if running is MISSING:
        return None
    return tuple(
        ProcessSample(
            pid=p.pid,
            used_memory_bytes=None if p.usedGpuMemory is None else int(p.usedGpuMemory),
            sm_util_percent=None if utilization is MISSING else utilization.get(p.pid, 0.0),
        )
        for p in sorted(running, key=lambda p: p.pid)
    )


def _process_utilization(lib: Any, handle: Any, since_us: int) -> list[Any]:
    """Per-process utilization samples newer than `since_us`; NVML says NotFound for none."""
    try:
        return list(lib.nvmlDeviceGetProcessUtilization(handle, since_us))
    except pynvml.NVMLError_NotFound:
        return []
