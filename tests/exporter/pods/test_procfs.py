"""Pod UIDs from /proc/<pid>/cgroup in every kubelet layout."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.exporter.pods.procfs import PidPodMap, pod_uid_from_cgroup, pod_uid_of
from gpufleet.lab.nvml.procfs import CgroupLayout, QosClass, cgroup_text

UID = "6f1c2b3a-4d5e-4f60-8a7b-9c0d1e2f3a4b"
SD_UID = UID.replace("-", "_")
STATIC_UID = "0123456789abcdef0123456789abcdef"
CTR = "a1b2c3d4e5f6" * 5 + "a1b2"  # 64 hex, a container id

CGROUPS = [
    pytest.param(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SD_UID}.slice/"
        f"cri-containerd-{CTR}.scope\n",
        UID,
        id="v2 systemd burstable containerd",
    ),
    pytest.param(
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SD_UID}.slice/"
        f"crio-{CTR}.scope\n",
        UID,
        id="v2 systemd besteffort cri-o",
    ),
    pytest.param(
        f"0::/kubepods.slice/kubepods-pod{SD_UID}.slice/docker-{CTR}.scope\n",
        UID,
        id="v2 systemd guaranteed (no QoS slice) docker",
    ),
    pytest.param(
        f"0::/kubepods/besteffort/pod{UID}/{CTR}\n",
        UID,
        id="v2 cgroupfs besteffort",
    ),
    pytest.param(f"0::/kubepods/pod{UID}/{CTR}\n", UID, id="v2 cgroupfs guaranteed"),
    pytest.param(
        "".join(
            f"{n}:{ctl}:/kubepods/burstable/pod{UID}/{CTR}\n"
            for n, ctl in [(12, "memory"), (11, "cpu,cpuacct"), (3, "devices")]
        )
        + f"1:name=systemd:/kubepods/burstable/pod{UID}/{CTR}\n",
        UID,
        id="v1 cgroupfs multi-line",
    ),
    pytest.param(
        f"12:pids:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SD_UID}.slice/"
        f"cri-containerd-{CTR}.scope\n"
        f"0::/\n",
        UID,
        id="v1 systemd with a hybrid v2 root line",
    ),
    pytest.param(
        f"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
        f"kubelet-kubepods-besteffort-pod{SD_UID}.slice/cri-containerd-{CTR}.scope\n",
        UID,
        id="v2 systemd under a kubelet cgroup root (kind)",
    ),
    pytest.param(
        f"0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{STATIC_UID}.slice/cri-containerd-{CTR}.scope\n",
        STATIC_UID,
        id="static pod: 32-hex UID",
    ),
    pytest.param(
        f"0::/kubepods/burstable/pod{UID}\n",
        UID,
        id="pod cgroup itself (no container level)",
    ),
    pytest.param("0::/system.slice/containerd.service\n", None, id="host daemon"),
    pytest.param("0::/user.slice/user-1000.slice/session-3.scope\n", None, id="login session"),
    pytest.param(f"0::/docker/{CTR}\n", None, id="plain docker container, no pod"),
    pytest.param(f"0::/system.slice/pod{UID}.slice\n", None, id="pod-like name outside kubepods"),
    pytest.param(f"0::/kubepods/burstable/pod{UID[:-1]}/{CTR}\n", None, id="truncated UID"),
    pytest.param("", None, id="empty file"),
    pytest.param("garbage without colons\n", None, id="malformed line"),
]


@pytest.mark.parametrize(("text", "want"), CGROUPS)
def test_pod_uid_from_cgroup(text: str, want: str | None) -> None:
    assert pod_uid_from_cgroup(text) == want


@pytest.mark.parametrize("qos", list(QosClass), ids=str)
@pytest.mark.parametrize("layout", list(CgroupLayout), ids=str)
def test_reads_every_layout_the_simulator_writes(layout: CgroupLayout, qos: QosClass) -> None:
    text = cgroup_text(layout=layout, qos=qos, pod_uid=UID, container_id=CTR)
    assert pod_uid_from_cgroup(text) == UID
    assert (
        pod_uid_from_cgroup(cgroup_text(layout=layout, qos=qos, pod_uid=None, container_id=CTR))
        is None
    )


def _proc(root: Path, pid: int, text: str) -> None:
    (root / str(pid)).mkdir()
    (root / str(pid) / "cgroup").write_text(text, encoding="utf-8")


def test_pod_uid_of_reads_the_file(tmp_path: Path) -> None:
    _proc(tmp_path, 42, f"0::/kubepods/besteffort/pod{UID}/{CTR}\n")
    assert pod_uid_of(42, proc_root=tmp_path) == UID
    assert pod_uid_of(43, proc_root=tmp_path) is None  # vanished


def test_pid_pod_map_caches_and_evicts(tmp_path: Path) -> None:
    other = "11111111-2222-4333-8444-555555555555"
    _proc(tmp_path, 10, f"0::/kubepods/pod{UID}/{CTR}\n")
    _proc(tmp_path, 11, "0::/system.slice/nvidia-persistenced.service\n")
    _proc(tmp_path, 12, f"0::/kubepods/pod{other}/{CTR}\n")
    pods = PidPodMap(proc_root=tmp_path)

    assert pods.resolve([10, 11, 12, 13]) == {10: UID, 12: other}

    # A pid's cgroup never changes, so a cached answer is not read again ...
    (tmp_path / "10" / "cgroup").write_text(f"0::/kubepods/pod{other}/{CTR}\n")
    assert pods.resolve([10, 12]) == {10: UID, 12: other}
    # ... until the pid drops out of NVML's list; a reused pid is then read afresh.
    assert pods.resolve([12]) == {12: other}
    assert pods.resolve([10, 12]) == {10: other, 12: other}

    # A process that had vanished (13) is read once it exists.
    _proc(tmp_path, 13, f"0::/kubepods/pod{UID}/{CTR}\n")
    assert pods.resolve([13]) == {13: UID}


_CGROUP_LINE = st.one_of(
    st.text(max_size=60),
    st.builds(
        "{}:{}:/{}".format,
        st.text("0123456789", max_size=3),
        st.text("cpu,memorypids", max_size=12),
        st.text("kubepods.slice/-_burstable/pod0123456789abcdef:", max_size=80),
    ),
)


@given(st.lists(_CGROUP_LINE, max_size=5).map("\n".join))
def test_any_cgroup_text_gives_a_uid_or_none(text: str) -> None:
    """A process's cgroup file, whatever it holds: a pod's UID (no systemd '_' left in
    it) or None, never an exception (one process must not fail a collection)."""
    uid = pod_uid_from_cgroup(text)
    assert uid is None or (uid and "_" not in uid)
