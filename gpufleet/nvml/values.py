"""What pynvml hands back, as plain values: text, handle addresses, and error kinds.

Shared by the exporter's and the plugin's NVML adapters, so both decode strings, recognise
a GPU in an event and name a failure the same way. Works the same on the real `pynvml` and
`SimulatedNvml`; calls no NVML function.
"""

import ctypes
from typing import Any

import pynvml


def text(value: str | bytes) -> str:
    """A string from NVML: functions return str, char arrays inside structs are bytes."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def handle_address(handle: Any) -> int | None:
    """The address an NVML device handle (a ctypes pointer) holds; None if it holds none."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


def error_kind(err: BaseException) -> str:
    """The reader's error kind for a failure: `gpu_lost`, `timeout`, `nvml_error` for
    NVMLErrors, `unexpected` for anything else (a bug or a driver surprise)."""
    if isinstance(err, pynvml.NVMLError_GpuIsLost):
        return "gpu_lost"
    if isinstance(err, pynvml.NVMLError_Timeout):
        return "timeout"
    return "nvml_error" if isinstance(err, pynvml.NVMLError) else "unexpected"
