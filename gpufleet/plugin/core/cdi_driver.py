"""The driver's user-space in a CDI spec: which host files to mount, which hooks to run.

A CUDA container needs more than device nodes: libcuda and the other libraries of the
installed driver, its utilities (nvidia-smi, ...), the persistenced and fabric manager
sockets, the GSP firmware, and hooks that recreate the symlinks and the ld.so cache in the
container. `nvidia-ctk cdi generate` (nvidia-container-toolkit's nvcdi library, which
NVIDIA's plugin uses) puts these in a spec's container edits; `driver_edits` decides the
same from a listing of the driver root, so that our spec runs CUDA too:

- libraries: every `*.so.<version>` in the directory holding `libcuda.so.<version>` (else
  `libnvidia-ml.so.<version>`), the first of the standard library directories to hold it,
  and in its `vdpau` subdirectory, plus `libnvidia-nvvm70.so.*`; symlinks resolved, so the
  real file is mounted;
- the utilities, found in the standard binary directories;
- `nvidia-persistenced/socket` and `nvidia-fabricmanager/socket` under /run or /var/run;
- `nvidia/<version>/gsp*.bin` in the kernel's firmware search directories;
- a `create-symlinks` hook (libcuda.so, libGLX_indirect.so.0, libnvidia-opticalflow.so,
  and the SONAME links the host has next to each library), then `update-ldcache` over the
  library directories, both `createContainer` hooks of the configured hook binary.

Where no standard directory holds libcuda (or libnvidia-ml), the directories that the driver
root's ld.so.cache names for them are searched next, as nvcdi's library locator does
(`First(symlinkLocator, ldcacheLocator)`): a driver in `/usr/local/nvidia/lib64`, say,
registered with ldconfig. Not generated: the `enable-cuda-compat` and
`disable-device-node-modification` hooks and `NVIDIA_CTK_LIBCUDA_DIR`, which need nvidia-ctk
1.17.5 and 1.17.8 on the host (an unknown hook subcommand would fail every container). All
paths in a listing are relative to the driver root ("/usr/lib64/libcuda.so.1"); mounts name
the host's path under the host driver root.

Pure: no I/O; the listing is read by `host.driver_files`. It must never mount a file the
listing does not show, nor resolve a symlink outside the driver root.
"""

import fnmatch
import posixpath
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

# nvidia-container-toolkit pkg/lookup/library.go, in its search order ("/" left out: no
# driver installs its libraries at the root of the filesystem).
LIBRARY_DIRS = (
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu/nvidia/current",
    "/lib/aarch64-linux-gnu/nvidia/current",
)
LDCACHE = "/etc/ld.so.cache"
# The cached libraries whose directories are searched when no standard one holds them.
LDCACHE_LIBRARIES = ("libcuda.so", "libnvidia-ml.so")
VDPAU_SUBDIR = "vdpau"
LEGACY_NVVM = "libnvidia-nvvm70.so.*"
# internal/lookup/path.go's default PATH, searched in this order.
BINARY_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
DRIVER_BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-imex",
    "nvidia-imex-ctl",
)
# nvcdi also names /tmp/nvidia-mps, but its file locator skips directories, so the MPS
# pipe directory is never mounted from there (MPS sharing mounts it through Allocate).
SOCKET_DIRS = ("/run", "/var/run")
SOCKETS = ("nvidia-persistenced/socket", "nvidia-fabricmanager/socket")
FIRMWARE_PATTERN = "gsp*.bin"

MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "rbind", "rprivate")
SOCKET_MOUNT_OPTIONS = ("nosuid", "nodev", "rbind", "rprivate", "noexec")
CREATE_CONTAINER = "createContainer"
CREATE_SYMLINKS = "create-symlinks"
UPDATE_LDCACHE = "update-ldcache"
# Symlinks that packages often lack and applications expect: (library name, link target,
# link name); a None target links to the library itself.
FIXED_LINKS = (
    ("libcuda.so", "libcuda.so.1", "libcuda.so"),  # dlopen("libcuda.so") is common
    ("libGLX_nvidia.so", None, "libGLX_indirect.so.0"),  # GLVND's indirect GLX
    ("libnvidia-opticalflow.so", "libnvidia-opticalflow.so.1", "libnvidia-opticalflow.so"),
)
MAX_LINK_HOPS = 40  # Linux's limit; more is a loop


