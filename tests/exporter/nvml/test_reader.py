"""The NVML adapter against the simulated NVML: topology, every field, MIG, faults, rates."""

import logging
from collections.abc import Iterator

import pynvml
import pytest
from helpers.clock import ManualClock

from gpufleet.exporter.core.fields import CATALOG, EXPORTER_FIELDS, MetricType
from gpufleet.exporter.core.samples import EntitySample
from gpufleet.exporter.nvml.reader import ERROR_KINDS, NvmlReader
from gpufleet.exporter.nvml.readers import (
    SERVED_FIELDS,
    brand_name,
    field_value_number,
    kib_rate_mb_per_s,
    memory_temp_c,
    vgpu_license_status,
)
from gpufleet.lab.nvml.api import SimulatedNvml

INTERVAL_S = 5.0
MIB = 2**20
PROF = {n for n, s in CATALOG.items() if s.gpm}
NVLINK = {n for n in CATALOG if "NVLINK" in n}
ROW_REMAP = {
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
}
# Page retirement gave way to row remapping on A100 and newer.
RETIRED = {"DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_RETIRED_PENDING"}
# Everywhere: XIDs and windowed counts come from history, not polls; no board has a power
# inforom object.
EVERYWHERE = EXPORTER_FIELDS | {"DCGM_FI_DEV_POWER_INFOROM_VER"}
# Catalog fields NVML cannot serve, by simulated GPU model.
NOT_SERVED = {
    "H100": EVERYWHERE | RETIRED,
    "A100": EVERYWHERE | RETIRED | PROF,  # no GPM before Hopper
    "L4": EVERYWHERE | PROF | NVLINK | ROW_REMAP | {"DCGM_FI_DEV_MEMORY_TEMP"},  # GDDR6
}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def make_sim(clock: ManualClock, tmp_path) -> Iterator:
    sims = []

    def make(fleet: str, cls: type[SimulatedNvml] = SimulatedNvml) -> SimulatedNvml:
        sim = cls(
            fleet,
            proc_root=tmp_path / f"proc{len(sims)}",
            clock=clock,
            wall_clock=lambda: 1.7e9 + clock(),
        )
        sim.nvmlInit()
        sims.append(sim)
        return sim

    yield make
    for sim in sims:
        sim.close()


def reader_for(sim: SimulatedNvml, names=None) -> NvmlReader:
    fields = CATALOG.values() if names is None else [CATALOG[n] for n in names]
    reader = NvmlReader(sim, fields)
    reader.discover()
    return reader


def collect_twice(reader: NvmlReader, clock: ManualClock) -> tuple[tuple[EntitySample, ...], dict]:
    """Rates and GPM metrics need an interval: the second collection has everything."""
    reader.collect(clock())
    return reader.collect(clock.advance(INTERVAL_S))


# --- pure helpers -------------------------------------------------------------------------------


def _value(**kw):
    value = pynvml.c_nvmlValue_t()
    for attr, v in kw.items():
        setattr(value, attr, v)
    return value


@pytest.mark.parametrize(
    ("value_type", "value", "expected"),
    [
        (pynvml.NVML_VALUE_TYPE_DOUBLE, _value(dVal=1.5), 1.5),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, _value(uiVal=7), 7.0),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, _value(ullVal=2**40), float(2**40)),
        (pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG, _value(sllVal=-3), -3.0),
        (pynvml.NVML_VALUE_TYPE_SIGNED_INT, _value(siVal=-4), -4.0),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT, _value(usVal=9), 9.0),
        (99, _value(ullVal=1), None),
    ],
    ids=["double", "uint", "ull", "sll", "sint", "ushort", "unknown-type"],
)
def test_field_value_number(value_type: int, value, expected: float | None) -> None:
    assert field_value_number(value_type, value) == expected


@pytest.mark.parametrize(
    ("reading", "expected"),
    [(45.0, 45.0), (200.0, 200.0), (201.0, None)],
    ids=["normal", "limit", "garbage-dropped-like-dcgm"],
)
def test_memory_temp(reading: float, expected: float | None) -> None:
    assert memory_temp_c(reading) == expected


