"""Fault injection and events: lost GPUs, NotSupported, hangs, XIDs through event sets."""

import threading
import time
from collections.abc import Iterator

import pynvml
import pytest

from gpufleet.lab.nvml.api import SimulatedNvml

XID = pynvml.nvmlEventTypeXidCriticalError


@pytest.fixture
def sim() -> Iterator[SimulatedNvml]:
    lib = SimulatedNvml("2xH100+1xH100:mig=all-1g.10gb+1xA100", seed=1)
    lib.nvmlInit()
    yield lib
    lib.close()


def test_lost_gpu_raises_gpu_is_lost_on_it_and_its_mig_devices(sim: SimulatedNvml) -> None:
    lost = sim.nvmlDeviceGetHandleByIndex(2)
    mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(lost, 0)
    healthy = sim.nvmlDeviceGetHandleByIndex(0)
    sim.fail_gpu(2)
    calls = [
        lambda: sim.nvmlDeviceGetUUID(lost),
        lambda: sim.nvmlDeviceGetPowerUsage(lost),
        lambda: sim.nvmlDeviceGetFieldValues(lost, [pynvml.NVML_FI_DEV_POWER_INSTANT]),
        lambda: sim.nvmlDeviceGetMemoryInfo(mig),
        lambda: sim.nvmlDeviceGetComputeRunningProcesses(mig),
        lambda: sim.nvmlDeviceGetHandleByIndex(2),
        lambda: sim.nvmlDeviceGetHandleByUUID(sim.devices[2].mig[0].uuid),
    ]
    for call in calls:
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            call()
    assert sim.nvmlDeviceGetCount() == 4
    assert sim.nvmlDeviceGetPowerUsage(healthy) > 0
    sim.restore_gpu(2)
    assert sim.nvmlDeviceGetUUID(lost) == sim.devices[2].uuid


def test_failing_a_gpu_delivers_xid_79(sim: SimulatedNvml) -> None:
    events = sim.nvmlEventSetCreate()
    for i in range(4):
        sim.nvmlDeviceRegisterEvents(sim.nvmlDeviceGetHandleByIndex(i), XID, events)
    sim.fail_gpu(1)
    event = sim.nvmlEventSetWait_v2(events, 1000)
    assert type(event) is pynvml.c_nvmlEventData_t
    assert (event.eventType, event.eventData) == (XID, 79)
    assert (event.gpuInstanceId, event.computeInstanceId) == (0xFFFFFFFF, 0xFFFFFFFF)
    sim.restore_gpu(1)
    assert sim.nvmlDeviceGetIndex(event.device) == 1
    sim.nvmlEventSetFree(events)


def test_xid_reaches_a_thread_already_waiting(sim: SimulatedNvml) -> None:
    events = sim.nvmlEventSetCreate()
    parent = sim.nvmlDeviceGetHandleByIndex(2)
    sim.nvmlDeviceRegisterEvents(parent, XID | pynvml.nvmlEventTypeSingleBitEccError, events)
    got: list[pynvml.c_nvmlEventData_t] = []
    waiter = threading.Thread(target=lambda: got.append(sim.nvmlEventSetWait(events, 10_000)))
    waiter.start()
    sim.inject_xid(2, 43, gi_id=9)
    waiter.join(timeout=10)
    assert not waiter.is_alive()
    (event,) = got
    assert (event.eventData, event.gpuInstanceId, event.computeInstanceId) == (43, 9, 0)
    assert sim.nvmlDeviceGetUUID(event.device) == sim.devices[2].uuid


def test_events_go_only_to_sets_registered_for_the_gpu(sim: SimulatedNvml) -> None:
    on_0, on_3 = sim.nvmlEventSetCreate(), sim.nvmlEventSetCreate()
    sim.nvmlDeviceRegisterEvents(sim.nvmlDeviceGetHandleByIndex(0), XID, on_0)
    sim.nvmlDeviceRegisterEvents(sim.nvmlDeviceGetHandleByIndex(3), XID, on_3)
    sim.inject_xid(3, 48)
    assert sim.nvmlEventSetWait_v2(on_3, 1000).eventData == 48
    with pytest.raises(pynvml.NVMLError_Timeout):
        sim.nvmlEventSetWait_v2(on_0, 20)


def test_wait_times_out(sim: SimulatedNvml) -> None:
    events = sim.nvmlEventSetCreate()
    sim.nvmlDeviceRegisterEvents(sim.nvmlDeviceGetHandleByIndex(0), XID, events)
    with pytest.raises(pynvml.NVMLError_Timeout):
        sim.nvmlEventSetWait_v2(events, 50)