class EntryKind(StrEnum):
    """What a listed path is (not following symlinks; those are in `DriverListing.links`)."""

    FILE = "file"
    EXECUTABLE = "executable"  # a regular file with an execute bit
    SOCKET = "socket"
    DIRECTORY = "directory"


REGULAR = frozenset({EntryKind.FILE, EntryKind.EXECUTABLE})


@dataclass(frozen=True, slots=True, kw_only=True)
class DriverListing:
    """The searched part of a driver root, paths relative to it ("/usr/bin/nvidia-smi")."""

    entries: Mapping[str, EntryKind] = field(default_factory=dict)
    links: Mapping[str, str] = field(default_factory=dict)  # symlink -> target as read


class DriverGap(StrEnum):
    """Why the edits are empty."""

    NO_VERSION = "no-version"  # NVML gave none and no libcuda.so.<version> is listed
    NO_LIBRARIES = "no-libraries"  # no library of that version in a standard directory


@dataclass(frozen=True, slots=True, kw_only=True)
class Mount:
    host_path: str
    container_path: str
    options: tuple[str, ...] = MOUNT_OPTIONS


@dataclass(frozen=True, slots=True, kw_only=True)
class Hook:
    hook_name: str
    path: str
    args: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DriverEdits:
    """Spec-wide mounts and hooks; both empty with a `gap` when no driver was found."""

    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()
    gap: DriverGap | None = None
    message: str = ""


NO_DRIVER_EDITS = DriverEdits()  # adds nothing: a spec with device nodes only


def cached_library_dirs(cached: Iterable[str]) -> tuple[str, ...]:
    """The directories of the ld.so.cache's libcuda and libnvidia-ml entries (any version or
    SONAME), in the cache's order, less the standard ones."""
    dirs = (
        posixpath.dirname(path)
        for path in cached
        if posixpath.basename(path).startswith(LDCACHE_LIBRARIES)
    )
    return tuple(d for d in dict.fromkeys(dirs) if d not in LIBRARY_DIRS)


def library_dirs(cached_dirs: Iterable[str] = ()) -> tuple[str, ...]:
    """Where libcuda is looked for, in order: the standard directories, then `cached_dirs`
    (`cached_library_dirs`)."""
    return (*LIBRARY_DIRS, *cached_dirs)


def search_directories(cached_dirs: Iterable[str] = ()) -> tuple[str, ...]:
    """Directories whose entries a listing must hold before the version is known;
    `cached_dirs` are `cached_library_dirs`."""
    libraries = library_dirs(cached_dirs)
    vdpau = tuple(posixpath.join(d, VDPAU_SUBDIR) for d in libraries)
    return (*libraries, *vdpau, *BINARY_DIRS)


def search_paths() -> tuple[str, ...]:
    """Single paths a listing must hold: the IPC sockets."""
    return tuple(posixpath.join(d, s) for s in SOCKETS for d in SOCKET_DIRS)


def firmware_directories(version: str, kernel_release: str) -> tuple[str, ...]:
    """Where the kernel looks for `nvidia/<version>/` firmware, in its order."""
    roots = ("/lib/firmware/updates/" + kernel_release, "/lib/firmware/updates")
    roots += ("/lib/firmware/" + kernel_release, "/lib/firmware")
    return tuple(dict.fromkeys(posixpath.join(r, "nvidia", version) for r in roots))


def resolve(path: str, links: Mapping[str, str]) -> str | None:
    """`path` with every symlinked component replaced by its target, confined to the root
    (an absolute target starts again at the root, `..` stops there); None on a loop."""
    pending = [p for p in reversed(path.split("/")) if p]
    current, hops = "/", 0
    while pending:
        part = pending.pop()
        if part == ".":
            continue
        if part == "..":
            current = posixpath.dirname(current)
            continue
        candidate = posixpath.join(current, part)
        target = links.get(candidate)
        if target is None:
            current = candidate
            continue
        hops += 1
        if hops > MAX_LINK_HOPS:
            return None
        if target.startswith("/"):
            current = "/"
        pending.extend(p for p in reversed(target.split("/")) if p)
    return current


