"""Handing freed heap memory back to the kernel, where the C library allows it.

A daemon that rebuilds large buffers on an interval (the exporter's exposition: hundreds of
KiB a collection) frees as much as it allocates, yet glibc keeps freed chunks inside its
arenas, so resident memory sits at the worst fragmentation seen. `malloc_trim(0)` returns
every arena's free pages (measured in BENCHMARKS.md, issue 15). C libraries without it
(musl) are left alone. Never raises.

glibc also gives each new thread that allocates an arena of its own (up to 8 per core),
each holding its own free pages; the exporter's threads (a fresh one per collection,
the watchers') mostly allocate under the GIL, so one arena costs them little
contention and saves its RSS (BENCHMARKS.md, issue 15).
"""

import ctypes
import functools
from collections.abc import Callable

_M_ARENA_MAX = -8  # mallopt's parameter, glibc's malloc.h


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


def limit_arenas(count: int) -> bool:
    """Let threads created from now on share at most `count` malloc arenas. False if the
    libc has no mallopt or refuses."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt(_M_ARENA_MAX, count) == 1