@pytest.mark.parametrize(
    ("previous", "current", "expected"),
    [
        ((1000.0, 10.0), (1000.0 + 5 * 976.5625, 15.0), 1.0),  # 976.5625 KiB/s = 1 MB/s
        ((1000.0, 10.0), (1000.0, 15.0), 0.0),
        ((1000.0, 10.0), (2000.0, 10.0), None),
        ((5000.0, 10.0), (10.0, 15.0), None),
    ],
    ids=["one-MB-per-s", "idle", "no-time-passed", "counter-went-back"],
)
def test_kib_rate(previous, current, expected: float | None) -> None:
    rate = kib_rate_mb_per_s(previous, current)
    assert rate == (None if expected is None else pytest.approx(expected))


def _license(supported: int, *features: tuple[int, int]):
    lic = pynvml.c_nvmlGridLicensableFeatures_v4_t()
    lic.isGridLicenseSupported = supported
    lic.licensableFeaturesCount = len(features)
    for i, (code, state) in enumerate(features):
        lic.gridLicensableFeatures[i].featureCode = code
        lic.gridLicensableFeatures[i].featureState = state
    return lic


VGPU, RTX = (
    pynvml.NVML_GRID_LICENSE_FEATURE_CODE_VGPU,
    pynvml.NVML_GRID_LICENSE_FEATURE_CODE_NVIDIA_RTX,
)


@pytest.mark.parametrize(
    ("features", "expected"),
    [
        (_license(0), 0.0),
        (_license(1, (VGPU, 1)), 1.0),
        (_license(1, (VGPU, 0)), 0.0),
        (_license(1, (RTX, 1)), 0.0),
    ],
    ids=["no-licensing", "vgpu-licensed", "vgpu-unlicensed", "other-feature-only"],
)
def test_vgpu_license_status(features, expected: float) -> None:
    assert vgpu_license_status(features) == expected


def test_brand_name() -> None:
    assert brand_name(pynvml.NVML_BRAND_TESLA) == "Tesla"
    assert brand_name(12345) == "Unknown"


# --- readers against the catalog ----------------------------------------------------------------


def test_every_catalog_field_has_a_reader() -> None:
    assert set(CATALOG) == SERVED_FIELDS | EXPORTER_FIELDS


def test_unknown_field_is_rejected_by_name() -> None:
    bogus = CATALOG["DCGM_FI_DEV_GPU_TEMP"].__class__(
        name="DCGM_FI_DEV_BOGUS", type=MetricType.GAUGE, help="x", nvml="x"
    )
    with pytest.raises(ValueError, match="DCGM_FI_DEV_BOGUS"):
        NvmlReader(None, [bogus])


@pytest.mark.parametrize("model", NOT_SERVED)
def test_every_catalog_field_is_served_where_nvml_can(
    make_sim, clock: ManualClock, model: str
) -> None:
    reader = reader_for(make_sim(f"4x{model}"))
    samples, errors = collect_twice(reader, clock)
    assert errors == dict.fromkeys(ERROR_KINDS, 0)
    assert len(samples) == 4
    for sample in samples:
        served = set(sample.values) | set(sample.labels) | set(reader.node_labels)
        assert served == set(CATALOG) - NOT_SERVED[model], sample.entity.gpu
    assert reader.node_labels == {
        "DCGM_FI_DRIVER_VERSION": "550.90.07",
        "DCGM_FI_NVML_VERSION": "12.550.90.07",
    }


def test_values_are_in_legacy_units(make_sim, clock: ManualClock) -> None:
    sim = make_sim("1xH100")
    reader = reader_for(sim)
    samples, _ = collect_twice(reader, clock)
    values = samples[0].values
    handle = sim.nvmlDeviceGetHandleByIndex(0)
    memory = sim.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    assert values["DCGM_FI_DEV_FB_TOTAL"] == memory.total >> 20
    assert values["DCGM_FI_DEV_FB_RESERVED"] == memory.reserved >> 20
    assert values["DCGM_FI_DEV_POWER_USAGE"] == sim.nvmlDeviceGetPowerUsage(handle) / 1000
    assert values["DCGM_FI_DEV_POWER_MGMT_LIMIT"] == 700.0  # W, from 700000 mW
    assert 0.0 <= values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] <= 1.0  # ratio, not %
    assert values["DCGM_FI_DEV_SM_CLOCK"] == sim.nvmlDeviceGetClockInfo(
        handle, pynvml.NVML_CLOCK_SM
    )