def driver_version(listing: DriverListing, cached_dirs: Sequence[str] = ()) -> str:
    """The version in the name of the first `libcuda.so.<version>` (else
    `libnvidia-ml.so.<version>`) in the standard library directories, then in
    `cached_dirs`; "" if none."""
    tree = _Tree(listing)
    for prefix in ("libcuda.so.", "libnvidia-ml.so."):
        for path in tree.locate(library_dirs(cached_dirs), prefix + "*.*"):
            return posixpath.basename(path).removeprefix(prefix)
    return ""


def driver_edits(
    listing: DriverListing,
    *,
    version: str,
    kernel_release: str,
    host_driver_root: str,
    hook_path: str,
    cached_dirs: Sequence[str] = (),
) -> DriverEdits:
    """The mounts and hooks that give a container the driver of `version` (see the module
    docstring); empty, with the reason, when its libraries are not in the listing.
    `cached_dirs` (`cached_library_dirs`) are searched after the standard directories.
    Mounts are ordered shallowest first, so none hides another."""
    searched = library_dirs(cached_dirs)
    if not version:
        return DriverEdits(
            gap=DriverGap.NO_VERSION,
            message="no driver version from NVML and no libcuda.so.<version> or "
            f"libnvidia-ml.so.<version> in {', '.join(searched)}",
        )
    tree = _Tree(listing)
    library_dir = _library_dir(tree, version, searched)
    if library_dir is None:
        return DriverEdits(
            gap=DriverGap.NO_LIBRARIES,
            message=f"no libcuda.so.{version} or libnvidia-ml.so.{version} in "
            + ", ".join(searched)
            + ("" if cached_dirs else f"; {LDCACHE} names no other directory for them"),
        )
    libraries = _libraries(tree, library_dir, version)
    located = [
        *((p, MOUNT_OPTIONS) for p in libraries),
        *((p, MOUNT_OPTIONS) for p in _binaries(tree)),
        *((p, SOCKET_MOUNT_OPTIONS) for p in _sockets(tree)),
        *((p, MOUNT_OPTIONS) for p in _firmware(tree, version, kernel_release)),
    ]
    mounts = {
        path: Mount(host_path=_host(host_driver_root, path), container_path=path, options=opts)
        for path, opts in located
    }
    hooks = []
    links = _symlinks(tree, libraries, version)
    if links:
        args = [arg for link in links for arg in ("--link", link)]
        hooks.append(_hook(hook_path, CREATE_SYMLINKS, args))
    folders = dict.fromkeys(posixpath.dirname(p) for p in libraries)
    hooks.append(_hook(hook_path, UPDATE_LDCACHE, [a for d in folders for a in ("--folder", d)]))
    ordered = sorted(mounts.values(), key=lambda m: (m.container_path.count("/"), m.container_path))
    return DriverEdits(mounts=tuple(ordered), hooks=tuple(hooks))


class _Tree:
    """The listing indexed by directory, for glob lookups."""

    def __init__(self, listing: DriverListing) -> None:
        self.listing = listing
        self.children: dict[str, list[str]] = {}
        for path in sorted({*listing.entries, *listing.links}):
            self.children.setdefault(posixpath.dirname(path), []).append(path)

    def resolve(self, path: str) -> str | None:
        return resolve(path, self.listing.links)

    def kind(self, path: str) -> EntryKind | None:
        """The kind of what `path` finally points to; None if the listing lacks it."""
        real = self.resolve(path)
        return None if real is None else self.listing.entries.get(real)

    def matches(self, directory: str, pattern: str) -> Iterator[str]:
        """Listed names in `directory` (symlinks in its path followed) matching `pattern`,
        sorted, as paths under `directory` as given."""
        real = self.resolve(directory)
        for path in self.children.get(real, []) if real else []:
            name = posixpath.basename(path)
            if fnmatch.fnmatchcase(name, pattern):
                yield posixpath.join(directory, name)

    def locate(self, directories: Iterable[str], pattern: str) -> Iterator[str]:
        """Real paths of the regular files matching `pattern`, directory by directory."""
        for directory in directories:
            for path in self.matches(directory, pattern):
                real = self.resolve(path)
                if real and self.listing.entries.get(real) in REGULAR:
                    yield real


