"""Seeded request traces by workload family: the traffic shapes a policy must hold on
without having been tuned on them.

A spec is `FAMILY[:key=value,...]`, e.g. `flash:height=10,length=180` or
`mix:of=diurnal+flash,flash.height=20`. Every family shares the request-size keys
(`SIZE_KEYS`) and has its own arrival keys (`FAMILIES`). The same spec and seed give the
same trace, request for request. Pure: numpy's seeded generator, no clock, no files
(`replay.trace_file` writes CSVs).

Arrivals are a Poisson process whose rate is piecewise constant per second; sizes are
lognormal with the given means, and a `tail` fraction of prompts comes from a Pareto tail
above `tail_min` tokens (long-context traffic), everything capped at `max_prompt` and
`max_output`.
"""

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from gpufleet.autoscaler.replay.core.trace import Trace, scale_trace, trace_from_arrays
from gpufleet.core.messages import did_you_mean
from gpufleet.core.numbers import finite_float

# Keys every family takes: its length, base rate and request sizes.
SIZE_KEYS: Mapping[str, float] = {
    "duration": 3600.0,  # seconds of trace
    "rate": 2.0,  # base requests per second
    "prompt": 1000.0,  # mean prompt tokens (lognormal body)
    "prompt_sigma": 1.0,
    "output": 200.0,  # mean output tokens
    "output_sigma": 0.8,
    "tail": 0.0,  # fraction of prompts drawn from the Pareto tail
    "tail_min": 30000.0,  # where the tail starts, tokens
    "tail_alpha": 1.5,  # Pareto shape: smaller is heavier
    "max_prompt": 131072.0,
    "max_output": 16384.0,
}

# Each family's own keys and defaults (times in seconds, heights as multiples of `rate`).
FAMILIES: Mapping[str, Mapping[str, float]] = {
    # A crowd `height` times the base rate for `length` seconds from `at` (-1: the middle),
    # ramping up and down over `ramp` seconds.
    "flash": {"height": 10.0, "length": 180.0, "at": -1.0, "ramp": 10.0},
    # A sine between the base rate and `peak` times it, one cycle per `period` (-1: the
    # trace's duration), starting at its trough shifted by `phase` (0-1 of a period).
    "diurnal": {"peak": 4.0, "period": -1.0, "phase": 0.0},
    # A two-state Markov-modulated Poisson process: `height` times the base rate while on,
    # the base rate while off; exponential sojourns with means `on` and `off` seconds.
    "onoff": {"height": 5.0, "on": 60.0, "off": 300.0},
    # Busy for `busy` seconds at the base rate, then silent for `idle` seconds, repeated:
    # the shape that scale-to-zero is for.
    "quiet": {"busy": 600.0, "idle": 1800.0},
    # The base rate throughout, long prompts with a heavy tail (mean about 12k tokens, a
    # few percent over 30k).
    "longctx": {},
}
# What `longctx` changes in the size keys.
_LONGCTX_SIZES = {"prompt": 10000.0, "prompt_sigma": 0.8, "tail": 0.03, "tail_alpha": 1.3}
MIX = "mix"  # `mix:of=a+b,...`: the superposition of families, each at the base rate


class WorkloadError(ValueError):
    """A spec that cannot be generated; the message names the spec and the key."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """A parsed spec: the family (or mix) and every key's value, defaults filled in."""

    spec: str
    family: str
    params: Mapping[str, float]
    parts: tuple["Workload", ...] = ()  # a mix's families


def parse_workload(spec: str) -> Workload:
    """Parse `FAMILY[:key=value,...]`. Raises WorkloadError naming the bad family or key."""
    family, _, rest = spec.strip().partition(":")
    pairs = _pairs(spec, rest)
    if family == MIX:
        return _parse_mix(spec, pairs)
    if family not in FAMILIES:
        choices = (*FAMILIES, MIX)
        raise WorkloadError(
            f"workload {spec!r}: unknown family {family!r}{did_you_mean(family, choices)}; "
            f"expected one of {', '.join(choices)}"
        )
    return Workload(spec=spec, family=family, params=_params(spec, family, pairs))


