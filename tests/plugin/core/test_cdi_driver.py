"""`cdi_driver`: from a listing of the driver root to the mounts and hooks of the spec, as
nvidia-ctk's spec would have them (nvidia-container-toolkit pkg/nvcdi/driver-nvml.go)."""

import pytest

from gpufleet.plugin.core.cdi_driver import (
    MOUNT_OPTIONS,
    SOCKET_MOUNT_OPTIONS,
    DriverEdits,
    DriverGap,
    DriverListing,
    EntryKind,
    Hook,
    Mount,
    cached_library_dirs,
    driver_edits,
    driver_version,
    firmware_directories,
    resolve,
    without_hooks,
)

V = "550.54.15"
LIB = "/usr/lib/x86_64-linux-gnu"
FIRMWARE = f"/lib/firmware/nvidia/{V}"
F, X, S = EntryKind.FILE, EntryKind.EXECUTABLE, EntryKind.SOCKET


def tree(*entries: tuple[str, EntryKind], links: dict[str, str] | None = None) -> DriverListing:
    return DriverListing(entries=dict(entries), links=links or {})


# A Debian-style driver: libraries with their SONAME links, tools, a socket, firmware.
DRIVER = [
    (f"{LIB}/libcuda.so.{V}", F),
    (f"{LIB}/libnvidia-ml.so.{V}", F),
    (f"{LIB}/libnvidia-ptxjitcompiler.so.{V}", F),
    (f"{LIB}/libnvidia-nvvm.so.{V}", F),
    (f"{LIB}/libcudadebugger.so.{V}", F),
    (f"{LIB}/libEGL.so.1.1.0", F),  # not the driver's version: not mounted
    (f"{LIB}/vdpau/libvdpau_nvidia.so.{V}", F),
    ("/usr/bin/nvidia-smi", X),
    ("/usr/bin/nvidia-cuda-mps-control", X),
    ("/usr/bin/nvidia-debugdump", F),  # not executable: not mounted
    ("/run/nvidia-persistenced/socket", S),
    (f"{FIRMWARE}/gsp_ga10x.bin", F),
    (f"{FIRMWARE}/gsp_tu10x.bin", F),
    (f"{FIRMWARE}/README", F),
]
DRIVER_LINKS = {
    f"{LIB}/libcuda.so.1": f"libcuda.so.{V}",
    f"{LIB}/libcuda.so": "libcuda.so.1",
    f"{LIB}/libnvidia-ml.so.1": f"libnvidia-ml.so.{V}",
}


def edits(
    listing: DriverListing,
    *,
    version: str = V,
    host_driver_root: str = "/",
    hook_path: str = "/usr/bin/nvidia-ctk",
    cached_dirs: tuple[str, ...] = (),
) -> DriverEdits:
    return driver_edits(
        listing,
        version=version,
        kernel_release="6.8.0-45-generic",
        host_driver_root=host_driver_root,
        hook_path=hook_path,
        cached_dirs=cached_dirs,
    )


def ro(path: str, root: str = "") -> Mount:
    return Mount(host_path=root + path, container_path=path, options=MOUNT_OPTIONS)


def test_a_driver_under_a_driver_root_gives_nvidia_ctks_mounts_and_hooks() -> None:
    root = "/run/nvidia/driver"
    result = edits(tree(*DRIVER, links=DRIVER_LINKS), host_driver_root=root)
    assert result == DriverEdits(
        mounts=(
            Mount(
                host_path=f"{root}/run/nvidia-persistenced/socket",
                container_path="/run/nvidia-persistenced/socket",
                options=SOCKET_MOUNT_OPTIONS,
            ),
            ro("/usr/bin/nvidia-cuda-mps-control", root),
            ro("/usr/bin/nvidia-smi", root),
            ro(f"{LIB}/libcuda.so.{V}", root),
            ro(f"{LIB}/libcudadebugger.so.{V}", root),
            ro(f"{LIB}/libnvidia-ml.so.{V}", root),
            ro(f"{LIB}/libnvidia-nvvm.so.{V}", root),
            ro(f"{LIB}/libnvidia-ptxjitcompiler.so.{V}", root),
            ro(f"{FIRMWARE}/gsp_ga10x.bin", root),
            ro(f"{FIRMWARE}/gsp_tu10x.bin", root),
            ro(f"{LIB}/vdpau/libvdpau_nvidia.so.{V}", root),
        ),
        hooks=(
            Hook(
                hook_name="createContainer",
                path="/usr/bin/nvidia-ctk",
                args=(
                    "nvidia-ctk",
                    "hook",
                    "create-symlinks",
                    "--link",
                    f"libcuda.so.1::{LIB}/libcuda.so",
                    "--link",
                    f"libcuda.so.{V}::{LIB}/libcuda.so.1",
                    "--link",
                    f"libnvidia-ml.so.{V}::{LIB}/libnvidia-ml.so.1",
                ),
            ),
            Hook(
                hook_name="createContainer",
                path="/usr/bin/nvidia-ctk",
                args=(
                    "nvidia-ctk",
                    "hook",
                    "update-ldcache",
                    "--folder",
                    LIB,
                    "--folder",
                    f"{LIB}/vdpau",
                ),
            ),
        ),
    )