def _library_dir(tree: _Tree, version: str, directories: Sequence[str]) -> str | None:
    for name in (f"libcuda.so.{version}", f"libnvidia-ml.so.{version}"):
        for path in tree.locate(directories, name):
            return posixpath.dirname(path)
    return None


def _libraries(tree: _Tree, library_dir: str, version: str) -> list[str]:
    vdpau = posixpath.join(library_dir, VDPAU_SUBDIR)
    found = [
        *tree.locate([library_dir, vdpau], f"*.so.{version}"),
        *tree.locate([library_dir], LEGACY_NVVM),
    ]
    return list(dict.fromkeys(found))


def _binaries(tree: _Tree) -> Iterator[str]:
    for name in DRIVER_BINARIES:
        for directory in BINARY_DIRS:
            path = posixpath.join(directory, name)
            if tree.kind(path) is EntryKind.EXECUTABLE:
                yield path
                break


def _sockets(tree: _Tree) -> Iterator[str]:
    for socket in SOCKETS:
        for directory in SOCKET_DIRS:
            path = posixpath.join(directory, socket)
            if tree.kind(path) not in (None, EntryKind.DIRECTORY):
                yield path
                break


def _firmware(tree: _Tree, version: str, kernel_release: str) -> Iterator[str]:
    for directory in firmware_directories(version, kernel_release):
        for path in tree.matches(directory, FIRMWARE_PATTERN):
            if tree.kind(path) in REGULAR:
                yield path


def _symlinks(tree: _Tree, libraries: Iterable[str], version: str) -> list[str]:
    """`target::link` arguments: the fixed links, then the host's SONAME links (a link
    next to the library naming it) and the `.so` links naming those; the first per link
    path wins."""
    links: dict[str, str] = {}
    for library in libraries:
        directory, name = posixpath.split(library)
        for stem, target, link in FIXED_LINKS:
            if fnmatch.fnmatchcase(name, f"{stem}.{version}"):
                links.setdefault(posixpath.join(directory, link), target or name)
        sonames = _links_to(tree, directory, name)
        for soname in sonames:
            links.setdefault(posixpath.join(directory, soname), name)
            for dev_link in _links_to(tree, directory, soname):
                links.setdefault(posixpath.join(directory, dev_link), soname)
    return [f"{target}::{link}" for link, target in links.items()]


def _links_to(tree: _Tree, directory: str, name: str) -> list[str]:
    """Names of the symlinks in `directory` whose target is `name` in that directory."""
    links = tree.listing.links
    return [
        posixpath.basename(path)
        for path in tree.children.get(directory, [])
        if path in links
        and posixpath.normpath(posixpath.join(directory, links[path]))
        == posixpath.join(directory, name)
    ]


def without_hooks(edits: DriverEdits, disabled: Collection[str]) -> DriverEdits:
    """The edits minus the hooks named in `disabled` (all of them for "all"): NVIDIA's
    --cdi-disable-hooks, for hosts whose hook binary lacks a subcommand."""
    if "all" in disabled:
        return replace(edits, hooks=())
    return replace(edits, hooks=tuple(h for h in edits.hooks if _hook_name(h) not in disabled))


def _hook_name(hook: Hook) -> str:
    """The subcommand a hook runs: after `nvidia-ctk hook`, or after the hook binary."""
    return hook.args[2] if hook.args[:2] == ("nvidia-ctk", "hook") else hook.args[1]


def _hook(hook_path: str, name: str, args: Iterable[str]) -> Hook:
    # nvidia-ctk runs the hooks as `nvidia-ctk hook <name>`; nvidia-cdi-hook as `<name>`.
    base = posixpath.basename(hook_path)
    fixed = (base, "hook") if base == "nvidia-ctk" else (base,)
    return Hook(hook_name=CREATE_CONTAINER, path=hook_path, args=(*fixed, name, *args))


def _host(root: str, path: str) -> str:
    return posixpath.normpath(posixpath.join(root, path.lstrip("/")))
