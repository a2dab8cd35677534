"""Handing freed heap memory back to the kernel, where the C library allows it.

A daemon that rebuilds large buffers on an interval (the exporter's exposition: hundreds of
KiB a collection) frees as much as it allocates, yet glibc keeps freed chunks inside its
arenas, so resident memory sits at the worst fragmentation seen. `malloc_trim(0)` returns
every arena's free pages (measured in BENCHMARKS.md, issue 15). C libraries without it
(musl) are left alone. Never raises.
"""

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own libc
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_heap() -> bool:
    """Give the kernel back the free pages of the C heap. False if the libc cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
