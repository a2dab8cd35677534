"""Device discovery against the simulated NVML behind the real adapter."""

from collections import Counter
from collections.abc import Iterator

import pytest

from gpufleet.lab.nvml.api import SimulatedNvml
from gpufleet.plugin.nvml.discovery import discover

FLEET = "6xH100+2xH100:mig=7x1g.10gb"


@pytest.fixture
def sim(tmp_path) -> Iterator[SimulatedNvml]:
    with SimulatedNvml(FLEET, proc_root=tmp_path / "proc") as lib:
        lib.nvmlInit()
        yield lib


def test_gpus_identity_memory_numa_and_compute_capability(sim: SimulatedNvml) -> None:
    node = discover(sim)
    assert [g.index for g in node.gpus] == list(range(8))
    assert [g.uuid for g in node.gpus] == [d.uuid for d in sim.devices]
    first = node.gpus[0]
    assert first.name == "NVIDIA H100 80GB HBM3"
    assert first.minor == sim.devices[0].minor
    assert first.memory_mib > 80_000
    assert first.compute_capability == (9, 0)
    assert [g.numa_node for g in node.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert (node.driver_version, node.cuda_driver_version) == ("550.90.07", 12040)


def test_mig_devices_carry_nvml_profile_names(sim: SimulatedNvml) -> None:
    node = discover(sim)
    assert [g.mig_enabled for g in node.gpus] == [False] * 6 + [True] * 2
    assert all(g.migs == () for g in node.gpus[:6])
    for gpu, sim_gpu in zip(node.gpus[6:], sim.devices[6:], strict=True):
        assert [m.profile for m in gpu.migs] == ["1g.10gb"] * 7
        assert [m.index for m in gpu.migs] == list(range(7))
        assert [m.uuid for m in gpu.migs] == [m.uuid for m in sim_gpu.mig]
        assert len({m.gi_id for m in gpu.migs}) == 7
        assert all(9_000 < m.memory_mib < 11_000 for m in gpu.migs)


def test_nvlink_pairs_outscore_pcie(sim: SimulatedNvml) -> None:
    links = discover(sim).links
    assert set(links) == {(i, j) for i in range(8) for j in range(i + 1, 8)}
    assert all(score >= 10 for score in links.values())


def test_without_nvlink_pcie_distance_scores(sim: SimulatedNvml) -> None:
    sim.set_not_supported("nvmlDeviceGetP2PStatus")
    links = discover(sim).links
    assert links[(0, 1)] == 3  # one PCIe switch
    assert links[(0, 2)] == 1  # same NUMA node
    assert (0, 7) not in links  # across sockets: 0


def test_memory_nvml_cannot_tell_is_0_not_a_gpu_left_out(sim: SimulatedNvml) -> None:
    """NVIDIA's plugin ignores an error reading a device's memory (its commit e3323ce: some
    systems answer NotSupported). Discovery raised, and the node's discovery failed."""
    sim.set_not_supported("nvmlDeviceGetMemoryInfo", index=6)  # a MIG-enabled GPU
    node = discover(sim)
    assert [g.index for g in node.gpus] == list(range(8))
    assert node.gpus[6].memory_mib == 0 and len(node.gpus[6].migs) == 7
    assert {m.memory_mib for m in node.gpus[6].migs} == {0}  # its MIG handles: same index
    assert node.gpus[5].memory_mib > 80_000


def test_an_unprivileged_plugin_serves_a_mig_gpu_it_cannot_read_whole(sim) -> None:
    """Without CAP_SYS_ADMIN (a plugin not given MIG access: migStrategy none), a
    MIG-enabled GPU's memory answers NoPermission (nvml.h): the GPU was left out."""
    sim.set_privileged(False)
    node = discover(sim)
    assert [g.index for g in node.gpus] == list(range(8))
    assert node.gpus[6].memory_mib == 0
    assert all(m.memory_mib > 0 for m in node.gpus[6].migs)  # instances answer for themselves


def test_numa_not_supported_is_unknown(sim: SimulatedNvml) -> None:
    sim.set_not_supported("nvmlDeviceGetNumaNodeId", index=3)
    node = discover(sim)
    assert node.gpus[3].numa_node is None
    assert node.gpus[2].numa_node == 0


def test_lost_gpu_is_left_out_and_counted(sim: SimulatedNvml) -> None:
    sim.fail_gpu(2)
    errors: Counter[str] = Counter()
    node = discover(sim, errors=errors)
    assert [g.index for g in node.gpus] == [0, 1, 3, 4, 5, 6, 7]
    assert errors["gpu_lost"] == 1
    assert all(2 not in pair for pair in node.links)
    assert node.links[(0, 1)] >= 10  # the others keep their topology


def test_topology_error_leaves_that_pair_at_zero(sim: SimulatedNvml) -> None:
    sim.set_not_supported("nvmlDeviceGetP2PStatus", index=5)
    sim.set_not_supported("nvmlDeviceGetTopologyCommonAncestor", index=5)
    errors: Counter[str] = Counter()
    node = discover(sim, errors=errors)
    assert len(node.gpus) == 8
    assert all(5 not in pair for pair in node.links)
    assert node.links[(0, 1)] >= 10
    assert errors["nvml_error"] == 7  # one per pair with GPU 5


def test_mig_capability_is_what_nvml_reports(tmp_path) -> None:
    """GFD's nvidia.com/mig.capable: H100s report a MIG mode, an L4 does not (issue 16 §3)."""
    with SimulatedNvml("1xH100+1xL4", proc_root=tmp_path / "proc") as lib:
        lib.nvmlInit()
        node = discover(lib)
    assert [(g.name, g.mig_capable) for g in node.gpus] == [
        ("NVIDIA H100 80GB HBM3", True),
        ("NVIDIA L4", False),
    ]


def test_mig_attributes_come_from_nvml(sim: SimulatedNvml) -> None:
    """GFD labels a MIG type with NVML's attributes (issue 16 §3)."""
    mig = discover(sim).gpus[6].migs[0]
    assert mig.attributes is not None
    assert (mig.attributes.gi_slices, mig.attributes.ci_slices) == (1, 1)
    assert mig.attributes.multiprocessors > 0
    assert 9_000 < mig.attributes.memory_mb < 11_000


def test_pci_bus_ids_are_nvmls(sim: SimulatedNvml) -> None:
    """The sysfs key of GFD's nvidia.com/gpu.mode (issue 16 §3)."""
    node = discover(sim)
    assert [g.pci_bus_id for g in node.gpus] == [d.pci_bus_id for d in sim.devices]
    assert node.gpus[0].pci_bus_id.count(":") == 2
