"""GPU model tables for the simulator: what each supported GPU model is and can do.

Pure data. Values are those a real driver (R550) reports for the part, so adapters see
realistic names, limits and MIG geometry; where a quantity varies by board, a typical value
is used. Capability flags decide which NVML calls answer NotSupported on the model.
"""

from dataclasses import dataclass

import pynvml

from gpufleet.core.mig_geometry import INSTANCES_PER_GPU_80GB


@dataclass(frozen=True, slots=True, kw_only=True)
class MigProfile:
    """One GPU instance profile (with its full-size compute instance)."""

    name: str  # NVIDIA's profile name, e.g. "1g.10gb"
    profile: int  # NVML_GPU_INSTANCE_PROFILE_*: the argument of GetGpuInstanceProfileInfo
    profile_id: int  # the profile's id as nvidia-smi shows it (profile info `.id`)
    slices: int  # compute (GPC) slices
    memory_slices: int  # memory slices: the placement size
    starts: tuple[int, ...]  # allowed placement starts, in memory slices
    max_count: int  # instances that fit on one GPU
    memory_mib: int  # instance memory as NVML reports it
    multiprocessors: int
    copy_engines: int
    decoders: int
    jpegs: int
    ofas: int


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuModel:
    """One GPU model."""

    key: str  # fleet-spec name, e.g. "H100"
    name: str  # nvmlDeviceGetName
    arch: int  # NVML_DEVICE_ARCH_*
    compute_capability: tuple[int, int]
    memory_mib: int  # total framebuffer
    reserved_mib: int  # driver-reserved framebuffer (nvmlMemory_v2.reserved)
    multiprocessors: int
    pci_device_id: int
    pci_subsystem_id: int
    power_limit_mw: int
    idle_power_mw: int
    max_sm_clock_mhz: int
    idle_sm_clock_mhz: int
    max_mem_clock_mhz: int
    max_video_clock_mhz: int
    idle_temp_c: int
    load_temp_c: int
    nvlinks: int  # 0 = no NVLink: NVLink calls answer NotSupported
    hbm: bool  # HBM: memory temperature (field 82) is reported
    gpm: bool  # GPU performance monitoring (Hopper and newer)
    row_remapping: bool  # True: remapped rows; False: page retirement
    vbios: str
    inforom_image: str
    inforom_objects: tuple[tuple[int, str], ...]  # NVML_INFOROM_* -> version; absent = NA
    mig_profiles: tuple[MigProfile, ...] = ()  # empty = no MIG support

    def mig_profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)


def _profiles(
    mem_mib: tuple[int, int, int, int, int, int], sms: tuple[int, int, int, int, int]
) -> tuple[MigProfile, ...]:
    """The 80 GB A100/H100 MIG geometry: 7 compute and 8 memory slices."""
    m1, m1b, m2, m3, m4, m7 = mem_mib
    s1, s2, s3, s4, s7 = sms
    rows = (
        ("1g.10gb", pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, 1, 1, tuple(range(7)), m1, s1),
        ("1g.20gb", pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 15, 1, 2, (0, 2, 4, 6), m1b, s1),
        ("2g.20gb", pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, 2, 2, (0, 2, 4), m2, s2),
        ("3g.40gb", pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, 3, 4, (0, 4), m3, s3),
        ("4g.40gb", pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, 4, 4, (0,), m4, s4),
        ("7g.80gb", pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, 7, 8, (0,), m7, s7),
    )
    return tuple(
        MigProfile(
            name=name,
            profile=profile,
            profile_id=profile_id,
            slices=slices,
            memory_slices=mem_slices,
            starts=starts,
            max_count=INSTANCES_PER_GPU_80GB[name],
            memory_mib=memory,
            multiprocessors=sm,
            copy_engines=max(1, slices),
            decoders=slices if slices < 7 else 5,
            jpegs=1 if slices < 7 else 7,
            ofas=1 if slices == 7 else 0,
        )
        for name, profile, profile_id, slices, mem_slices, starts, memory, sm in rows
    )


MODELS: dict[str, GpuModel] = {
    m.key: m
    for m in (
        GpuModel(
            key="H100",
            name="NVIDIA H100 80GB HBM3",
            arch=pynvml.NVML_DEVICE_ARCH_HOPPER,
            compute_capability=(9, 0),
            memory_mib=81559,
            reserved_mib=328,
            multiprocessors=132,
            pci_device_id=0x233010DE,
            pci_subsystem_id=0x16C110DE,
            power_limit_mw=700_000,
            idle_power_mw=70_000,
            max_sm_clock_mhz=1980,
            idle_sm_clock_mhz=345,
            max_mem_clock_mhz=2619,
            max_video_clock_mhz=1755,
            idle_temp_c=30,
            load_temp_c=72,
            nvlinks=18,
            hbm=True,
            gpm=True,
            row_remapping=True,
            vbios="96.00.89.00.01",
            inforom_image="G520.0200.00.05",
            inforom_objects=((pynvml.NVML_INFOROM_OEM, "2.1"), (pynvml.NVML_INFOROM_ECC, "7.16")),
            mig_profiles=_profiles(
                (9984, 20096, 20096, 40448, 40448, 80896), (16, 32, 60, 64, 132)
            ),
        ),
        GpuModel(
            key="A100",
            name="NVIDIA A100-SXM4-80GB",
            arch=pynvml.NVML_DEVICE_ARCH_AMPERE,
            compute_capability=(8, 0),
            memory_mib=81920,
            reserved_mib=562,
            multiprocessors=108,
            pci_device_id=0x20B210DE,
            pci_subsystem_id=0x147F10DE,
            power_limit_mw=400_000,
            idle_power_mw=60_000,
            max_sm_clock_mhz=1410,
            idle_sm_clock_mhz=210,
            max_mem_clock_mhz=1593,
            max_video_clock_mhz=1290,
            idle_temp_c=31,
            load_temp_c=68,
            nvlinks=12,
            hbm=True,
            gpm=False,
            row_remapping=True,
            vbios="92.00.45.00.03",
            inforom_image="G506.0210.00.04",
            inforom_objects=((pynvml.NVML_INFOROM_OEM, "2.1"), (pynvml.NVML_INFOROM_ECC, "6.16")),
            mig_profiles=_profiles((9728, 19968, 19968, 40192, 40192, 80384), (14, 28, 42, 56, 98)),
        ),
        GpuModel(
            key="L4",
            name="NVIDIA L4",
            arch=pynvml.NVML_DEVICE_ARCH_ADA,
            compute_capability=(8, 9),
            memory_mib=23034,
            reserved_mib=331,
            multiprocessors=58,
            pci_device_id=0x27B810DE,
            pci_subsystem_id=0x16CA10DE,
            power_limit_mw=72_000,
            idle_power_mw=16_000,
            max_sm_clock_mhz=2040,
            idle_sm_clock_mhz=210,
            max_mem_clock_mhz=6251,
            max_video_clock_mhz=1545,
            idle_temp_c=34,
            load_temp_c=75,
            nvlinks=0,
            hbm=False,
            gpm=False,
            row_remapping=False,
            vbios="95.04.29.00.02",
            inforom_image="G193.0200.00.01",
            inforom_objects=((pynvml.NVML_INFOROM_OEM, "2.1"), (pynvml.NVML_INFOROM_ECC, "6.16")),
        ),
    )
}