def test_labels_read_once_at_discovery(make_sim, clock: ManualClock) -> None:
    sim = make_sim("2xH100")
    reader = reader_for(sim)
    samples, _ = reader.collect(clock())
    assert samples[1].labels["DCGM_FI_DEV_SERIAL"] == sim.devices[1].serial
    assert samples[1].labels["DCGM_FI_DEV_VBIOS_VERSION"] == "96.00.89.00.01"
    assert samples[1].labels["DCGM_FI_DEV_BRAND"] == brand_name(
        sim.nvmlDeviceGetBrand(sim.nvmlDeviceGetHandleByIndex(1))
    )


def test_a100_has_no_profiling_fields_and_says_so_once(
    make_sim, clock: ManualClock, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="gpufleet.exporter.nvml.reader")
    reader = reader_for(make_sim("2xA100"))
    samples, errors = collect_twice(reader, clock)
    reader.collect(clock.advance(INTERVAL_S))
    reader.discover()
    assert all(not PROF & set(s.values) for s in samples)
    assert errors["nvml_error"] == 0
    assert "DCGM_FI_DEV_GPU_TEMP" in samples[0].values
    lines = [r for r in caplog.records if "GPM" in r.getMessage()]
    assert len(lines) == 1 and "NVIDIA A100-SXM4-80GB" in lines[0].getMessage()


# --- MIG ----------------------------------------------------------------------------------------


def test_mig_instances_are_entities_with_nvml_profile_names(make_sim, clock: ManualClock) -> None:
    sim = make_sim("2xH100:mig=7x1g.10gb")
    reader = reader_for(sim)
    migs = [e for e in reader.entities if e.mig]
    assert len(reader.entities) == 2 + 14 and len(migs) == 14
    expected = sorted((gpu.index, d.gi_id, d.ci_id, d.uuid) for gpu in sim.devices for d in gpu.mig)
    assert sorted((e.gpu, e.mig.gi_id, e.mig.ci_id, e.mig.uuid) for e in migs) == expected
    assert {e.mig.profile for e in migs} == {"1g.10gb"}
    assert all(e.uuid == sim.devices[e.gpu].uuid for e in migs)  # UUID label = parent GPU


@pytest.mark.parametrize(
    "hidden",
    [None, "nvmlDeviceGetGpuInstanceProfileInfo", "nvmlGpuInstanceGetInfo"],
    ids=["profile-table", "device-name-without-profile-table", "device-name-without-gi-info"],
)
def test_mig_profile_names_of_a_mixed_layout(make_sim, hidden: str | None) -> None:
    sim = make_sim("1xH100:mig=1g.10gb,1g.20gb,3g.40gb")
    if hidden:
        sim.set_not_supported(hidden)
    migs = [e.mig for e in reader_for(sim).entities if e.mig]
    expected = {(d.gi_id, d.profile) for d in sim.devices[0].mig}
    assert {(m.gi_id, m.profile) for m in migs} == expected
    assert sorted(m.profile for m in migs) == ["1g.10gb", "1g.20gb", "3g.40gb"]


@pytest.mark.parametrize(
    "privileged", [True, False], ids=["privileged", "GetGpuInstanceById requires a privileged user"]
)
def test_mig_instances_carry_dcgm_gpu_instance_entity_ids(make_sim, privileged) -> None:
    # DCGM numbers GPU g's instances from g times nvmlDeviceGetMaxMigDeviceCount (7 on an
    # H100), profile by profile in NVML's table order (PROFILE_1_SLICE, 3_SLICE, then
    # 1g.20gb's 1_SLICE_REV1), then by instance: what dcgm-exporter's `-d i:<range>` names.
    # Without the instance's profile id, its name ranks it: the ids came out reversed.
    sim = make_sim("1xH100+1xH100:mig=3g.40gb,1g.20gb,1g.10gb")
    sim.set_privileged(privileged)
    migs = [e.mig for e in reader_for(sim).entities if e.mig]
    by_profile = {m.profile: m.dcgm_id for m in migs}
    assert by_profile == {"1g.10gb": 7, "3g.40gb": 8, "1g.20gb": 9}


