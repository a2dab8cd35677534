"""pynvml's counter and health functions for the simulator, and `nvmlDeviceGetFieldValues`.

Counters (energy, PCIe replays and bytes, NVLink bytes, throttle times) only ever grow.
`nvmlDeviceGetFieldValues` answers per entry, as NVML does: an unknown or unsupported field
(or one on a MIG handle) gets `nvmlReturn = NVML_ERROR_NOT_SUPPORTED` while the others are
filled; only a bad handle or a lost GPU fails the whole call.
"""

from typing import Any

import pynvml

from gpufleet.lab.nvml import workload
from gpufleet.lab.nvml.machine import UINT_MAX, Machine, Node, nvml_error

_UI = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
_ULL = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
_ECC_FIELDS = {
    pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: (
        pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
        pynvml.NVML_VOLATILE_ECC,
    ),
    pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: (
        pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        pynvml.NVML_VOLATILE_ECC,
    ),
    pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: (
        pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
        pynvml.NVML_AGGREGATE_ECC,
    ),
    pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: (
        pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        pynvml.NVML_AGGREGATE_ECC,
    ),
}
_NVLINK_ERROR_TOTALS = {
    pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
    pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
    pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
    pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
}
_PERF_POLICY_FIELDS = {
    pynvml.NVML_FI_DEV_PERF_POLICY_POWER: pynvml.NVML_PERF_POLICY_POWER,
    pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL: pynvml.NVML_PERF_POLICY_THERMAL,
    pynvml.NVML_FI_DEV_PERF_POLICY_SYNC_BOOST: pynvml.NVML_PERF_POLICY_SYNC_BOOST,
    pynvml.NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT: pynvml.NVML_PERF_POLICY_BOARD_LIMIT,
    pynvml.NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION: pynvml.NVML_PERF_POLICY_LOW_UTILIZATION,
    pynvml.NVML_FI_DEV_PERF_POLICY_RELIABILITY: pynvml.NVML_PERF_POLICY_RELIABILITY,
    pynvml.NVML_FI_DEV_PERF_POLICY_TOTAL_APP_CLOCKS: pynvml.NVML_PERF_POLICY_TOTAL_APP_CLOCKS,
    pynvml.NVML_FI_DEV_PERF_POLICY_TOTAL_BASE_CLOCKS: pynvml.NVML_PERF_POLICY_TOTAL_BASE_CLOCKS,
}
_REMAP_FIELDS = (
    pynvml.NVML_FI_DEV_REMAPPED_COR,
    pynvml.NVML_FI_DEV_REMAPPED_UNC,
    pynvml.NVML_FI_DEV_REMAPPED_PENDING,
    pynvml.NVML_FI_DEV_REMAPPED_FAILURE,
)
_NVLINK_BYTES = {
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: 1.0,
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: 0.97,
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX: 1.06,  # data plus protocol overhead
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX: 1.03,
}
_NOT_SUPPORTED = (pynvml.NVML_ERROR_NOT_SUPPORTED, _UI, 0)


