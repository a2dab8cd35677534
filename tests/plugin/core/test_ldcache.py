"""`ldcache`: the 64-bit libraries of caches glibc's ldconfig wrote (tests/data/ldcache, and
this machine's own /etc/ld.so.cache against `ldconfig -p`), and nothing but LdCacheError
from any other bytes."""

import contextlib
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.plugin.core.ldcache import NEW_MAGIC, OLD_MAGIC, LdCacheError, libraries64

DATA = Path(__file__).resolve().parents[2] / "data" / "ldcache"
NVIDIA = ("/usr/local/nvidia/lib64/libnvidia-ml.so.1", "/usr/local/nvidia/lib64/libcuda.so.1")


@pytest.mark.parametrize("name", ["new.cache", "compat.cache"])
def test_the_caches_ldconfig_wrote_list_the_drivers_libraries(name) -> None:
    data = (DATA / name).read_bytes()
    assert data.startswith(OLD_MAGIC if name == "compat.cache" else NEW_MAGIC)
    assert libraries64(data) == NVIDIA


@pytest.mark.skipif(
    not Path("/etc/ld.so.cache").exists() or shutil.which("ldconfig") is None,
    reason="no ld.so.cache or ldconfig here",
)
def test_this_machines_cache_lists_what_ldconfig_prints() -> None:
    printed = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True)
    expected = {
        line.rsplit(" => ", 1)[1]
        for line in printed.stdout.splitlines()
        if " => " in line and any(a in line for a in ("x86-64", "AArch64", "64bit"))
    }
    found = libraries64(Path("/etc/ld.so.cache").read_bytes())
    assert expected and set(found) == expected


def header(count: int, flags: int = 2) -> bytes:
    return struct.pack("<20sIIB3xI12x", NEW_MAGIC, count, 0, flags, 0)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "neither glibc-ld.so.cache1.1 nor ld.so-1.7.0"),
        (b"not a cache at all, long enough for a header........", "neither glibc"),
        (NEW_MAGIC, "truncated header at byte 0"),
        (OLD_MAGIC + bytes(53), "no glibc-ld.so.cache1.1 header after the old format"),
        (header(0, flags=3), "big-endian"),
        (header(1000), "1000 entries do not fit"),
        (header(1) + struct.pack("<iIIIQ", 0x0303, 0, 999, 0, 0), "outside the cache"),
        (OLD_MAGIC + b"\0" + struct.pack("<I", 10**6), "truncated header"),
    ],
    ids=[
        "empty",
        "bad magic",
        "new header cut",
        "old format alone",
        "big endian",
        "too many entries",
        "bad string",
        "old overflow",
    ],
)
def test_a_malformed_cache_says_why(data: bytes, reason: str) -> None:
    with pytest.raises(LdCacheError, match=reason):
        libraries64(data)


def test_32_bit_and_non_elf_entries_are_left_out() -> None:
    strings = b"libc.so.6\0/lib/libc.so.6\0/lib64/libc.so.6\0"
    entries = [(0x0003, 0), (0x0303, 0)]  # i386 libc6, x86-64 libc6
    start = 48 + 24 * len(entries)
    values = [start + 10, start + 25]
    body = b"".join(
        struct.pack("<iIIIQ", flags, start, value, 0, 0)
        for (flags, _), value in zip(entries, values, strict=True)
    )
    assert libraries64(header(len(entries)) + body + strings) == ("/lib64/libc.so.6",)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_give_paths_or_ldcacheerror(data: bytes) -> None:
    with contextlib.suppress(LdCacheError):
        assert isinstance(libraries64(data), tuple)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_damaged_real_cache_gives_paths_or_ldcacheerror(data) -> None:
    cache = bytearray((DATA / "compat.cache").read_bytes())
    for _ in range(data.draw(st.integers(1, 8))):
        cache[data.draw(st.integers(0, len(cache) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(cache)))
    with contextlib.suppress(LdCacheError):
        assert isinstance(libraries64(bytes(cache[:cut])), tuple)