def test_event_registration_errors(sim: SimulatedNvml) -> None:
    h = sim.nvmlDeviceGetHandleByIndex(0)
    assert sim.nvmlDeviceGetSupportedEventTypes(h) & XID
    events = sim.nvmlEventSetCreate()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypePowerSourceChange, events)
    mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(sim.nvmlDeviceGetHandleByIndex(2), 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlDeviceRegisterEvents(mig, XID, events)
    sim.nvmlEventSetFree(events)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlEventSetWait_v2(events, 10)
    with pytest.raises(ValueError, match="no GPU instance 1"):
        sim.inject_xid(2, 31, gi_id=1)
    with pytest.raises(ValueError, match="no simulated GPU 9"):
        sim.inject_xid(9, 31)


def test_close_wakes_waiters(sim: SimulatedNvml) -> None:
    events = sim.nvmlEventSetCreate()
    errors: list[Exception] = []

    def wait() -> None:
        try:
            sim.nvmlEventSetWait_v2(events, 60_000)
        except pynvml.NVMLError as e:
            errors.append(e)

    waiter = threading.Thread(target=wait)
    waiter.start()
    sim.close()  # whether the waiter is already blocked or not, it ends Uninitialized
    waiter.join(timeout=10)
    assert not waiter.is_alive()
    assert isinstance(errors[0], pynvml.NVMLError_Uninitialized)


@pytest.mark.parametrize(
    ("model", "index", "refused"),
    [(None, None, {0, 1, 2, 3}), ("A100", None, {3}), (None, 1, {1}), ("H100", 3, set())],
    ids=["everywhere", "by-model", "by-index", "model-and-index-disagree"],
)
def test_not_supported_function(
    sim: SimulatedNvml, model: str | None, index: int | None, refused: set[int]
) -> None:
    sim.set_not_supported("nvmlDeviceGetPowerUsage", model=model, index=index)
    got = set()
    for i in range(4):
        try:
            sim.nvmlDeviceGetPowerUsage(sim.nvmlDeviceGetHandleByIndex(i))
        except pynvml.NVMLError_NotSupported:
            got.add(i)
    assert got == refused
    sim.clear_injections()
    assert sim.nvmlDeviceGetPowerUsage(sim.nvmlDeviceGetHandleByIndex(0)) > 0


def test_not_supported_field_is_per_entry(sim: SimulatedNvml) -> None:
    sim.set_not_supported(pynvml.NVML_FI_DEV_MEMORY_TEMP, index=0)
    ids = [pynvml.NVML_FI_DEV_MEMORY_TEMP, pynvml.NVML_FI_DEV_POWER_INSTANT]
    on_0 = sim.nvmlDeviceGetFieldValues(sim.nvmlDeviceGetHandleByIndex(0), ids)
    on_1 = sim.nvmlDeviceGetFieldValues(sim.nvmlDeviceGetHandleByIndex(1), ids)
    assert [f.nvmlReturn for f in on_0] == [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_SUCCESS]
    assert [f.nvmlReturn for f in on_1] == [pynvml.NVML_SUCCESS, pynvml.NVML_SUCCESS]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("nvmlDeviceGetNoSuchThing", "not an NVML function"),
        ("spawn_process", "not an NVML"),
        (100000, "field id"),
    ],
    ids=["unknown-function", "not-an-nvml-call", "unknown-field"],
)
def test_injection_rejects_unknown_targets(
    sim: SimulatedNvml, target: str | int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        sim.set_not_supported(target)


def test_hang_delays_only_the_chosen_gpu_and_call(sim: SimulatedNvml, monkeypatch) -> None:
    """The hang's sleep is recorded, not waited for; while it sleeps, another thread's call
    must answer (a hang holding the simulator's lock would block it, and time out here)."""
    h0, h1 = sim.nvmlDeviceGetHandleByIndex(0), sim.nvmlDeviceGetHandleByIndex(1)
    slept: list[float] = []
    answered: list[int] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        other = threading.Thread(
            target=lambda: answered.append(
                sim.nvmlDeviceGetTemperature(h0, pynvml.NVML_TEMPERATURE_GPU)
            )
        )
        other.start()
        other.join(timeout=30)

    monkeypatch.setattr(time, "sleep", sleep)
    sim.set_hang("nvmlDeviceGetTemperature", 0.2, index=1)
    sim.nvmlDeviceGetTemperature(h0, pynvml.NVML_TEMPERATURE_GPU)  # another GPU
    sim.nvmlDeviceGetPowerUsage(h1)  # another call
    assert slept == []
    sim.nvmlDeviceGetTemperature(h1, pynvml.NVML_TEMPERATURE_GPU)
    assert slept == [0.2]
    assert len(answered) == 1 and answered[0] > 0  # answered while the hang slept
    sim.set_hang("nvmlDeviceGetTemperature", 0, index=1)
    sim.nvmlDeviceGetTemperature(h1, pynvml.NVML_TEMPERATURE_GPU)
    assert slept == [0.2]
    with pytest.raises(ValueError, match="not an NVML function"):
        sim.set_hang("nvmlNope", 1)
