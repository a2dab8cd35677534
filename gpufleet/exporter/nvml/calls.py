"""How the NVML reader calls NVML: a failing call is counted and logged, and its values dropped.

Exists so every part of the reader (`reader`, `discovery`, `gpm`, `processes`)
accounts for NVML errors the same way: NotSupported (and NoPermission on a MIG-enabled GPU, a
steady fact of the exporter's privileges) is dropped without counting and logged once per
call and GPU model; any other NVMLError is counted as `timeout` or `nvml_error` and logged
once per call, model and error code. A conversion of NVML's answer that raises (a
bug, or a struct this code does not expect) is counted as `unexpected`, logged once with
its traceback, and costs only the value it was converting.

It must never swallow a lost GPU (NVMLError_GpuIsLost propagates, so the caller drops that
GPU for the round), never log a steady condition twice, and never log through a logger of its
own: it uses the one it is given, so every reader log stays under `gpufleet.exporter.nvml.reader`.
"""

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import pynvml

from gpufleet.nvml.values import error_kind

MISSING = object()
"""A read that gave nothing: NotSupported, or an error already counted."""
UNSUPPORTED = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound)
MIG_MODE = " in MIG mode"  # ends a MIG-enabled GPU's model, as the reader names it in logs


class NvmlCalls:
    """Makes NVML calls for the reader and accounts for their failures."""

    __slots__ = ("_logged", "log")

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self._logged: set[tuple[object, ...]] = set()

    def read(self, errors: Counter[str], what: str, model: str, call: Callable, *args: Any) -> Any:
        """`call(*args)`, or MISSING after accounting for an NVML error. A lost GPU raises."""
        try:
            return call(*args)
        except pynvml.NVMLError_GpuIsLost:
            raise
        except pynvml.NVMLError as err:
            self.failed(errors, what, model, err)
            return MISSING

    def convert(
        self, errors: Counter[str], what: str, model: str, convert: Callable, value: Any
    ) -> Any:
        """`convert(value)`, or MISSING after counting and logging (once) its exception."""
        try:
            return convert(value)
        except Exception:  # one field's bad conversion must not cost the GPU's other fields
            errors["unexpected"] += 1
            self.once(
                ("convert", what, model),
                logging.ERROR,
                "%s: converting NVML's answer failed on %s; omitted",
                what,
                model,
                exc=True,
            )
            return MISSING

    def failed(self, errors: Counter[str], what: str, model: str, err: Any) -> None:
        """Count (unless unsupported or refused) and log once a failure of `what` on a
        `model` GPU."""
        if isinstance(err, UNSUPPORTED):
            self.once(
                ("unsupported", what, model),
                logging.INFO,
                "%s: not supported on %s; omitted",
                what,
                model,
            )
            return
        if isinstance(err, pynvml.NVMLError_NoPermission) and model.endswith(MIG_MODE):
            # Steady, not a failure: a MIG-enabled GPU gives its aggregates (memory,
            # processes) only to a caller with CAP_SYS_ADMIN (nvml.h), which the exporter
            # is not given; its instances answer for themselves. Anywhere else it counts.
            self.once(
                ("no_permission", what, model),
                logging.WARNING,
                "%s: no permission on %s (a MIG-enabled GPU answers it with CAP_SYS_ADMIN "
                "only); omitted",
                what,
                model,
            )
            return
        kind = error_kind(err)
        errors[kind] += 1
        self.once(
            ("failed", what, model, err.value),
            logging.WARNING,
            "%s failed on %s: NVML error %d (%s); omitted while it fails",
            what,
            model,
            err.value,
            err,
        )

    def once(
        self, key: tuple[object, ...], level: int, message: str, *args: Any, exc: bool = False
    ) -> None:
        """Log a condition the first time it is seen, so a steady state does not flood logs."""
        if key not in self._logged:
            self._logged.add(key)
            self.log.log(level, message, *args, exc_info=exc)