def test_mig_instances_read_their_own_fields_and_leave_whole_gpu_ones_to_the_gpu(
    make_sim, clock: ManualClock
) -> None:
    sim = make_sim("1xH100:mig=7x1g.10gb")
    reader = reader_for(sim)
    samples, errors = collect_twice(reader, clock)
    assert errors == dict.fromkeys(ERROR_KINDS, 0)
    parent, *instances = samples
    assert parent.entity.mig is None and len(instances) == 7
    for mig in instances:
        handle = sim.nvmlDeviceGetHandleByUUID(mig.entity.mig.uuid)
        memory = sim.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        assert mig.values["DCGM_FI_DEV_FB_TOTAL"] == memory.total >> 20  # the instance's FB
        assert mig.values["DCGM_FI_DEV_FB_TOTAL"] < parent.values["DCGM_FI_DEV_FB_TOTAL"] / 7
        for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL"):
            assert name not in mig.values
        for name in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK"):
            assert name not in mig.values and name in parent.values
        assert set(mig.values) >= PROF  # GPM per GPU instance
        assert mig.labels == parent.labels


# --- faults -------------------------------------------------------------------------------------


def test_lost_gpu_is_left_out_and_counted_while_others_report(make_sim, clock: ManualClock) -> None:
    sim = make_sim("3xH100+1xH100:mig=2x3g.40gb")
    reader = reader_for(sim)
    reader.collect(clock())
    sim.fail_gpu(3)
    samples, errors = reader.collect(clock.advance(INTERVAL_S))
    assert {s.entity.gpu for s in samples} == {0, 1, 2}
    assert errors["gpu_lost"] == 1
    assert all("DCGM_FI_DEV_GPU_TEMP" in s.values for s in samples)
    reader.discover()  # the periodic rediscovery keeps the lost GPU, so it stays counted
    samples, errors = reader.collect(clock.advance(INTERVAL_S))
    assert {s.entity.gpu for s in samples} == {0, 1, 2} and errors["gpu_lost"] == 1
    sim.restore_gpu(3)
    samples, errors = reader.collect(clock.advance(INTERVAL_S))
    assert [s.entity.gpu for s in samples] == [0, 1, 2, 3, 3, 3]
    assert errors["gpu_lost"] == 0


def test_not_supported_field_is_omitted_without_error(make_sim, clock: ManualClock, caplog) -> None:
    caplog.set_level(logging.INFO, logger="gpufleet.exporter.nvml.reader")
    sim = make_sim("2xH100")
    sim.set_not_supported("nvmlDeviceGetPowerUsage", index=1)
    sim.set_not_supported(pynvml.NVML_FI_DEV_MEMORY_TEMP)
    reader = reader_for(sim)
    samples, errors = collect_twice(reader, clock)
    reader.collect(clock.advance(INTERVAL_S))
    assert errors == dict.fromkeys(ERROR_KINDS, 0)
    assert "DCGM_FI_DEV_POWER_USAGE" in samples[0].values
    assert "DCGM_FI_DEV_POWER_USAGE" not in samples[1].values
    assert all("DCGM_FI_DEV_MEMORY_TEMP" not in s.values for s in samples)
    assert all("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in s.values for s in samples)
    notes = [r.getMessage() for r in caplog.records if "not supported" in r.getMessage()]
    assert sum("DCGM_FI_DEV_MEMORY_TEMP" in n for n in notes) == 1  # once per field and model


class TemperatureFails(SimulatedNvml):
    """The sim with one call failing outright, as a flaky driver does."""

    def nvmlDeviceGetTemperature(self, handle, sensor):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)


def test_failing_call_drops_its_value_and_is_counted(make_sim, clock: ManualClock) -> None:
    reader = reader_for(make_sim("2xH100", TemperatureFails))
    samples, errors = reader.collect(clock())
    assert errors["nvml_error"] == 2
    assert all("DCGM_FI_DEV_GPU_TEMP" not in s.values for s in samples)
    assert all("DCGM_FI_DEV_POWER_USAGE" in s.values for s in samples)


# --- counters and rates -------------------------------------------------------------------------


