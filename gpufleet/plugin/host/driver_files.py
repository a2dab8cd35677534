"""Reads the driver root for `core.cdi_driver`: the entries of the directories it searches.

The plugin sees the host's driver root where the DaemonSet mounts it (`--container-driver-root`,
/driver-root); when that is absent (the plugin runs on the host, or in tests) it reads the
driver root itself. Symlinks are read, never followed by the OS: a driver root's absolute
links name host paths, which inside this container would lead out of the mount.

Partial results: a missing directory or path is simply not listed; one that cannot be read
is logged and skipped, and so is an unreadable ld.so.cache. No driver at all (the
simulator, a node without one) gives empty edits and never fails startup.
"""

import logging
import os
import posixpath
import stat
from collections.abc import Iterable
from pathlib import Path

from gpufleet.plugin.core.cdi_driver import (
    LDCACHE,
    MAX_LINK_HOPS,
    DriverEdits,
    DriverListing,
    EntryKind,
    cached_library_dirs,
    driver_edits,
    driver_version,
    firmware_directories,
    resolve,
    search_directories,
    search_paths,
)
from gpufleet.plugin.core.ldcache import LdCacheError, libraries64

log = logging.getLogger(__name__)


def visible_root(*, container_driver_root: str, driver_root: str) -> Path:
    """Where this process sees the driver root: the container mount if it exists."""
    mounted = Path(container_driver_root)
    return mounted if container_driver_root and mounted.is_dir() else Path(driver_root)


def read_listing(
    root: Path, *, directories: Iterable[str] = (), paths: Iterable[str] = ()
) -> DriverListing:
    """The entries of `directories` (not recursive) and the `paths` themselves under `root`,
    keyed by their real paths relative to it, with every symlink met on the way."""
    entries: dict[str, EntryKind] = {}
    links: dict[str, str] = {}
    for directory in dict.fromkeys(directories):
        real = _real_path(root, directory, links)
        if real is not None:
            _list_directory(root, real, entries, links)
    for path in paths:
        parent = _real_path(root, posixpath.dirname(path), links)
        if parent is not None:
            _add(root, posixpath.join(parent, posixpath.basename(path)), entries, links)
    return DriverListing(entries=entries, links=links)


def read_driver_edits(
    root: Path,
    *,
    nvml_version: str,
    host_driver_root: str,
    hook_path: str,
    kernel_release: str | None = None,
) -> DriverEdits:
    """`core.cdi_driver.driver_edits` for the driver under `root`, of NVML's version, else the
    version in libcuda's file name. `kernel_release` defaults to the running kernel's
    (a container shares the host's)."""
    release = os.uname().release if kernel_release is None else kernel_release
    cached = cached_library_dirs(_cached_libraries(root))
    listing = read_listing(root, directories=search_directories(cached), paths=search_paths())
    version = nvml_version or driver_version(listing, cached)
    if version:
        firmware = read_listing(root, directories=firmware_directories(version, release))
        listing = DriverListing(
            entries={**listing.entries, **firmware.entries},
            links={**listing.links, **firmware.links},
        )
    return driver_edits(
        listing,
        version=version,
        kernel_release=release,
        host_driver_root=host_driver_root,
        hook_path=hook_path,
        cached_dirs=cached,
    )


def _cached_libraries(root: Path) -> tuple[str, ...]:
    """The 64-bit libraries the driver root's ld.so.cache lists; none when it has no cache
    or one that cannot be read (logged: the standard directories still serve)."""
    real = _real_path(root, LDCACHE, {})
    if real is None:
        return ()
    path = _on_disk(root, real)
    try:
        with open(path, "rb") as cache:
            return libraries64(cache.read())
    except FileNotFoundError:
        return ()
    except (OSError, LdCacheError) as exc:
        log.warning(
            "%s: not read, so only the standard library directories are searched (%s)", path, exc
        )
        return ()


def _real_path(root: Path, path: str, links: dict[str, str]) -> str | None:
    """`path` with its symlinked components resolved inside `root`, recording each link in
    `links`; None on a loop. The result may not exist."""
    for _ in range(MAX_LINK_HOPS):
        real = resolve(path, links)
        if real is None:
            return None
        new = _first_link(root, real)
        if new is None:
            return real
        link, target = new
        links[link] = target
    return None


def _first_link(root: Path, path: str) -> tuple[str, str] | None:
    """The first component of `path` that is a symlink, with its target; None if none
    (or a component is missing)."""
    current = "/"
    for part in (p for p in path.split("/") if p):
        current = posixpath.join(current, part)
        on_disk = _on_disk(root, current)
        try:
            if os.path.islink(on_disk):
                return current, os.readlink(on_disk)
        except OSError as exc:
            log.warning("cannot read %s: %s", on_disk, exc)
            return None
    return None


def _list_directory(
    root: Path, directory: str, entries: dict[str, EntryKind], links: dict[str, str]
) -> None:
    try:
        with os.scandir(_on_disk(root, directory)) as found:
            names = sorted(entry.name for entry in found)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        log.warning("cannot list %s: %s", _on_disk(root, directory), exc)
        return
    for name in names:
        _add(root, posixpath.join(directory, name), entries, links)


def _add(root: Path, path: str, entries: dict[str, EntryKind], links: dict[str, str]) -> None:
    on_disk = _on_disk(root, path)
    try:
        mode = os.lstat(on_disk).st_mode
        if stat.S_ISLNK(mode):
            links[path] = os.readlink(on_disk)
            return
    except FileNotFoundError:
        return
    except OSError as exc:
        log.warning("cannot read %s: %s", on_disk, exc)
        return
    if stat.S_ISREG(mode):
        entries[path] = EntryKind.EXECUTABLE if mode & 0o111 else EntryKind.FILE
    elif stat.S_ISSOCK(mode):
        entries[path] = EntryKind.SOCKET
    elif stat.S_ISDIR(mode):
        entries[path] = EntryKind.DIRECTORY


def _on_disk(root: Path, path: str) -> str:
    return str(root / path.lstrip("/"))