def paths(result: DriverEdits) -> list[str]:
    return [m.container_path for m in result.mounts]


def hook_args(result: DriverEdits, name: str) -> list[str]:
    return next(
        [a for a in h.args[h.args.index(name) + 1 :] if not a.startswith("--")]
        for h in result.hooks
        if name in h.args
    )


@pytest.mark.parametrize(
    ("listing", "expected"),
    [
        pytest.param(
            tree(
                (f"/usr/lib64/libcuda.so.{V}", F),
                (f"{LIB}/libcuda.so.{V}", F),
                (f"{LIB}/libnvidia-ml.so.{V}", F),
            ),
            [f"/usr/lib64/libcuda.so.{V}"],
            id="only the first standard directory holding libcuda is used",
        ),
        pytest.param(
            tree((f"{LIB}/libnvidia-ml.so.{V}", F), (f"{LIB}/libnvidia-cfg.so.{V}", F)),
            [f"{LIB}/libnvidia-cfg.so.{V}", f"{LIB}/libnvidia-ml.so.{V}"],
            id="without libcuda, libnvidia-ml's directory",
        ),
        pytest.param(
            tree(
                (f"/usr/lib/x86_64-linux-gnu/libcuda.so.{V}", F),
                links={"/lib": "usr/lib"},
            ),
            [f"{LIB}/libcuda.so.{V}"],
            id="a symlinked directory is mounted once, at its real path",
        ),
        pytest.param(
            tree(
                (f"/opt/nvidia/libcuda.so.{V}", F),
                ("/opt/nvidia/libnvidia-nvvm70.so.4.0.0", F),
                links={
                    f"{LIB}/libcuda.so.{V}": f"/opt/nvidia/libcuda.so.{V}",
                    f"{LIB}/libnvidia-nvvm70.so.4": "/opt/nvidia/libnvidia-nvvm70.so.4.0.0",
                },
            ),
            [f"/opt/nvidia/libcuda.so.{V}", "/opt/nvidia/libnvidia-nvvm70.so.4.0.0"],
            id="linked libraries are mounted at their targets, legacy nvvm70 too",
        ),
        pytest.param(
            tree(
                (f"{LIB}/libcuda.so.{V}", F),
                ("/usr/bin/nvidia-smi-550", X),
                ("/usr/bin/nvidia-persistenced", X),
                ("/usr/local/bin/nvidia-persistenced", X),
                links={"/usr/bin/nvidia-smi": "nvidia-smi-550"},
            ),
            [
                "/usr/bin/nvidia-smi",
                f"{LIB}/libcuda.so.{V}",
                "/usr/local/bin/nvidia-persistenced",
            ],
            id="binaries: first in PATH order, a symlink mounted under its own name",
        ),
        pytest.param(
            tree(
                (f"{LIB}/libcuda.so.{V}", F),
                ("/run/nvidia-fabricmanager/socket", S),
                ("/run/nvidia-persistenced/socket", EntryKind.DIRECTORY),
                links={"/var/run": "../run"},
            ),
            ["/run/nvidia-fabricmanager/socket", f"{LIB}/libcuda.so.{V}"],
            id="sockets: first of /run and /var/run, never a directory",
        ),
    ],
)
def test_what_is_mounted(listing, expected) -> None:
    assert paths(edits(listing)) == expected


