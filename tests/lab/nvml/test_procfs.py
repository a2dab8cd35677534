"""cgroup files of simulated processes, in the kubelet's real layouts."""

from collections.abc import Iterator

import pytest

from gpufleet.lab.nvml.api import SimulatedNvml
from gpufleet.lab.nvml.procfs import CgroupLayout, QosClass, cgroup_text

POD = "8f0c1c1e-3b7a-4d2e-9a51-2f6f3c1d9e0a"
SLICE_POD = POD.replace("-", "_")
CTR = "a" * 64


@pytest.mark.parametrize(
    ("layout", "qos", "expected"),
    [
        (
            CgroupLayout.SYSTEMD_V2,
            QosClass.BURSTABLE,
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SLICE_POD}.slice"
            f"/cri-containerd-{CTR}.scope\n",
        ),
        (
            CgroupLayout.SYSTEMD_V2,
            QosClass.BESTEFFORT,
            f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SLICE_POD}.slice"
            f"/cri-containerd-{CTR}.scope\n",
        ),
        (
            CgroupLayout.SYSTEMD_V2,
            QosClass.GUARANTEED,
            f"0::/kubepods.slice/kubepods-pod{SLICE_POD}.slice/cri-containerd-{CTR}.scope\n",
        ),
        (
            CgroupLayout.CGROUPFS_V2,
            QosClass.BESTEFFORT,
            f"0::/kubepods/besteffort/pod{POD}/{CTR}\n",
        ),
        (CgroupLayout.CGROUPFS_V2, QosClass.GUARANTEED, f"0::/kubepods/pod{POD}/{CTR}\n"),
    ],
    ids=[
        "systemd-v2-burstable",
        "systemd-v2-besteffort",
        "systemd-v2-guaranteed",
        "cgroupfs-v2-besteffort",
        "cgroupfs-v2-guaranteed",
    ],
)
def test_single_line_layouts(layout: CgroupLayout, qos: QosClass, expected: str) -> None:
    assert cgroup_text(layout=layout, qos=qos, pod_uid=POD, container_id=CTR) == expected


def test_v1_is_one_line_per_controller_then_an_empty_unified_line() -> None:
    text = cgroup_text(
        layout=CgroupLayout.CGROUPFS_V1, qos=QosClass.BURSTABLE, pod_uid=POD, container_id=CTR
    )
    lines = text.splitlines()
    assert lines[0] == f"12:hugetlb:/kubepods/burstable/pod{POD}/{CTR}"
    assert f"11:memory:/kubepods/burstable/pod{POD}/{CTR}" in lines
    assert f"1:name=systemd:/kubepods/burstable/pod{POD}/{CTR}" in lines
    assert lines[-1] == "0::/"
    assert len(lines) == 13


def test_process_outside_kubernetes() -> None:
    text = cgroup_text(
        layout=CgroupLayout.SYSTEMD_V2, qos=QosClass.GUARANTEED, pod_uid=None, container_id=CTR
    )
    assert text == "0::/system.slice/sim-batch.service\n"


@pytest.fixture
def sim(tmp_path) -> Iterator[SimulatedNvml]:
    with SimulatedNvml("1xH100", proc_root=tmp_path / "proc") as lib:
        lib.nvmlInit()
        yield lib


def test_files_follow_processes_and_layouts_rotate(sim: SimulatedNvml, tmp_path) -> None:
    assert sim.proc_root == tmp_path / "proc"
    uuid = sim.devices[0].uuid
    pids = [
        sim.spawn_process(uuid, pod_uid=POD, used_memory_bytes=0, sm_share=0.01) for _ in range(9)
    ]
    texts = [(sim.proc_root / str(p) / "cgroup").read_text() for p in pids]
    assert len(set(texts)) == 9  # every (layout, QoS) pair once
    assert all(POD in t or SLICE_POD in t for t in texts)
    pinned = sim.spawn_process(
        uuid,
        pod_uid=POD,
        container_id=CTR,
        used_memory_bytes=0,
        sm_share=0.01,
        cgroup_layout=CgroupLayout.CGROUPFS_V2,
        qos_class=QosClass.GUARANTEED,
    )
    assert (sim.proc_root / str(pinned) / "cgroup").read_text() == f"0::/kubepods/pod{POD}/{CTR}\n"
    sim.kill_process(pids[0])
    assert not (sim.proc_root / str(pids[0])).exists()
    sim.close()
    assert sim.proc_root.exists()  # a caller-owned root is kept ...
    assert list(sim.proc_root.iterdir()) == []  # ... but emptied


def test_an_owned_proc_root_is_removed_on_close() -> None:
    lib = SimulatedNvml("1xH100")
    lib.nvmlInit()
    lib.spawn_process(lib.devices[0].uuid, pod_uid=POD, used_memory_bytes=0, sm_share=0.1)
    root = lib.proc_root
    assert root.exists()
    lib.close()
    assert not root.exists()
