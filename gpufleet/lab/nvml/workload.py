"""The simulator's load model: smooth, seeded, deterministic functions of elapsed time.

Pure: no clock, no randomness, no I/O. Every quantity is a function of (seed key, elapsed
seconds, the processes present): the same inputs always give the same values. Utilization
is a sum of sinusoids with hashed phases and periods plus each process's share; power,
temperature and clocks follow from utilization. Counters (NVLink and PCIe bytes, PCIe
replays, throttle times) are closed-form integrals of non-negative rates, so they never
decrease as time advances. Energy depends on the process history and is integrated by the
caller (`machine`).
"""

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.lab.nvml.models import GpuModel

_GIB = 1 << 30


def unit_floats(key: str, n: int) -> tuple[float, ...]:
    """n floats in [0, 1) derived from `key` (stable across runs and platforms)."""
    out: list[float] = []
    block = 0
    while len(out) < n:
        digest = hashlib.sha256(f"{key}#{block}".encode()).digest()
        out += [int.from_bytes(digest[i : i + 8], "big") / 2**64 for i in range(0, 32, 8)]
        block += 1
    return tuple(out[:n])


@dataclass(frozen=True, slots=True)
class Wave:
    """base + sum(amp * sin(omega * t + phase)): smooth, within base -/+ sum(amp)."""

    base: float
    terms: tuple[tuple[float, float, float], ...]  # (amp, omega rad/s, phase rad)

    def at(self, t: float) -> float:
        return self.base + sum(a * math.sin(w * t + p) for a, w, p in self.terms)

    def integral(self, t: float) -> float:
        """Integral from 0 to t; non-decreasing in t when base >= sum(amp)."""
        return self.base * t + sum(
            a / w * (math.cos(p) - math.cos(w * t + p)) for a, w, p in self.terms
        )


def wave(key: str, *, low: float, high: float) -> Wave:
    """A seeded wave spanning [low, high], made of three sinusoids with 40 s to 15 min periods."""
    u = unit_floats(key, 9)
    weights = [0.2 + u[i] for i in range(3)]
    half = (high - low) / 2
    terms = tuple(
        (
            half * weights[i] / sum(weights),
            2 * math.pi / (40 + 860 * u[3 + i]),
            2 * math.pi * u[6 + i],
        )
        for i in range(3)
    )
    return Wave(low + half, terms)


def activity(seed: int, pid: int) -> Wave:
    """How busy a process keeps its share of the GPU: 0.6 to 1.0 of it."""
    return wave(f"{seed}:pid:{pid}", low=0.6, high=1.0)


def background(key: str) -> Wave:
    """Load not owned by any simulated process; dips to 0 now and then so idle is exercised."""
    return wave(key, low=-0.05, high=0.15)


def utilization(bg: float, demands: Iterable[float]) -> tuple[float, float]:
    """(entity utilization in [0, 1], scale): a process's share of it is demand / scale."""
    total = max(0.0, bg) + sum(demands)
    scale = max(1.0, total)
    return min(1.0, total), scale


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuTraits:
    """Seeded per-GPU constants and counter rates."""

    background: Wave
    nvlink_kib_per_s: Wave  # per direction, all links
    pcie_tx_bytes_per_s: Wave
    pcie_rx_bytes_per_s: Wave
    replays_per_s: float
    replay_base: int
    energy_base_mj: int  # energy since the driver loaded, before the simulation started
    violation_ratio: tuple[float, ...]  # by NVML_PERF_POLICY_* index (0..11)
    ecc_sbe_volatile: int
    ecc_sbe_aggregate: int
    remapped_correctable: int


def gpu_traits(seed: int, index: int) -> GpuTraits:
    key = f"{seed}:gpu:{index}"
    u = unit_floats(key + ":traits", 8)
    violation = [0.0] * 12
    violation[0] = 0.02 * u[0]  # power capping
    violation[4] = 0.3 + 0.4 * u[1]  # low utilization
    violation[10] = 0.01 * u[2]  # total app clocks
    violation[11] = 0.01 * u[2]  # total base clocks
    return GpuTraits(
        background=background(key + ":bg"),
        nvlink_kib_per_s=wave(key + ":nvlink", low=1 << 20, high=40 << 20),
        pcie_tx_bytes_per_s=wave(key + ":pcietx", low=0.1 * _GIB, high=6 * _GIB),
        pcie_rx_bytes_per_s=wave(key + ":pcierx", low=0.1 * _GIB, high=8 * _GIB),
        replays_per_s=1 / 600 if u[3] < 0.25 else 0.0,
        replay_base=int(u[4] * 4),
        energy_base_mj=int(3e9 + 2e9 * u[5]),
        violation_ratio=tuple(violation),
        ecc_sbe_volatile=int(u[6] * 3),
        ecc_sbe_aggregate=int(u[6] * 3) + int(u[7] * 40),
        remapped_correctable=int(u[7] * 3),
    )


def power_mw(model: GpuModel, util: float) -> int:
    return round(model.idle_power_mw + (model.power_limit_mw - model.idle_power_mw) * util)


def temperature_c(model: GpuModel, util: float) -> int:
    return round(model.idle_temp_c + (model.load_temp_c - model.idle_temp_c) * util)


def sm_clock_mhz(model: GpuModel, util: float) -> int:
    """Idle clock when idle; the max clock under load, power-capped by up to 8% near 100%."""
    if util < 0.01:
        return model.idle_sm_clock_mhz
    return round(model.max_sm_clock_mhz * (1 - 0.08 * max(0.0, util - 0.9) / 0.1))


def mem_clock_mhz(model: GpuModel, util: float) -> int:
    # HBM runs at a fixed clock; GDDR drops to its lowest P-state clock when idle.
    return model.max_mem_clock_mhz if model.hbm or util >= 0.01 else 405