@pytest.mark.parametrize(
    ("listing", "expected"),
    [
        pytest.param(
            tree(
                (f"{LIB}/libcuda.so.{V}", F),
                (f"{LIB}/libGLX_nvidia.so.{V}", F),
                (f"{LIB}/libnvidia-opticalflow.so.{V}", F),
            ),
            [
                f"libGLX_nvidia.so.{V}::{LIB}/libGLX_indirect.so.0",
                f"libcuda.so.1::{LIB}/libcuda.so",
                f"libnvidia-opticalflow.so.1::{LIB}/libnvidia-opticalflow.so",
            ],
            id="the links applications expect, with no host links",
        ),
        pytest.param(
            tree(
                (f"{LIB}/libcuda.so.{V}", F),
                (f"{LIB}/libnvidia-ml.so.{V}", F),
                links={
                    f"{LIB}/libnvidia-ml.so.1": f"{LIB}/libnvidia-ml.so.{V}",
                    f"{LIB}/libnvidia-ml.so": "libnvidia-ml.so.1",
                    f"{LIB}/libcuda.so": f"libcuda.so.{V}",
                },
            ),
            [
                f"libcuda.so.1::{LIB}/libcuda.so",
                f"libnvidia-ml.so.{V}::{LIB}/libnvidia-ml.so.1",
                f"libnvidia-ml.so.1::{LIB}/libnvidia-ml.so",
            ],
            id="host SONAME and .so links; the fixed libcuda.so link wins",
        ),
    ],
)
def test_create_symlinks_links(listing, expected) -> None:
    assert hook_args(edits(listing), "create-symlinks") == expected


@pytest.mark.parametrize(
    ("hook_path", "fixed"),
    [
        ("/usr/bin/nvidia-ctk", ("nvidia-ctk", "hook", "update-ldcache")),
        ("/usr/local/nvidia/toolkit/nvidia-cdi-hook", ("nvidia-cdi-hook", "update-ldcache")),
    ],
    ids=["nvidia-ctk runs hooks as a subcommand", "nvidia-cdi-hook runs them directly"],
)
def test_hook_command_line_follows_the_hook_binary(hook_path, fixed) -> None:
    result = edits(tree((f"{LIB}/libnvidia-ml.so.{V}", F)), hook_path=hook_path)
    (hook,) = result.hooks  # no link to create: no create-symlinks hook
    assert hook == Hook(hook_name="createContainer", path=hook_path, args=(*fixed, "--folder", LIB))


@pytest.mark.parametrize(
    ("listing", "version", "gap"),
    [
        pytest.param(tree(), "", DriverGap.NO_VERSION, id="nothing listed, no NVML version"),
        pytest.param(tree(), V, DriverGap.NO_LIBRARIES, id="simulated NVML, no driver files"),
        pytest.param(
            tree((f"{LIB}/libcuda.so.535.104.05", F)),
            V,
            DriverGap.NO_LIBRARIES,
            id="files of another version than NVML's",
        ),
        pytest.param(
            tree(links={f"{LIB}/libcuda.so.{V}": "libcuda.so.1", f"{LIB}/libcuda.so.1": "x"}),
            V,
            DriverGap.NO_LIBRARIES,
            id="a dangling link is no library",
        ),
    ],
)
def test_no_driver_gives_empty_edits_and_why(listing, version, gap) -> None:
    result = edits(listing, version=version)
    assert (result.mounts, result.hooks, result.gap) == ((), (), gap)
    assert "libcuda.so." in result.message


@pytest.mark.parametrize(
    ("listing", "expected"),
    [
        pytest.param(tree((f"{LIB}/libcuda.so.{V}", F)), V, id="libcuda"),
        pytest.param(
            tree((f"{LIB}/libnvidia-ml.so.{V}", F), ("/usr/lib64/libcuda.so.1", F)),
            V,
            id="libnvidia-ml when no libcuda name has a dotted version",
        ),
        pytest.param(
            tree((f"{LIB}/libcuda.so.{V}", F), links={f"{LIB}/libcuda.so.1": f"libcuda.so.{V}"}),
            V,
            id="the link's target names the version",
        ),
        pytest.param(tree(), "", id="none"),
    ],
)
def test_driver_version_from_library_names(listing, expected) -> None:
    assert driver_version(listing) == expected


