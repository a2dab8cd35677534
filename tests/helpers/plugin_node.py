"""Scenario builders for the plugin's pure-core tests: `NodeGpus` by hand or from a fleet spec."""

from gpufleet.lab.nvml.fleet import parse_fleet
from gpufleet.lab.nvml.models import MODELS
from gpufleet.plugin.core.model import GpuInfo, MigInfo, NodeGpus

H100_MIB = 81559


def gpu_uuid(index: int) -> str:
    return f"GPU-00000000-0000-0000-0000-{index:012d}"


def mig_uuid(gpu_index: int, index: int) -> str:
    return f"MIG-00000000-0000-0000-{gpu_index:04d}-{index:012d}"


def mig(gpu_index: int, index: int, profile: str = "1g.10gb", memory_mib: int = 9856) -> MigInfo:
    return MigInfo(
        uuid=mig_uuid(gpu_index, index),
        profile=profile,
        gi_id=index + 7,
        ci_id=0,
        index=index,
        memory_mib=memory_mib,
    )


def gpu(
    index: int,
    *,
    profiles: tuple[str, ...] | None = None,
    memory_mib: int = H100_MIB,
    compute_capability: tuple[int, int] = (9, 0),
) -> GpuInfo:
    """A GPU; `profiles` given (even empty) means MIG-enabled with those MIG devices."""
    return GpuInfo(
        index=index,
        uuid=gpu_uuid(index),
        minor=index,
        name="NVIDIA H100 80GB HBM3",
        memory_mib=memory_mib,
        numa_node=0 if index < 4 else 1,
        mig_enabled=profiles is not None,
        migs=tuple(mig(index, j, p) for j, p in enumerate(profiles or ())),
        compute_capability=compute_capability,
    )


def node(*gpus: GpuInfo, links: dict[tuple[int, int], int] | None = None) -> NodeGpus:
    return NodeGpus(gpus=gpus, links=links or {})


def islands(*groups: tuple[int, ...], nvlink: int = 180, pcie: int = 1) -> dict:
    """Links for NVLink islands: `nvlink` inside a group, `pcie` between groups."""
    group_of = {i: g for g, members in enumerate(groups) for i in members}
    indexes = sorted(group_of)
    return {
        (a, b): nvlink if group_of[a] == group_of[b] else pcie
        for a in indexes
        for b in indexes
        if a < b
    }


def from_fleet(spec: str) -> NodeGpus:
    """A node from a simulator fleet spec, for realistic UUIDs and MIG layouts."""
    gpus = []
    for d in parse_fleet(spec):
        model = MODELS[d.model]
        memory = {p.name: p.memory_mib for p in model.mig_profiles}
        gpus.append(
            GpuInfo(
                index=d.index,
                uuid=d.uuid,
                minor=d.minor,
                name=d.name,
                memory_mib=model.memory_mib,
                numa_node=d.numa_node,
                mig_enabled=d.mig_enabled,
                migs=tuple(
                    MigInfo(
                        uuid=m.uuid,
                        profile=m.profile,
                        gi_id=m.gi_id,
                        ci_id=m.ci_id,
                        index=m.index,
                        memory_mib=memory[m.profile],
                    )
                    for m in d.mig
                ),
                compute_capability=model.compute_capability,
            )
        )
    return NodeGpus(gpus=tuple(gpus))
