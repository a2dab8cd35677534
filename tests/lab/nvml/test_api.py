"""SimulatedNvml through pynvml's API: enumeration, identity, structs, MIG, processes."""

import ctypes
import threading
from collections.abc import Iterator

import pynvml
import pytest
from helpers.clock import ManualClock

from gpufleet.lab.nvml.api import SimulatedNvml
from gpufleet.nvml.backend import open_nvml

MIB = 1 << 20
POD = "8f0c1c1e-3b7a-4d2e-9a51-2f6f3c1d9e0a"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sim(clock: ManualClock) -> Iterator[SimulatedNvml]:
    lib = SimulatedNvml(
        "2xH100+2xH100:mig=all-1g.10gb+1xA100+1xL4", seed=5, clock=clock, wall_clock=lambda: 1.7e9
    )
    lib.nvmlInit()
    yield lib
    lib.close()


def test_open_nvml_picks_the_backend() -> None:
    assert open_nvml(None) is pynvml
    lib = open_nvml("1xH100", seed=2)
    try:
        assert isinstance(lib, SimulatedNvml)
        assert lib.devices[0].model == "H100"
    finally:
        lib.close()
    with pytest.raises(ValueError, match="unknown GPU model 'X1'"):
        open_nvml("1xX1")


def test_calls_before_init_and_after_shutdown_raise_uninitialized(clock: ManualClock) -> None:
    lib = SimulatedNvml("1xH100", clock=clock)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        lib.nvmlDeviceGetCount()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        lib.nvmlShutdown()
    lib.nvmlInit()
    handle = lib.nvmlDeviceGetHandleByIndex(0)
    lib.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        lib.nvmlDeviceGetUUID(handle)
    lib.close()


def test_system_queries(sim: SimulatedNvml) -> None:
    assert sim.nvmlSystemGetDriverVersion() == "550.90.07"
    assert sim.nvmlSystemGetNVMLVersion() == "12.550.90.07"
    assert sim.nvmlSystemGetCudaDriverVersion() == 12040
    assert sim.nvmlDeviceGetCount() == 6


def test_identity_of_every_gpu(sim: SimulatedNvml) -> None:
    for dev in sim.devices:
        h = sim.nvmlDeviceGetHandleByIndex(dev.index)
        assert isinstance(h, pynvml.c_nvmlDevice_t)
        assert sim.nvmlDeviceGetUUID(h) == dev.uuid
        assert sim.nvmlDeviceGetName(h) == dev.name
        assert sim.nvmlDeviceGetIndex(h) == dev.index
        assert sim.nvmlDeviceGetMinorNumber(h) == dev.minor
        assert sim.nvmlDeviceGetSerial(h) == dev.serial
        assert sim.nvmlDeviceGetNumaNodeId(h) == dev.numa_node
        pci = sim.nvmlDeviceGetPciInfo(h)
        assert type(pci) is pynvml.nvmlPciInfo_t
        assert pci.busId == dev.pci_bus_id
        assert pci.busIdLegacy == dev.pci_bus_id[4:]
        by_uuid = sim.nvmlDeviceGetHandleByUUID(dev.uuid)
        assert sim.nvmlDeviceGetIndex(by_uuid) == dev.index
        assert sim.nvmlDeviceGetIndex(sim.nvmlDeviceGetHandleByUUID(dev.uuid.encode())) == dev.index