def generate(workload: Workload, *, seed: int) -> Trace:
    """The workload's requests, seeded: the same workload and seed give the same trace."""
    rng = np.random.default_rng(seed)
    duration = int(workload.params["duration"])
    if workload.parts:
        rate = sum(_RATES[p.family](p.params, duration, rng) for p in workload.parts)
    else:
        rate = _RATES[workload.family](workload.params, duration, rng)
    expected = float(np.sum(rate))
    if not expected <= _MAX_REQUESTS:  # nan too
        raise WorkloadError(
            f"workload {workload.spec!r}: about {expected:.3g} requests, more than "
            f"{_MAX_REQUESTS:,}: lower its rate, heights or duration"
        )
    counts = rng.poisson(rate)
    seconds = np.repeat(np.arange(duration, dtype=np.float64), counts)
    arrivals = seconds + rng.uniform(0.0, 1.0, size=len(seconds))
    prompts, outputs = _sizes(workload.params, len(arrivals), rng)
    return trace_from_arrays(arrivals, prompts, outputs, name=_name(workload.spec, seed))


def workload_trace(spec: str, *, seed: int, scale: int = 1) -> Trace:
    """The trace of a spec, seeded and, like a CSV trace, scaled to `scale` jittered copies
    (named `-x{scale}`). Raises WorkloadError for a bad spec."""
    trace = generate(parse_workload(spec), seed=seed)
    if scale == 1:
        return trace
    scaled = scale_trace(trace, scale=scale, seed=seed)
    return replace(scaled, name=f"{trace.name}-x{scale}")


