"""The 64-bit libraries that a glibc `ld.so.cache` lists, for the CDI spec's library lookup.

nvidia-container-toolkit's library locator searches the standard library directories
first, then the driver root's `/etc/ld.so.cache` (pkg/lookup: `First(symlinkLocator,
ldcacheLocator)`). So a driver installed elsewhere and registered with `ldconfig` is still
found: `/usr/local/nvidia/lib64` on the machine images that mount the driver there.

The format is glibc's (sysdeps/generic/dl-cache.h): an optional old-format block
("ld.so-1.7.0", 12-byte entries), then the new format ("glibc-ld.so.cache" "1.1", a
48-byte header and 24-byte entries whose string offsets count from that header). Like the
toolkit, only little-endian caches and 64-bit ELF entries (x86-64, ppc64le, aarch64) are
read. Pure: bytes in, paths out; anything malformed raises LdCacheError.
"""

import struct

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"
_OLD_HEADER = struct.Struct("<11sxI")  # magic, padding, nlibs
_OLD_ENTRY_SIZE = 12
_NEW_HEADER = struct.Struct("<20sIIB3xI12x")  # magic+version, nlibs, len_strings, flags, ext
_NEW_ENTRY = struct.Struct("<iIIIQ")  # flags, key, value, osversion, hwcap
_ENDIAN_BIG = 3  # cache_file_new_flags_endian_big

FLAG_TYPE_MASK = 0x00FF
FLAG_ELF = 0x0001
FLAG_ARCH_MASK = 0xFF00
ARCH_64 = frozenset({0x0300, 0x0500, 0x0A00})  # x86-64, ppc64(le), aarch64


class LdCacheError(ValueError):
    """The bytes are not an ld.so.cache this reader understands; the message says why."""


def libraries64(data: bytes) -> tuple[str, ...]:
    """The paths of the 64-bit ELF libraries in the cache, in its order, without repeats."""
    start = _new_format_offset(data)
    header = _unpack(_NEW_HEADER, data, start, "header")
    magic, count, _, flags, _ = header
    if magic != NEW_MAGIC:
        raise LdCacheError(f"no glibc-ld.so.cache1.1 header after the old format, at byte {start}")
    if flags == _ENDIAN_BIG:
        raise LdCacheError("a big-endian cache")
    first = start + _NEW_HEADER.size
    if count > (len(data) - first) // _NEW_ENTRY.size:
        raise LdCacheError(f"{count} entries do not fit in {len(data)} bytes")
    paths: dict[str, None] = {}
    for n in range(count):
        entry_flags, _, value, _, _ = _NEW_ENTRY.unpack_from(data, first + n * _NEW_ENTRY.size)
        if entry_flags & FLAG_TYPE_MASK & FLAG_ELF and entry_flags & FLAG_ARCH_MASK in ARCH_64:
            paths[_string(data, start + value)] = None
    return tuple(paths)


def _new_format_offset(data: bytes) -> int:
    """Where the new-format header starts: after the old-format block when there is one."""
    if data.startswith(NEW_MAGIC):
        return 0
    if not data.startswith(OLD_MAGIC):
        raise LdCacheError("neither glibc-ld.so.cache1.1 nor ld.so-1.7.0 at the start")
    _, count = _unpack(_OLD_HEADER, data, 0, "old header")
    end = _OLD_HEADER.size + count * _OLD_ENTRY_SIZE
    return -(-end // 8) * 8  # the new header is aligned for its 64-bit fields


def _unpack(layout: struct.Struct, data: bytes, offset: int, what: str) -> tuple:
    if offset + layout.size > len(data):
        raise LdCacheError(f"truncated {what} at byte {offset}")
    return layout.unpack_from(data, offset)


def _string(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset)
    if offset >= len(data) or end < 0:
        raise LdCacheError(f"a string offset {offset} outside the cache")
    try:
        return data[offset:end].decode()
    except UnicodeDecodeError:
        raise LdCacheError(f"a path at byte {offset} is not UTF-8") from None
