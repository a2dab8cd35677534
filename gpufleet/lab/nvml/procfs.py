"""A fake `/proc` for simulated processes: `<root>/<pid>/cgroup` in real kubelet layouts.

Pod attribution reads `/proc/<pid>/cgroup` to find a process's pod; the simulator writes the
same file shapes the kubelet's cgroup drivers produce (systemd and cgroupfs, cgroup v2 and
v1) so that parsing is exercised against real layouts. `cgroup_text` is pure; `ProcRoot`
owns the directory. It never touches the real `/proc`.
"""

import pathlib
import shutil
import tempfile
from enum import StrEnum


class CgroupLayout(StrEnum):
    """How the node's kubelet lays out cgroups."""

    SYSTEMD_V2 = "systemd-v2"  # cgroupDriver=systemd, unified hierarchy
    CGROUPFS_V2 = "cgroupfs-v2"  # cgroupDriver=cgroupfs, unified hierarchy
    CGROUPFS_V1 = "cgroupfs-v1"  # cgroupDriver=cgroupfs, legacy per-controller hierarchies


class QosClass(StrEnum):
    GUARANTEED = "guaranteed"  # no QoS element in the path
    BURSTABLE = "burstable"
    BESTEFFORT = "besteffort"


# Controllers of a v1 (hybrid) host, as numbered in /proc/<pid>/cgroup.
_V1_CONTROLLERS = (
    (12, "hugetlb"),
    (11, "memory"),
    (10, "devices"),
    (9, "cpu,cpuacct"),
    (8, "pids"),
    (7, "blkio"),
    (6, "net_cls,net_prio"),
    (5, "freezer"),
    (4, "perf_event"),
    (3, "cpuset"),
    (2, "misc"),
    (1, "name=systemd"),
)
NON_POD_CGROUP = "0::/system.slice/sim-batch.service\n"


def cgroup_text(
    *, layout: CgroupLayout, qos: QosClass, pod_uid: str | None, container_id: str
) -> str:
    """The content of /proc/<pid>/cgroup for a container process (None: not in a pod)."""
    if pod_uid is None:
        return NON_POD_CGROUP
    if layout is CgroupLayout.SYSTEMD_V2:
        slice_uid = pod_uid.replace("-", "_")
        if qos is QosClass.GUARANTEED:
            path = f"/kubepods.slice/kubepods-pod{slice_uid}.slice"
        else:
            path = f"/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{slice_uid}.slice"
        return f"0::{path}/cri-containerd-{container_id}.scope\n"
    qos_part = "" if qos is QosClass.GUARANTEED else f"/{qos}"
    path = f"/kubepods{qos_part}/pod{pod_uid}/{container_id}"
    if layout is CgroupLayout.CGROUPFS_V2:
        return f"0::{path}\n"
    # A hybrid host: the unified hierarchy is mounted but holds nothing for the pod.
    return "".join(f"{n}:{c}:{path}\n" for n, c in _V1_CONTROLLERS) + "0::/\n"


class ProcRoot:
    """Owns `<root>/<pid>/cgroup` files; a root it created itself is removed by `close()`."""

    def __init__(self, root: pathlib.Path | None) -> None:
        self._owned = root is None
        self.path = (
            pathlib.Path(tempfile.mkdtemp(prefix="gpufleet-sim-proc-")) if root is None else root
        )
        self.path.mkdir(parents=True, exist_ok=True)

    def write(self, pid: int, text: str) -> None:
        directory = self.path / str(pid)
        directory.mkdir(exist_ok=True)
        (directory / "cgroup").write_text(text)

    def remove(self, pid: int) -> None:
        shutil.rmtree(self.path / str(pid), ignore_errors=True)

    def close(self) -> None:
        if self._owned:
            shutil.rmtree(self.path, ignore_errors=True)