def _pairs(spec: str, rest: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise WorkloadError(f"workload {spec!r}: {item!r} is not key=value")
        pairs[key.strip()] = value.strip()
    return pairs


def _params(spec: str, family: str, pairs: Mapping[str, str]) -> dict[str, float]:
    defaults = {**SIZE_KEYS, **(_LONGCTX_SIZES if family == "longctx" else {}), **FAMILIES[family]}
    params = dict(defaults)
    for key, text in pairs.items():
        if key not in defaults:
            raise WorkloadError(
                f"workload {spec!r}: unknown key {key!r} for {family}"
                f"{did_you_mean(key, defaults)}; its keys are {', '.join(defaults)}"
            )
        params[key] = _number(spec, key, text)
    _check(spec, params)
    return params


def _parse_mix(spec: str, pairs: Mapping[str, str]) -> Workload:
    names = [n for n in pairs.get("of", "").split("+") if n]
    if not names:
        raise WorkloadError(f"workload {spec!r}: a mix needs of=FAMILY+FAMILY")
    shared = {k: v for k, v in pairs.items() if k != "of" and "." not in k}
    parts = []
    for name in names:
        if name not in FAMILIES:
            raise WorkloadError(
                f"workload {spec!r}: unknown family {name!r} in of={pairs['of']}"
                f"{did_you_mean(name, FAMILIES)}"
            )
        own = {k.partition(".")[2]: v for k, v in pairs.items() if k.startswith(f"{name}.")}
        parts.append(
            Workload(spec=spec, family=name, params=_params(spec, name, {**shared, **own}))
        )
    stray = [k for k in pairs if "." in k and k.partition(".")[0] not in names]
    if stray:
        raise WorkloadError(f"workload {spec!r}: {stray[0]!r} names no family of the mix")
    if len({p.params["duration"] for p in parts}) > 1:
        raise WorkloadError(f"workload {spec!r}: a mix has one duration; set it for all")
    return Workload(spec=spec, family=MIX, params=parts[0].params, parts=tuple(parts))


def _number(spec: str, key: str, text: str) -> float:
    try:
        return finite_float(text)
    except ValueError as err:
        raise WorkloadError(f"workload {spec!r}: {key}={text!r} {err}") from None


# Keys that may be negative (-1: "choose for me"), and those that may be 0.
# A trace's size in memory and time: a hundred million requests is hours of simulation.
_MAX_REQUESTS = 100_000_000
# Token counts beyond this are typos (the longest contexts are about 10^6), and 10^30
# overflowed the int64 sizes.
_MAX_TOKENS = 10_000_000
_TOKEN_KEYS = frozenset({"prompt", "output", "tail_min", "max_prompt", "max_output"})
# Sojourns drawn one by one: a mean under a second (the rate's resolution) took billions.
_AT_LEAST_A_SECOND = frozenset({"on", "off"})
_MAY_BE_NEGATIVE = frozenset({"at", "period"})
_MAY_BE_ZERO = frozenset({"rate", "tail", "phase", "ramp", "at", "idle"})


def _check(spec: str, params: Mapping[str, float]) -> None:
    for key, value in params.items():
        if key in _MAY_BE_NEGATIVE and value == -1.0:
            continue
        if value < 0 or (value == 0 and key not in _MAY_BE_ZERO):
            raise WorkloadError(f"workload {spec!r}: {key}={value:g} must be > 0")
        if key in _TOKEN_KEYS and value > _MAX_TOKENS:
            raise WorkloadError(f"workload {spec!r}: {key}={value:g} is over {_MAX_TOKENS:,}")
        if key in _AT_LEAST_A_SECOND and value < 1:
            raise WorkloadError(f"workload {spec!r}: {key}={value:g} must be >= 1 s")
    if params["duration"] < 1 or params["duration"] > 30 * 86400:
        raise WorkloadError(f"workload {spec!r}: duration must be 1 s to 30 days")
    for key in ("tail", "phase"):
        if params.get(key, 0.0) > 1:
            raise WorkloadError(f"workload {spec!r}: {key} is a fraction (0-1)")


def _flash(p: Mapping[str, float], duration: int, rng: np.random.Generator) -> np.ndarray:
    t = np.arange(duration, dtype=np.float64)
    start = duration / 2 if p["at"] == -1.0 else p["at"]
    end = start + p["length"]
    ramp = max(p["ramp"], 1e-9)
    # 0 outside the crowd, 1 inside, linear over the ramps.
    shape = np.clip(np.minimum(t - start + ramp, end - t) / ramp, 0.0, 1.0)
    return p["rate"] * (1.0 + (p["height"] - 1.0) * shape)


def _diurnal(p: Mapping[str, float], duration: int, rng: np.random.Generator) -> np.ndarray:
    period = duration if p["period"] == -1.0 else p["period"]
    t = np.arange(duration, dtype=np.float64)
    wave = 0.5 - 0.5 * np.cos(2 * np.pi * (t / period + p["phase"]))  # 0 at the trough
    return p["rate"] * (1.0 + (p["peak"] - 1.0) * wave)


def _onoff(p: Mapping[str, float], duration: int, rng: np.random.Generator) -> np.ndarray:
    rate = np.full(duration, p["rate"])
    at, on = 0.0, False
    while at < duration:
        stay = rng.exponential(p["on"] if on else p["off"])
        if on:
            rate[int(at) : int(min(duration, at + stay))] *= p["height"]
        at, on = at + stay, not on
    return rate


def _quiet(p: Mapping[str, float], duration: int, rng: np.random.Generator) -> np.ndarray:
    t = np.arange(duration, dtype=np.float64)
    busy = (t % (p["busy"] + p["idle"])) < p["busy"]
    return np.where(busy, p["rate"], 0.0)


def _steady(p: Mapping[str, float], duration: int, rng: np.random.Generator) -> np.ndarray:
    return np.full(duration, p["rate"])


_RATES: Mapping[str, Callable[[Mapping[str, float], int, np.random.Generator], np.ndarray]] = {
    "flash": _flash,
    "diurnal": _diurnal,
    "onoff": _onoff,
    "quiet": _quiet,
    "longctx": _steady,
}


def _sizes(
    p: Mapping[str, float], n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    prompts = _lognormal(p["prompt"], p["prompt_sigma"], n, rng)
    tail = rng.uniform(size=n) < p["tail"]
    # Pareto (Lomax) above tail_min: tail_min * (1 + X), X ~ Lomax(alpha).
    prompts[tail] = p["tail_min"] * (1.0 + rng.pareto(p["tail_alpha"], size=int(tail.sum())))
    outputs = _lognormal(p["output"], p["output_sigma"], n, rng)
    prompts = np.clip(np.rint(prompts), 1, p["max_prompt"]).astype(np.int64)
    outputs = np.clip(np.rint(outputs), 1, p["max_output"]).astype(np.int64)
    return prompts, outputs


def _lognormal(mean: float, sigma: float, n: int, rng: np.random.Generator) -> np.ndarray:
    # The lognormal whose mean is `mean`: mu = ln(mean) - sigma^2 / 2.
    return rng.lognormal(math.log(mean) - sigma * sigma / 2, sigma, size=n)


def _name(spec: str, seed: int) -> str:
    """A file-safe trace name: the spec with its punctuation folded, and the seed."""
    safe = "".join(c if c.isalnum() or c in "-." else "-" for c in spec.strip())
    return f"{safe.strip('-')}-s{seed}"