def test_nvlink_rate_from_the_second_collection(make_sim, clock: ManualClock) -> None:
    sim = make_sim("1xH100")
    reader = reader_for(
        sim, ["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0"]
    )
    handle = sim.nvmlDeviceGetHandleByIndex(0)

    def raw_kib(scope: int) -> float:
        rx, tx = sim.nvmlDeviceGetFieldValues(
            handle,
            [
                (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, scope),
                (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, scope),
            ],
        )
        return float(rx.value.ullVal + tx.value.ullVal)

    first, _ = reader.collect(clock())
    before = raw_kib(0xFFFFFFFF)
    assert "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" not in first[0].values
    second, _ = reader.collect(clock.advance(10.0))
    after = raw_kib(0xFFFFFFFF)
    expected_mb_per_s = (after - before) * 1024 / 1e6 / 10.0
    values = second[0].values
    assert values["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == pytest.approx(expected_mb_per_s)
    assert 0 < values["DCGM_FI_DEV_NVLINK_BANDWIDTH_L0"] < expected_mb_per_s


def test_rates_survive_rediscovery(make_sim, clock: ManualClock) -> None:
    reader = reader_for(
        make_sim("1xH100"), ["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_PROF_SM_ACTIVE"]
    )
    reader.collect(clock())
    reader.discover()
    samples, _ = reader.collect(clock.advance(INTERVAL_S))
    assert set(samples[0].values) == {
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_PROF_SM_ACTIVE",
    }
    reader.close()


def test_energy_counter_is_monotonic(make_sim, clock: ManualClock) -> None:
    reader = reader_for(make_sim("2xH100"), ["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"])
    readings = []
    for _ in range(6):
        samples, _ = reader.collect(clock.advance(INTERVAL_S))
        readings.append([s.values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] for s in samples])
    for gpu in range(2):
        series = [r[gpu] for r in readings]
        assert series == sorted(series) and series[-1] > series[0]


# --- processes ----------------------------------------------------------------------------------


def test_processes_per_gpu_and_per_mig_instance(make_sim, clock: ManualClock) -> None:
    sim = make_sim("1xH100+1xH100:mig=7x1g.10gb")
    mig_uuid = sim.devices[1].mig[2].uuid
    on_gpu = sim.spawn_process(
        sim.devices[0].uuid, pod_uid="a", used_memory_bytes=3 * MIB * 1024, sm_share=0.5
    )
    on_mig = sim.spawn_process(mig_uuid, pod_uid="b", used_memory_bytes=MIB * 1024, sm_share=1.0)
    reader = reader_for(sim, ["DCGM_FI_DEV_FB_USED"])
    samples, _ = collect_twice(reader, clock)
    processes = {s.entity.key: s.processes for s in samples}
    gpu_procs = processes[(0, None)]
    assert [(p.pid, p.used_memory_bytes) for p in gpu_procs] == [(on_gpu, 3 * MIB * 1024)]
    assert gpu_procs[0].sm_util_percent is not None
    mig_key = next(s.entity.key for s in samples if s.entity.mig and s.entity.mig.uuid == mig_uuid)
    assert [(p.pid, p.used_memory_bytes) for p in processes[mig_key]] == [(on_mig, MIB * 1024)]
    # nvml.h: "On MIG-enabled GPUs, querying process utilization is not currently supported"
    assert processes[mig_key][0].sm_util_percent is None
    others = [k for k in processes if k[0] == 1 and k != mig_key and k[1] is not None]
    assert all(processes[k] == () for k in others)


def test_a_mig_gpus_aggregates_refused_to_an_unprivileged_caller_are_no_errors(
    make_sim, clock: ManualClock, caplog
) -> None:
    """nvml.h: in MIG mode a GPU's memory and processes come back "only if the caller has
    appropriate privileges" (CAP_SYS_ADMIN, which the chart does not give the exporter).
    Every collection counted two nvml_errors per MIG GPU for a steady fact; now it is one
    warning, and the instances still answer for themselves."""
    sim = make_sim("1xH100+1xH100:mig=2x3g.40gb")
    sim.set_privileged(False)
    reader = reader_for(sim, ["DCGM_FI_DEV_FB_USED"])
    for _ in range(3):
        samples, errors = reader.collect(clock.advance(INTERVAL_S))
        assert errors == dict.fromkeys(ERROR_KINDS, 0)
    by_entity = {s.entity.key: s for s in samples}
    assert "DCGM_FI_DEV_FB_USED" not in by_entity[(1, None)].values
    assert all("DCGM_FI_DEV_FB_USED" in s.values for k, s in by_entity.items() if k[1] is not None)
    refused = [r.getMessage() for r in caplog.records if "no permission" in r.getMessage()]
    assert len(refused) == 2  # memory and processes, each once, not at every collection