class CounterCalls:
    """Counters, ECC/remapping health, NVLink state and field values."""

    _m: Machine

    # --- shared value sources ------------------------------------------------

    def _violation_ns(self, node: Node, policy: int, e: float) -> int:
        ratios = node.traits.violation_ratio
        return int(ratios[policy] * e * 1e9) if 0 <= policy < len(ratios) else 0

    def _ecc(self, node: Node, error_type: int, counter_type: int) -> int:
        if error_type != pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return self._m.uncorrectable.get(node.gpu.index, 0)
        t = node.traits
        return (
            t.ecc_sbe_volatile if counter_type == pynvml.NVML_VOLATILE_ECC else t.ecc_sbe_aggregate
        )

    def _replays(self, node: Node, e: float) -> int:
        return node.traits.replay_base + int(node.traits.replays_per_s * e)

    def _field(self, node: Node, field_id: int, scope: int, e: float) -> tuple[int, int, float]:
        """(nvmlReturn, valueType, value) of one field."""
        model, traits = node.model, node.traits
        if node.mig is not None or self._m.is_not_supported(field_id, node):
            return _NOT_SUPPORTED
        if field_id in _ECC_FIELDS:
            return 0, _ULL, self._ecc(node, *_ECC_FIELDS[field_id])
        if field_id in _PERF_POLICY_FIELDS:
            return 0, _ULL, self._violation_ns(node, _PERF_POLICY_FIELDS[field_id], e)
        if field_id == pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
            return 0, _ULL, self._m.energy_mj(node)
        if field_id in (pynvml.NVML_FI_DEV_POWER_INSTANT, pynvml.NVML_FI_DEV_POWER_AVERAGE):
            return 0, _UI, workload.power_mw(model, self._m.load(node).util)
        if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP:
            if not model.hbm:
                return _NOT_SUPPORTED
            return 0, _UI, workload.temperature_c(model, self._m.load(node).util) + 6
        if field_id == pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER:
            return 0, _UI, self._replays(node, e)
        if field_id == pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES:
            return 0, _ULL, self._m.counter(traits.pcie_tx_bytes_per_s, e)
        if field_id == pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES:
            return 0, _ULL, self._m.counter(traits.pcie_rx_bytes_per_s, e)
        if field_id in _REMAP_FIELDS:
            if not model.row_remapping:
                return _NOT_SUPPORTED
            cor = traits.remapped_correctable
            if field_id == pynvml.NVML_FI_DEV_REMAPPED_PENDING:
                return 0, _UI, int(self._m.uncorrectable.get(node.gpu.index, 0) > 0)
            return 0, _UI, cor if field_id == pynvml.NVML_FI_DEV_REMAPPED_COR else 0
        if not model.nvlinks:
            return _NOT_SUPPORTED
        if field_id == pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT:
            return 0, _UI, model.nvlinks
        if field_id in _NVLINK_ERROR_TOTALS:
            return 0, _ULL, 0
        if field_id in _NVLINK_BYTES:
            if scope != UINT_MAX and scope >= model.nvlinks:
                return pynvml.NVML_ERROR_INVALID_ARGUMENT, _ULL, 0
            kib = self._m.counter(traits.nvlink_kib_per_s, e) * _NVLINK_BYTES[field_id]
            return 0, _ULL, int(kib if scope == UINT_MAX else kib / model.nvlinks)
        return _NOT_SUPPORTED

    # --- pynvml functions -------------------------------------------------

    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: list[Any]) -> Any:
        """A ctypes array of c_nvmlFieldValue_t; ids are ints or (fieldId, scopeId) pairs."""
        node = self._m.enter("nvmlDeviceGetFieldValues", handle)
        e = self._m.now()
        stamp = self._m.wall_us(e)
        values = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
        for fv, requested in zip(values, fieldIds, strict=True):
            field_id, scope = (requested, 0) if isinstance(requested, int) else requested
            fv.fieldId, fv.scopeId, fv.timestamp = field_id, scope, stamp
            fv.nvmlReturn, fv.valueType, value = self._field(node, field_id, scope, e)
            if fv.valueType == _ULL:
                fv.value.ullVal = int(value)
            else:
                fv.value.uiVal = int(value)
        return values

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        node = self._m.enter("nvmlDeviceGetTotalEnergyConsumption", handle, mig_ok=False)
        return self._m.energy_mj(node)

    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int:
        node = self._m.enter("nvmlDeviceGetPcieReplayCounter", handle, mig_ok=False)
        return self._replays(node, self._m.now())

    def nvmlDeviceGetViolationStatus(self, device: Any, perfPolicyType: int) -> Any:
        node = self._m.enter("nvmlDeviceGetViolationStatus", device, mig_ok=False)
        if not 0 <= perfPolicyType < pynvml.NVML_PERF_POLICY_COUNT:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        e = self._m.now()
        violation = pynvml.c_nvmlViolationTime_t()
        violation.referenceTime = self._m.wall_us(e)
        violation.violationTime = self._violation_ns(node, perfPolicyType, e)
        return violation

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        node = self._m.enter("nvmlDeviceGetTotalEccErrors", handle, mig_ok=False)
        if errorType not in (0, 1) or counterType not in (0, 1):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._ecc(node, errorType, counterType)

    def nvmlDeviceGetRetiredPages(self, device: Any, sourceFilter: int) -> list[int]:
        node = self._m.enter("nvmlDeviceGetRetiredPages", device, mig_ok=False)
        if node.model.row_remapping:  # Ampere+ HBM parts remap rows instead
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return []

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: Any) -> int:
        node = self._m.enter("nvmlDeviceGetRetiredPagesPendingStatus", device, mig_ok=False)
        if node.model.row_remapping:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        pending = self._m.uncorrectable.get(node.gpu.index, 0) > 0
        return pynvml.NVML_FEATURE_ENABLED if pending else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetRemappedRows(self, device: Any) -> tuple[int, int, int, int]:
        node = self._m.enter("nvmlDeviceGetRemappedRows", device, mig_ok=False)
        if not node.model.row_remapping:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        pending = int(self._m.uncorrectable.get(node.gpu.index, 0) > 0)
        return (node.traits.remapped_correctable, 0, pending, 0)

    def _nvlink(self, fn: str, device: Any, link: int) -> Node:
        node = self._m.enter(fn, device, mig_ok=False)
        if not node.model.nvlinks:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < node.model.nvlinks:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return node

    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        self._nvlink("nvmlDeviceGetNvLinkState", device, link)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkErrorCounter(self, device: Any, link: int, counter: int) -> int:
        self._nvlink("nvmlDeviceGetNvLinkErrorCounter", device, link)
        if not 0 <= counter < pynvml.NVML_NVLINK_ERROR_COUNT:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return 0