def test_model_facts(sim: SimulatedNvml) -> None:
    h100, a100, l4 = (sim.nvmlDeviceGetHandleByIndex(i) for i in (0, 4, 5))
    assert sim.nvmlDeviceGetName(h100) == "NVIDIA H100 80GB HBM3"
    assert sim.nvmlDeviceGetName(a100) == "NVIDIA A100-SXM4-80GB"
    assert sim.nvmlDeviceGetArchitecture(h100) == pynvml.NVML_DEVICE_ARCH_HOPPER
    assert sim.nvmlDeviceGetArchitecture(a100) == pynvml.NVML_DEVICE_ARCH_AMPERE
    assert sim.nvmlDeviceGetCudaComputeCapability(h100) == (9, 0)
    assert sim.nvmlDeviceGetCudaComputeCapability(a100) == (8, 0)
    assert sim.nvmlDeviceGetMemoryInfo(h100).total == 81559 * MIB
    assert sim.nvmlDeviceGetMemoryInfo(a100).total == 81920 * MIB
    assert sim.nvmlDeviceGetEnforcedPowerLimit(h100) == 700_000
    assert sim.nvmlDeviceGetPowerManagementLimit(a100) == 400_000
    assert sim.nvmlDeviceGetMaxClockInfo(h100, pynvml.NVML_CLOCK_SM) == 1980
    assert sim.nvmlDeviceGetMaxClockInfo(h100, pynvml.NVML_CLOCK_MEM) == 2619
    assert sim.nvmlDeviceGetBrand(h100) == pynvml.NVML_BRAND_NVIDIA
    assert sim.nvmlDeviceGetVbiosVersion(h100) == "96.00.89.00.01"
    assert sim.nvmlDeviceGetInforomImageVersion(h100) == "G520.0200.00.05"
    assert sim.nvmlDeviceGetInforomVersion(h100, pynvml.NVML_INFOROM_ECC) == "7.16"
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlDeviceGetInforomVersion(h100, pynvml.NVML_INFOROM_POWER)
    assert sim.nvmlDeviceGetMigMode(a100) == [0, 0]
    for call in (sim.nvmlDeviceGetMigMode, sim.nvmlDeviceGetMaxMigDeviceCount):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call(l4)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlDeviceGetNvLinkState(l4, 0)
    assert sim.nvmlDeviceGetNvLinkState(h100, 17) == pynvml.NVML_FEATURE_ENABLED
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlDeviceGetNvLinkState(a100, 12)


def test_struct_types_are_pynvmls_own(sim: SimulatedNvml, clock: ManualClock) -> None:
    h = sim.nvmlDeviceGetHandleByIndex(0)
    assert type(sim.nvmlDeviceGetMemoryInfo(h)) is pynvml.c_nvmlMemory_t
    v2 = sim.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    assert type(v2) is pynvml.c_nvmlMemory_v2_t
    assert v2.version == pynvml.nvmlMemory_v2
    assert v2.total == v2.reserved + v2.used + v2.free
    assert type(sim.nvmlDeviceGetUtilizationRates(h)) is pynvml.c_nvmlUtilization_t
    assert type(sim.nvmlDeviceGetViolationStatus(h, 0)) is pynvml.c_nvmlViolationTime_t
    lic = sim.nvmlDeviceGetGridLicensableFeatures(h)
    assert type(lic) is pynvml.c_nvmlGridLicensableFeatures_v4_t
    assert lic.isGridLicenseSupported == 0
    fields = sim.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_POWER_INSTANT])
    assert type(fields[0]) is pynvml.c_nvmlFieldValue_t
    assert isinstance(sim.nvmlDeviceGetEncoderUtilization(h), list)


def test_telemetry_values_are_in_range(sim: SimulatedNvml, clock: ManualClock) -> None:
    for i in (0, 4, 5):
        h = sim.nvmlDeviceGetHandleByIndex(i)
        for step in range(20):
            clock.now = 1000.0 + 37 * step
            limit = sim.nvmlDeviceGetEnforcedPowerLimit(h)
            assert 0 < sim.nvmlDeviceGetPowerUsage(h) <= limit
            assert 0 <= sim.nvmlDeviceGetUtilizationRates(h).gpu <= 100
            assert 20 <= sim.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU) <= 90
            sm = sim.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
            assert 0 < sm <= sim.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
            util, period = sim.nvmlDeviceGetDecoderUtilization(h)
            assert util == 0 and period > 0
            assert sim.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES) > 0


