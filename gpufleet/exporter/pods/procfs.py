"""Map GPU processes to pod UIDs through `/proc/<pid>/cgroup`.

NVML names the processes on a GPU by host pid; the kubelet puts every container in a
cgroup whose path carries its pod's UID. Reading that path is the only way to split a
shared GPU per pod. It needs the host's pid namespace (hostPID, or the host /proc mounted
at `proc_root`); without it the pids are simply not found and no split happens.

This module only reads; it never guesses a UID from anything but a kubelet cgroup path,
and a process that exits between NVML and the read is skipped, not an error.
"""

import re
from collections.abc import Iterable
from pathlib import Path

# A pod's cgroup directory, in every kubelet layout:
#   cgroupfs driver:  pod<uid>                                  (/kubepods[/<qos>]/pod<uid>)
#   systemd driver:   kubepods[-<qos>]-pod<uid with _ for ->.slice  (also kubelet-kubepods-...)
# A UID is a dashed UUID, or 32 hex digits for static pods (a hash of the manifest).
_POD_DIR = re.compile(
    r"(?:^|-)pod"
    r"(?P<uid>[0-9a-f]{8}(?:[-_][0-9a-f]{4}){3}[-_][0-9a-f]{12}|[0-9a-f]{32})"
    r"(?:\.slice)?$"
)


def pod_uid_from_cgroup(text: str) -> str | None:
    """The pod UID in the text of a `/proc/<pid>/cgroup` file; None if not in a pod.

    Reads cgroup v2 (`0::/path`) and v1 (`<id>:<controllers>:/path`, one line per
    hierarchy) alike, taking the first line whose path is under a `kubepods` cgroup.
    The systemd driver's `_` in the UID is turned back into `-`.
    """
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or "kubepods" not in parts[2]:
            continue
        for directory in parts[2].split("/"):
            if match := _POD_DIR.search(directory):
                return match["uid"].replace("_", "-")
    return None


def _read_cgroup(pid: int, proc_root: Path) -> str | None:
    """The cgroup file of `pid`, or None when the process is gone or unreadable."""
    try:
        return (proc_root / str(pid) / "cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def pod_uid_of(pid: int, *, proc_root: Path = Path("/proc")) -> str | None:
    """The pod UID of process `pid`; None when it is in no pod or has gone."""
    text = _read_cgroup(pid, proc_root)
    return None if text is None else pod_uid_from_cgroup(text)


class PidPodMap:
    """pid -> pod UID, reading each process's cgroup once in its lifetime.

    A process never changes pod, so results (including "not in a pod") are cached until the
    pid stops appearing in `resolve`'s input. Pid reuse within one collection interval is
    not detected. Not thread-safe: one collector owns it.
    """

    __slots__ = ("_cache", "_proc_root")

    def __init__(self, *, proc_root: Path = Path("/proc")) -> None:
        self._proc_root = proc_root
        self._cache: dict[int, str | None] = {}

    def resolve(self, pids: Iterable[int]) -> dict[int, str]:
        """The pod UID of each pid that is in a pod; pids that have gone are skipped.

        Cached pids not in `pids` are evicted, so the cache stays the size of the node's
        current GPU process list.
        """
        wanted = set(pids)
        for gone in self._cache.keys() - wanted:
            del self._cache[gone]
        for pid in wanted - self._cache.keys():
            text = _read_cgroup(pid, self._proc_root)
            if text is not None:  # a vanished process is retried, not cached
                self._cache[pid] = pod_uid_from_cgroup(text)
        return {pid: uid for pid, uid in self._cache.items() if uid is not None}