def test_no_permission_anywhere_else_is_an_error(make_sim, clock: ManualClock) -> None:
    """NoPermission is a steady fact on a MIG-enabled GPU only; a whole GPU's reads refused
    (a device node the container lacks) are errors, counted as any other."""
    sim = make_sim("1xH100")
    reader = reader_for(sim, ["DCGM_FI_DEV_FB_USED"])
    real = sim.nvmlDeviceGetMemoryInfo

    def refused(handle, version=None):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    sim.nvmlDeviceGetMemoryInfo = refused
    try:
        _, errors = reader.collect(clock.advance(INTERVAL_S))
    finally:
        sim.nvmlDeviceGetMemoryInfo = real
    assert errors["nvml_error"] >= 1


def test_processes_unknown_when_nvml_cannot_list_them(make_sim, clock: ManualClock) -> None:
    """ "Could not tell" must reach the snapshot as None, never as () ("no processes")."""
    sim = make_sim("1xH100+1xH100:mig=2x3g.40gb")
    sim.spawn_process(sim.devices[0].uuid, pod_uid="a", used_memory_bytes=MIB, sm_share=0.5)
    sim.set_not_supported("nvmlDeviceGetComputeRunningProcesses")
    samples, errors = collect_twice(reader_for(sim, ["DCGM_FI_DEV_FB_USED"]), clock)
    assert [s.processes for s in samples] == [None, None, None, None]
    assert errors == dict.fromkeys(ERROR_KINDS, 0)  # NotSupported: omitted, not an error


def test_process_sm_util_is_kept_between_nvml_samples(make_sim, clock: ManualClock) -> None:
    """NVML answers only samples newer than the last call: a collection with no new sample
    keeps each running process's latest value, and an ended process is forgotten."""
    sim = make_sim("1xH100")
    pid = sim.spawn_process(sim.devices[0].uuid, pod_uid="a", used_memory_bytes=MIB, sm_share=0.5)
    reader = reader_for(sim, ["DCGM_FI_DEV_FB_USED"])
    first, _ = collect_twice(reader, clock)
    util = first[0].processes[0].sm_util_percent
    assert util is not None
    again, _ = reader.collect(clock())  # no time passed: NVML has no newer sample
    assert [(p.pid, p.sm_util_percent) for p in again[0].processes] == [(pid, util)]


def test_a_process_gone_idle_reads_0_not_its_last_busy_value(make_sim, clock) -> None:
    """NVML samples only processes that used the SM in the period. A pod gone idle kept its
    last busy SM % for as long as it lived, alone on the GPU (NVML: NotFound) or beside a
    busy one (its sample left out); both read 0 once a new period has ended."""
    sim = make_sim("1xH100")
    gpu = sim.devices[0].uuid
    idle = sim.spawn_process(gpu, pod_uid="a", used_memory_bytes=MIB, sm_share=0.5)
    reader = reader_for(sim, ["DCGM_FI_DEV_FB_USED"])

    def sm() -> dict[int, float | None]:
        samples, _ = reader.collect(clock.advance(INTERVAL_S))
        return {p.pid: p.sm_util_percent for p in samples[0].processes}

    assert sm()[idle] > 0
    sim.set_process_sm_share(idle, 0.0)
    assert sm() == {idle: 0.0}  # alone: NVML answers NotFound
    busy = sim.spawn_process(gpu, pod_uid="b", used_memory_bytes=MIB, sm_share=0.5)
    sim.set_process_sm_share(idle, 0.5)
    assert sm()[idle] > 0
    sim.set_process_sm_share(idle, 0.0)
    after = sm()
    assert after[idle] == 0.0 and after[busy] > 0  # beside a busy one: its sample left out