def test_mig_layout_and_handles(sim: SimulatedNvml) -> None:
    parent = sim.nvmlDeviceGetHandleByIndex(2)
    dev = sim.devices[2]
    assert sim.nvmlDeviceGetMigMode(parent) == [1, 1]
    assert sim.nvmlDeviceGetMaxMigDeviceCount(parent) == 7
    assert not sim.nvmlDeviceIsMigDeviceHandle(parent)
    seen = []
    for i in range(7):
        mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, i)
        assert sim.nvmlDeviceIsMigDeviceHandle(mig)
        assert sim.nvmlDeviceGetName(mig) == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
        assert sim.nvmlDeviceGetUUID(mig) == dev.mig[i].uuid
        back = sim.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        assert sim.nvmlDeviceGetUUID(back) == dev.uuid
        assert sim.nvmlDeviceGetComputeInstanceId(mig) == 0
        attrs = sim.nvmlDeviceGetAttributes(mig)
        assert (attrs.gpuInstanceSliceCount, attrs.multiprocessorCount) == (1, 16)
        assert sim.nvmlDeviceGetMemoryInfo(mig).total == attrs.memorySizeMB * MIB
        uuid_handle = sim.nvmlDeviceGetHandleByUUID(dev.mig[i].uuid)
        seen.append(sim.nvmlDeviceGetGpuInstanceId(uuid_handle))
    assert seen == list(range(7, 14))
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 7)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlDeviceGetGpuInstanceId(parent)


def test_mig_empty_slot_is_not_found(clock: ManualClock) -> None:
    with SimulatedNvml("1xA100:mig=3g.40gb", clock=clock) as lib:
        lib.nvmlInit()
        parent = lib.nvmlDeviceGetHandleByIndex(0)
        assert (
            lib.nvmlDeviceGetGpuInstanceId(lib.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)) == 1
        )
        with pytest.raises(pynvml.NVMLError_NotFound):
            lib.nvmlDeviceGetMigDeviceHandleByIndex(parent, 1)


def test_utilization_is_not_supported_on_mig(sim: SimulatedNvml) -> None:
    parent = sim.nvmlDeviceGetHandleByIndex(2)
    mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    # nvml.h: utilization, encoder and decoder utilization and process utilization are
    # "not supported" on MIG-enabled GPUs
    for handle in (parent, mig):
        for call in (
            sim.nvmlDeviceGetUtilizationRates,
            sim.nvmlDeviceGetEncoderUtilization,
            sim.nvmlDeviceGetDecoderUtilization,
        ):
            with pytest.raises(pynvml.NVMLError_NotSupported):
                call(handle)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            sim.nvmlDeviceGetProcessUtilization(handle, 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlDeviceGetPowerUsage(mig)
    assert sim.nvmlDeviceGetPowerUsage(parent) > 0


def test_an_unprivileged_caller_gets_no_mig_gpus_aggregates(sim: SimulatedNvml) -> None:
    """nvml.h: in MIG mode, a GPU's memory and processes "only if the caller has appropriate
    privileges", and nvmlDeviceGetGpuInstanceById "Requires privileged user"."""
    parent = sim.nvmlDeviceGetHandleByIndex(2)
    mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    whole = sim.nvmlDeviceGetHandleByIndex(0)
    sim.set_privileged(False)
    for call in (sim.nvmlDeviceGetMemoryInfo, sim.nvmlDeviceGetComputeRunningProcesses):
        with pytest.raises(pynvml.NVMLError_NoPermission):
            call(parent)
        call(mig), call(whole)  # an instance, and a GPU without MIG, answer
    gi_id = sim.nvmlDeviceGetGpuInstanceId(mig)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        sim.nvmlDeviceGetGpuInstanceById(parent, gi_id)
    sim.set_privileged(True)
    assert sim.nvmlDeviceGetMemoryInfo(parent).total > 0


def test_no_fans_on_any_model(sim: SimulatedNvml) -> None:
    """H100 SXM, A100 SXM and L4 are passively cooled: NVML answers NotSupported (issue 15)."""
    parent = sim.nvmlDeviceGetHandleByIndex(2)
    handles = [sim.nvmlDeviceGetHandleByIndex(i) for i in range(sim.nvmlDeviceGetCount())]
    for handle in [*handles, sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)]:
        with pytest.raises(pynvml.NVMLError_NotSupported):
            sim.nvmlDeviceGetFanSpeed(handle)


