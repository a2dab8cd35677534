"""Every nvml* method of SimulatedNvml is a pynvml function with the same parameters."""

import inspect

import pynvml
import pytest

from gpufleet.lab.nvml.api import SimulatedNvml

SIM_FUNCTIONS = sorted(
    name
    for name, member in inspect.getmembers(SimulatedNvml, inspect.isfunction)
    if name.startswith("nvml")
)


def _positional(fn: object, *, drop_self: bool) -> list[tuple[str, object]]:
    params = list(inspect.signature(fn).parameters.values())
    if drop_self:
        params = params[1:]
    return [
        (p.name, p.default)
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]


# The calls the exporter, XID watcher and device plugin rely on (gpufleet issue 2).
REQUIRED = [
    "nvmlInit",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetNVMLVersion",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetSerial",
    "nvmlDeviceGetVbiosVersion",
    "nvmlDeviceGetBrand",
    "nvmlDeviceGetInforomImageVersion",
    "nvmlDeviceGetInforomVersion",
    "nvmlDeviceGetArchitecture",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetEncoderUtilization",
    "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetViolationStatus",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkErrorCounter",
    "nvmlDeviceGetGridLicensableFeatures",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetAttributes",
    "nvmlDeviceGetGpuInstanceProfileInfo",
    "nvmlDeviceGetGpuInstanceById",
    "nvmlGpuInstanceGetInfo",
    "nvmlGpmQueryDeviceSupport",
    "nvmlGpmSampleAlloc",
    "nvmlGpmSampleFree",
    "nvmlGpmSampleGet",
    "nvmlGpmMigSampleGet",
    "nvmlGpmMetricsGet",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlEventSetWait_v2",
    "nvmlEventSetWait",
    "nvmlEventSetFree",
    "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetP2PStatus",
    # what nvitop-exporter calls on every collection (issue 15)
    "nvmlDeviceGetFanSpeed",
    "nvmlDeviceGetGraphicsRunningProcesses",
]


def test_the_sim_implements_the_calls_gpufleet_needs() -> None:
    assert sorted(set(REQUIRED) - set(SIM_FUNCTIONS)) == []


@pytest.mark.parametrize("name", SIM_FUNCTIONS)
def test_same_name_and_parameters_as_pynvml(name: str) -> None:
    real = getattr(pynvml, name, None)
    assert inspect.isfunction(real), f"pynvml has no function {name}"
    sim = _positional(getattr(SimulatedNvml, name), drop_self=True)
    assert [n for n, _ in sim] == [n for n, _ in _positional(real, drop_self=False)]
    defaults = [
        (n, d) for n, d in _positional(real, drop_self=False) if d is not inspect.Parameter.empty
    ]
    assert [(n, d) for n, d in sim if d is not inspect.Parameter.empty] == defaults