@pytest.mark.parametrize(
    ("path", "links", "expected"),
    [
        ("/lib/x/libcuda.so.1", {"/lib": "usr/lib"}, "/usr/lib/x/libcuda.so.1"),
        ("/var/run/s", {"/var/run": "/run"}, "/run/s"),
        ("/a/l", {"/a/l": "../../../../etc/passwd"}, "/etc/passwd"),
        ("/a", {"/a": "b", "/b": "a"}, None),
    ],
    ids=["relative", "absolute restarts at the root", "'..' stops at the root", "loop"],
)
def test_resolve_stays_inside_the_root(path, links, expected) -> None:
    assert resolve(path, links) == expected


def test_firmware_directories_follow_the_kernels_search_order() -> None:
    assert firmware_directories(V, "6.8.0") == (
        f"/lib/firmware/updates/6.8.0/nvidia/{V}",
        f"/lib/firmware/updates/nvidia/{V}",
        f"/lib/firmware/6.8.0/nvidia/{V}",
        f"/lib/firmware/nvidia/{V}",
    )


@pytest.mark.parametrize("hook_path", ["/usr/bin/nvidia-ctk", "/opt/nvidia-cdi-hook"])
@pytest.mark.parametrize(
    ("disabled", "kept"),
    [
        ((), ["create-symlinks", "update-ldcache"]),
        (("update-ldcache",), ["create-symlinks"]),
        (("create-symlinks", "enable-cuda-compat"), ["update-ldcache"]),
        (("all",), []),
    ],
    ids=["none", "one", "one, and one we never add", "all"],
)
def test_cdi_disable_hooks(hook_path, disabled, kept) -> None:
    """NVIDIA's --cdi-disable-hooks / CDI_DISABLE_HOOKS (issue 16 §2.7)."""
    full = edits(tree(*DRIVER, links=DRIVER_LINKS), hook_path=hook_path)
    result = without_hooks(full, disabled)
    assert [
        n for h in result.hooks for n in ("create-symlinks", "update-ldcache") if n in h.args
    ] == kept
    assert result.mounts == full.mounts


# Where the H200 image of BENCHMARKS.md ("On a real GPU") has its driver, known to ldconfig.
NV = "/usr/local/nvidia/lib64"
NV_DRIVER = tree(
    (f"{NV}/libcuda.so.{V}", F),
    (f"{NV}/libnvidia-ml.so.{V}", F),
    links={f"{NV}/libcuda.so.1": f"libcuda.so.{V}"},
)


def test_the_ld_so_cache_names_the_directories_of_the_drivers_libraries() -> None:
    cached = [
        f"{NV}/libnvidia-ml.so.1",
        "/opt/other/libz.so.1",  # not the driver's
        f"{LIB}/libcuda.so.1",  # a standard directory, searched anyway
        f"{NV}/libcuda.so.1",
        "/opt/cuda/compat/libcuda.so",
    ]
    assert cached_library_dirs(cached) == (NV, "/opt/cuda/compat")


def test_a_driver_found_only_through_the_ld_so_cache_is_mounted_from_there() -> None:
    missing = edits(NV_DRIVER)
    assert missing.gap is DriverGap.NO_LIBRARIES
    assert "/etc/ld.so.cache names no other directory" in missing.message
    found = edits(NV_DRIVER, cached_dirs=(NV,))
    assert found.gap is None
    assert [m.container_path for m in found.mounts] == [
        f"{NV}/libcuda.so.{V}",
        f"{NV}/libnvidia-ml.so.{V}",
    ]
    assert found.hooks[-1].args[3:] == ("--folder", NV)
    assert driver_version(NV_DRIVER) == "" and driver_version(NV_DRIVER, (NV,)) == V


def test_the_standard_directories_come_before_the_ld_so_cache() -> None:
    both = tree(*NV_DRIVER.entries.items(), (f"{LIB}/libcuda.so.{V}", F))
    found = edits(both, cached_dirs=(NV,))
    assert [m.container_path for m in found.mounts] == [f"{LIB}/libcuda.so.{V}"]