def test_gpu_instance_profiles_and_info(sim: SimulatedNvml) -> None:
    parent = sim.nvmlDeviceGetHandleByIndex(2)
    expected = {
        pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE: ("MIG 1g.10gb", 19, 7),
        pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: ("MIG 1g.20gb", 15, 4),
        pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE: ("MIG 2g.20gb", 14, 3),
        pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE: ("MIG 3g.40gb", 9, 2),
        pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE: ("MIG 4g.40gb", 5, 1),
        pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE: ("MIG 7g.80gb", 0, 1),
    }
    for profile, (name, profile_id, count) in expected.items():
        info = sim.nvmlDeviceGetGpuInstanceProfileInfo(parent, profile)
        assert type(info) is pynvml.c_nvmlGpuInstanceProfileInfo_v2_t
        assert (info.name, info.id, info.instanceCount) == (name, profile_id, count)
        v1 = sim.nvmlDeviceGetGpuInstanceProfileInfo(parent, profile, version=1)
        assert type(v1) is pynvml.c_nvmlGpuInstanceProfileInfo_t
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlDeviceGetGpuInstanceProfileInfo(parent, pynvml.NVML_GPU_INSTANCE_PROFILE_6_SLICE)
    gi = sim.nvmlDeviceGetGpuInstanceById(parent, 9)
    assert isinstance(gi, pynvml.c_nvmlGpuInstance_t)
    info = sim.nvmlGpuInstanceGetInfo(gi)
    assert type(info) is pynvml.c_nvmlGpuInstanceInfo_t
    assert (info.id, info.profileId, info.placement.start, info.placement.size) == (9, 19, 2, 1)
    assert sim.nvmlDeviceGetUUID(info.device) == sim.devices[2].uuid
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlDeviceGetGpuInstanceById(parent, 1)


def test_processes_and_cgroup_files(sim: SimulatedNvml, clock: ManualClock) -> None:
    gpu0 = sim.devices[0]
    mig = sim.devices[2].mig[3]
    pids = [
        sim.spawn_process(gpu0.uuid, pod_uid=POD, used_memory_bytes=2 << 30, sm_share=0.4),
        sim.spawn_process(gpu0.uuid, pod_uid=None, used_memory_bytes=1 << 30, sm_share=0.2),
        sim.spawn_process(mig.uuid, pod_uid=POD, used_memory_bytes=1 << 30, sm_share=0.7),
    ]
    h0 = sim.nvmlDeviceGetHandleByIndex(0)
    procs = sim.nvmlDeviceGetComputeRunningProcesses(h0)
    assert [(p.pid, p.usedGpuMemory, p.gpuInstanceId) for p in procs] == [
        (pids[0], 2 << 30, 0xFFFFFFFF),
        (pids[1], 1 << 30, 0xFFFFFFFF),
    ]
    assert sim.nvmlDeviceGetMemoryInfo(h0, version=pynvml.nvmlMemory_v2).used == 3 << 30
    parent = sim.nvmlDeviceGetHandleByIndex(2)
    mig_handle = sim.nvmlDeviceGetHandleByUUID(mig.uuid)
    other_mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    on_mig = sim.nvmlDeviceGetComputeRunningProcesses(mig_handle)
    assert [(p.pid, p.gpuInstanceId, p.computeInstanceId) for p in on_mig] == [(pids[2], 10, 0)]
    assert [p.pid for p in sim.nvmlDeviceGetComputeRunningProcesses(parent)] == [pids[2]]
    assert sim.nvmlDeviceGetComputeRunningProcesses(other_mig) == []
    # CUDA processes are compute contexts only (issue 15: nvitop asks for both lists).
    for handle in (h0, parent, mig_handle):
        assert sim.nvmlDeviceGetGraphicsRunningProcesses(handle) == []
    assert sim.nvmlDeviceGetMemoryInfo(mig_handle).used == 1 << 30
    text = (sim.proc_root / str(pids[0]) / "cgroup").read_text()
    assert "pod" + POD in text or "pod" + POD.replace("-", "_") in text
    assert "kubepods" not in (sim.proc_root / str(pids[1]) / "cgroup").read_text()
    sim.kill_process(pids[0])
    assert not (sim.proc_root / str(pids[0])).exists()
    assert [p.pid for p in sim.nvmlDeviceGetComputeRunningProcesses(h0)] == [pids[1]]
    with pytest.raises(ValueError, match="no simulated process"):
        sim.kill_process(pids[0])


