"""gpufleet's settings changed on top of what its knob maps them to (`--set KEY=VALUE`).

Why: a setting is tried on the tuning grid or one run's minutes without editing the policy
and rebuilding the compiled simulator; a change is then a command line in BENCHMARKS.md
(`python3 -m bench.tuning_grid --set feedback.wait_share=0.035 --json X.json`).
"""

import argparse
import ast
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from gpufleet.autoscaler.core import factory as policies
from gpufleet.autoscaler.core.gpufleet_policy import GpufleetPolicy
from gpufleet.autoscaler.core.gpufleet_settings import GpufleetSettings
from gpufleet.autoscaler.core.policy import Policy
from gpufleet.autoscaler.replay.core import sweep

Override = tuple[str, object]
_KINDS = {bool: "true or false", int: "an integer", float: "a number"}


class SettingError(ValueError):
    """A `--set` key that names no setting; the message starts with `--set KEY:`."""


def add_flag(parser: argparse.ArgumentParser, help: str) -> None:
    """`--set KEY=VALUE`, repeatable, into `args.set` (a list of overrides)."""
    parser.add_argument(
        "--set", type=parse_set, action="append", default=[], metavar="KEY=VALUE", help=help
    )


def parse_set(text: str) -> Override:
    """`KEY=VALUE`, the value a Python literal (`0.8`, `false` and `true` too) or a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    literal = {"true": "True", "false": "False"}.get(raw.lower(), raw)
    try:
        return key, ast.literal_eval(literal)
    except (ValueError, SyntaxError):
        return key, raw


def override(settings: Any, key: str, value: object) -> Any:
    """`settings` with the field at dotted `key` (`forecast.peak_quantile`) set to `value`;
    SettingError naming the key when a part of it is not a field, or the value is not of
    the field's type (an int or `inf` does for a float)."""
    path = key.split(".")
    chain = [settings]
    for i, name in enumerate(path):
        node = chain[-1]
        if not dataclasses.is_dataclass(node) or name not in {
            f.name for f in dataclasses.fields(node)
        }:
            where = ".".join(path[:i]) or type(settings).__name__
            raise SettingError(f"--set {key}: {where} has no field {name!r}")
        chain.append(getattr(node, name))
    value = _typed(key, chain[-1], value)
    for node, name in zip(reversed(chain[:-1]), reversed(path), strict=True):
        value = dataclasses.replace(node, **{name: value})
    return value


def _typed(key: str, current: object, value: object) -> object:
    """`value` as the type of the field's `current` value: checked here, so that a run does
    not fail on it deep in the simulator (`--set headroom=abc`)."""
    if isinstance(current, float) and not isinstance(value, bool):
        number = value if isinstance(value, int | float) else _float(value)
        if number is not None and not math.isnan(number):
            return float(number)
    elif type(value) is type(current):
        return value
    kind = _KINDS.get(type(current), f"a {type(current).__name__}")
    raise SettingError(f"--set {key}: expected {kind}, got {value!r}")


def _float(value: object) -> float | None:
    """`inf` and `-inf`, which are not Python literals; None for anything else."""
    try:
        return float(value) if isinstance(value, str) else None
    except ValueError:
        return None


def apply(settings: GpufleetSettings, overrides: Sequence[Override]) -> GpufleetSettings:
    """`settings` with each override in turn; SettingError for a key that names no field
    or a value not of its type."""
    for key, value in overrides:
        settings = override(settings, key, value)
    return settings


def check(policy: str, overrides: Sequence[Override]) -> None:
    """SettingError where `overrides` do not apply to `policy`'s runs: any for another
    policy than gpufleet, or a key that names no gpufleet setting."""
    if overrides and policy != policies.GPUFLEET:
        raise SettingError("--set changes gpufleet's settings only")
    apply(GpufleetSettings(), overrides)


def tuned_policy(spec: sweep.RunSpec, overrides: Sequence[Override]) -> Policy:
    """The policy `gpufleet simulate` builds for `spec` (ValueError for a knob out of its
    range), with `overrides` (passed by `check`) on top of the settings its knob maps to."""
    policy = policies.make_policy(
        spec.policy, spec.workload, spec.tuning, knob_value=spec.knob_value
    )
    if not overrides:
        return policy
    assert isinstance(policy, GpufleetPolicy)  # `check` lets overrides through for it only
    return GpufleetPolicy(spec.workload, settings=apply(policy.settings, overrides))