def test_processes_are_read_only_on_the_gpus_asked(make_sim, clock: ManualClock) -> None:
    """A GPU left out of `processes_of` says "could not tell" on itself and its MIG
    instances; the GPUs asked keep their processes."""
    sim = make_sim("1xH100+1xH100:mig=2x3g.40gb")
    on_gpu = sim.spawn_process(sim.devices[0].uuid, pod_uid="a", used_memory_bytes=MIB, sm_share=1)
    sim.spawn_process(sim.devices[1].mig[0].uuid, pod_uid="b", used_memory_bytes=MIB, sm_share=1)
    reader = reader_for(sim, ["DCGM_FI_DEV_FB_USED"])
    reader.collect(clock(), processes_of={0})
    samples, errors = reader.collect(clock.advance(INTERVAL_S), processes_of={0})
    assert [p.pid for p in samples[0].processes] == [on_gpu]
    assert [s.processes for s in samples[1:]] == [None, None, None]
    assert errors == dict.fromkeys(ERROR_KINDS, 0)


def test_processes_known_empty_stay_empty(make_sim, clock: ManualClock) -> None:
    samples, _ = collect_twice(reader_for(make_sim("1xH100"), ["DCGM_FI_DEV_FB_USED"]), clock)
    assert samples[0].processes == ()


# --- one bad item costs only itself --------------------------------------------------------------


class UtilizationWithoutGpu(SimulatedNvml):
    """A driver answering a struct this code does not expect: `gpu` is missing."""

    def nvmlDeviceGetUtilizationRates(self, handle):
        return type("Rates", (), {"memory": 42})()


def test_a_failing_conversion_drops_only_its_field(make_sim, clock: ManualClock, caplog) -> None:
    caplog.set_level(logging.ERROR, logger="gpufleet.exporter.nvml.reader")
    reader = reader_for(make_sim("2xH100", UtilizationWithoutGpu))
    samples, errors = reader.collect(clock())
    assert [s.entity.gpu for s in samples] == [0, 1]
    assert errors["unexpected"] == 2
    for sample in samples:
        assert "DCGM_FI_DEV_GPU_UTIL" not in sample.values
        assert sample.values["DCGM_FI_DEV_MEM_COPY_UTIL"] == 42.0
        assert "DCGM_FI_DEV_GPU_TEMP" in sample.values
    reader.collect(clock.advance(INTERVAL_S))
    assert sum("DCGM_FI_DEV_GPU_UTIL" in r.getMessage() for r in caplog.records) == 1


class OneMigSliceBroken(SimulatedNvml):
    """The compute instance of one MIG device cannot be read."""

    broken_uuid = ""

    def nvmlDeviceGetComputeInstanceId(self, device):
        if self.nvmlDeviceGetUUID(device) == self.broken_uuid:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        return super().nvmlDeviceGetComputeInstanceId(device)


def test_a_failing_mig_slice_hides_only_itself(make_sim, clock: ManualClock) -> None:
    sim = make_sim("1xH100+1xH100:mig=3x2g.20gb", OneMigSliceBroken)
    sim.broken_uuid = sim.devices[1].mig[1].uuid
    reader = reader_for(sim, ["DCGM_FI_DEV_FB_USED"])
    migs = {e.mig.uuid for e in reader.entities if e.mig}
    assert migs == {sim.devices[1].mig[0].uuid, sim.devices[1].mig[2].uuid}
    assert [e.gpu for e in reader.entities if e.mig is None] == [0, 1]
    samples, errors = reader.collect(clock())
    assert len(samples) == 4 and errors["nvml_error"] == 1  # counted once, at discovery
    assert reader.collect(clock.advance(INTERVAL_S))[1]["nvml_error"] == 0


class PciInfoBreaksOnGpu1(SimulatedNvml):
    def nvmlDeviceGetPciInfo(self, handle):
        if self.nvmlDeviceGetIndex(handle) == 1:
            raise RuntimeError("driver surprise")
        return super().nvmlDeviceGetPciInfo(handle)


def test_a_gpu_failing_discovery_unexpectedly_costs_only_itself(
    make_sim, clock: ManualClock
) -> None:
    reader = reader_for(make_sim("3xH100", PciInfoBreaksOnGpu1))
    assert [e.gpu for e in reader.entities] == [0, 2]
    assert reader.collect(clock())[1]["unexpected"] == 1