def test_spawn_errors(sim: SimulatedNvml) -> None:
    with pytest.raises(ValueError, match="no simulated GPU or MIG device"):
        sim.spawn_process("GPU-nope", pod_uid=POD, used_memory_bytes=0, sm_share=0.1)
    with pytest.raises(ValueError, match="is in MIG mode"):
        sim.spawn_process(sim.devices[2].uuid, pod_uid=POD, used_memory_bytes=0, sm_share=0.1)
    with pytest.raises(ValueError, match="does not fit"):
        sim.spawn_process(
            sim.devices[2].mig[0].uuid, pod_uid=POD, used_memory_bytes=11 << 30, sm_share=0.1
        )
    with pytest.raises(ValueError, match="sm_share"):
        sim.spawn_process(sim.devices[0].uuid, pod_uid=POD, used_memory_bytes=0, sm_share=1.5)


def test_process_utilization_samples(sim: SimulatedNvml, clock: ManualClock) -> None:
    h = sim.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlDeviceGetProcessUtilization(h, 0)
    big = sim.spawn_process(sim.devices[0].uuid, pod_uid=POD, used_memory_bytes=0, sm_share=0.6)
    small = sim.spawn_process(sim.devices[0].uuid, pod_uid=POD, used_memory_bytes=0, sm_share=0.1)
    clock.now += 1.0
    samples = sim.nvmlDeviceGetProcessUtilization(h, 0)
    assert all(type(s) is pynvml.c_nvmlProcessUtilizationSample_t for s in samples)
    by_pid = {s.pid: s for s in samples}
    assert set(by_pid) == {big, small}
    assert by_pid[big].smUtil > by_pid[small].smUtil > 0
    assert sum(s.smUtil for s in samples) <= 100
    assert sim.nvmlDeviceGetUtilizationRates(h).gpu >= by_pid[big].smUtil
    latest = max(s.timeStamp for s in samples)
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlDeviceGetProcessUtilization(h, latest)
    clock.now += 1.0
    assert {s.pid for s in sim.nvmlDeviceGetProcessUtilization(h, latest)} == {big, small}
    # nvml.h: a sample only for a process "that had some non-zero utilization during the
    # last sample period"; NotFound when none had
    sim.set_process_sm_share(small, 0.0)
    clock.now += 1.0
    assert {s.pid for s in sim.nvmlDeviceGetProcessUtilization(h, latest)} == {big}
    sim.set_process_sm_share(big, 0.0)
    clock.now += 1.0
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlDeviceGetProcessUtilization(h, latest)


def test_topology_and_p2p(sim: SimulatedNvml) -> None:
    h = [sim.nvmlDeviceGetHandleByIndex(i) for i in range(6)]
    ancestor = sim.nvmlDeviceGetTopologyCommonAncestor
    assert ancestor(h[0], h[0]) == pynvml.NVML_TOPOLOGY_INTERNAL
    assert ancestor(h[0], h[1]) == pynvml.NVML_TOPOLOGY_SINGLE
    assert ancestor(h[0], h[2]) == pynvml.NVML_TOPOLOGY_NODE
    assert ancestor(h[0], h[5]) == pynvml.NVML_TOPOLOGY_SYSTEM
    nvlink = pynvml.NVML_P2P_CAPS_INDEX_NVLINK
    assert sim.nvmlDeviceGetP2PStatus(h[0], h[3], nvlink) == pynvml.NVML_P2P_STATUS_OK
    assert sim.nvmlDeviceGetP2PStatus(h[0], h[5], nvlink) == pynvml.NVML_P2P_STATUS_NOT_SUPPORTED


def test_module_attributes_fall_back_to_pynvml(sim: SimulatedNvml) -> None:
    assert sim.NVML_CLOCK_SM == pynvml.NVML_CLOCK_SM
    assert sim.nvmlMemory_v2 == pynvml.nvmlMemory_v2
    assert sim.NVMLError_NotSupported is pynvml.NVMLError_NotSupported
    assert sim.c_nvmlFieldValue_t is pynvml.c_nvmlFieldValue_t
    assert sim.nvmlStructToFriendlyObject is pynvml.nvmlStructToFriendlyObject
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        sim.nvmlDeviceGetBoardId(sim.nvmlDeviceGetHandleByIndex(0))
    with pytest.raises(AttributeError):
        sim.no_such_name  # noqa: B018
    with pytest.raises(AttributeError):
        sim._private  # noqa: B018


def test_handles_are_found_by_address_not_identity(sim: SimulatedNvml) -> None:
    h = sim.nvmlDeviceGetHandleByIndex(3)
    copy = ctypes.cast(
        ctypes.c_void_p(ctypes.cast(h, ctypes.c_void_p).value), pynvml.c_nvmlDevice_t
    )
    assert copy is not h
    assert sim.nvmlDeviceGetIndex(copy) == 3
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlDeviceGetIndex(pynvml.c_nvmlDevice_t())
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlDeviceGetHandleByIndex(6)
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")


def test_concurrent_collection_and_scenario_changes(sim: SimulatedNvml) -> None:
    """Two reader threads and a writer thread: no errors, no torn process lists."""
    errors: list[BaseException] = []
    stop = threading.Event()
    fields = [pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, pynvml.NVML_FI_DEV_POWER_INSTANT]

    def read() -> None:
        try:
            while not stop.is_set():
                for i in range(sim.nvmlDeviceGetCount()):
                    h = sim.nvmlDeviceGetHandleByIndex(i)
                    sim.nvmlDeviceGetFieldValues(h, fields)
                    sim.nvmlDeviceGetTotalEnergyConsumption(h)
                    for p in sim.nvmlDeviceGetComputeRunningProcesses(h):
                        assert p.pid >= 12000
        except BaseException as e:  # surfaced below, in the test thread
            errors.append(e)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    for _ in range(200):
        pid = sim.spawn_process(sim.devices[0].uuid, pod_uid=POD, used_memory_bytes=0, sm_share=0.1)
        sim.kill_process(pid)
    stop.set()
    for t in readers:
        t.join(timeout=10)
    assert errors == []
    assert sim.nvmlDeviceGetComputeRunningProcesses(sim.nvmlDeviceGetHandleByIndex(0)) == []


def test_uncorrectable_ecc_leaves_dbe_counts_and_a_pending_remap(sim: SimulatedNvml) -> None:
    h = sim.nvmlDeviceGetHandleByIndex(0)
    dbe, volatile = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
    pending = pynvml.NVML_FI_DEV_REMAPPED_PENDING
    assert sim.nvmlDeviceGetTotalEccErrors(h, dbe, volatile) == 0
    assert sim.nvmlDeviceGetRemappedRows(h)[2] == 0
    sim.inject_uncorrectable_ecc(0)
    assert sim.nvmlDeviceGetTotalEccErrors(h, dbe, volatile) == 1
    assert sim.nvmlDeviceGetRemappedRows(h)[2] == 1  # (correctable, uncorrectable, pending, failed)
    assert sim.nvmlDeviceGetFieldValues(h, [pending])[0].value.uiVal == 1
    other = sim.nvmlDeviceGetHandleByIndex(1)
    assert sim.nvmlDeviceGetTotalEccErrors(other, dbe, volatile) == 0
