"""`driver_files` on a real driver root in a temporary directory: the listing it reads (links
read, never followed out of the root), the edits it gives, and the spec the plugin writes
with them, or without them and a warning when there is no driver."""

import json
import logging
import os
import socket
import tempfile
from pathlib import Path

import pytest
from helpers.plugin_node import gpu, node

from gpufleet.plugin.cdi_setup import install_cdi_specs
from gpufleet.plugin.core.cdi_driver import DriverGap, EntryKind
from gpufleet.plugin.core.config import Flags, PluginConfig, PluginFlags
from gpufleet.plugin.daemon import build_services
from gpufleet.plugin.host.driver_files import read_driver_edits, read_listing, visible_root
from gpufleet.plugin.kubelet.server import RpcStats
from gpufleet.plugin.settings import PluginSettings

V = "550.54.15"
LIB = "/usr/lib/x86_64-linux-gnu"
HOST_ROOT = "/run/nvidia/driver"
OUR_GPU_SPEC = "gpufleet-k8s.device-plugin.nvidia.com-gpu.json"


def put(root: Path, path: str, *, mode: int = 0o644) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"")
    target.chmod(mode)


def link(root: Path, path: str, target: str) -> None:
    where = root / path.lstrip("/")
    where.parent.mkdir(parents=True, exist_ok=True)
    where.symlink_to(target)


@pytest.fixture
def driver_root(tmp_path: Path) -> Path:
    """A merged-/usr driver root as the plugin container sees it."""
    root = tmp_path / "driver-root"
    for name in ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so"):
        put(root, f"{LIB}/{name}.{V}", mode=0o755)
    link(root, f"{LIB}/libcuda.so.1", f"libcuda.so.{V}")
    link(root, f"{LIB}/libcuda.so", "libcuda.so.1")
    link(root, f"{LIB}/libnvidia-ml.so.1", f"{LIB}/libnvidia-ml.so.{V}")  # absolute
    put(root, "/usr/bin/nvidia-smi", mode=0o755)
    put(root, f"/usr/lib/firmware/nvidia/{V}/gsp_ga10x.bin")
    link(root, "/lib", "usr/lib")
    link(root, "/bin", "usr/bin")
    return root


def test_the_listing_holds_real_paths_kinds_and_links(driver_root) -> None:
    listing = read_listing(driver_root, directories=["/lib/x86_64-linux-gnu", "/missing"])
    assert listing.entries == {
        f"{LIB}/libcuda.so.{V}": EntryKind.EXECUTABLE,
        f"{LIB}/libnvidia-ml.so.{V}": EntryKind.EXECUTABLE,
        f"{LIB}/libnvidia-ptxjitcompiler.so.{V}": EntryKind.EXECUTABLE,
    }
    assert listing.links == {
        "/lib": "usr/lib",
        f"{LIB}/libcuda.so": "libcuda.so.1",
        f"{LIB}/libcuda.so.1": f"libcuda.so.{V}",
        f"{LIB}/libnvidia-ml.so.1": f"{LIB}/libnvidia-ml.so.{V}",
    }


def test_an_absolute_link_is_read_inside_the_root(tmp_path) -> None:
    root = tmp_path / "root"
    put(root, "/opt/run/nvidia-persistenced/socket")
    link(root, "/var/run", "/opt/run")  # on this machine /opt/run does not exist
    listing = read_listing(root, paths=["/var/run/nvidia-persistenced/socket"])
    assert listing.entries == {"/opt/run/nvidia-persistenced/socket": EntryKind.FILE}


def test_a_socket_is_listed_as_one() -> None:
    # A short root: a unix socket's path must fit in 108 bytes, pytest's tmp_path may not.
    with tempfile.TemporaryDirectory() as root:
        where = Path(root, "run", "nvidia-persistenced")
        where.mkdir(parents=True)
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(where / "socket"))
            listing = read_listing(Path(root), paths=["/run/nvidia-persistenced/socket"])
    assert listing.entries == {"/run/nvidia-persistenced/socket": EntryKind.SOCKET}


def test_edits_mount_host_paths_under_the_driver_root(driver_root) -> None:
    edits = read_driver_edits(
        driver_root,
        nvml_version="",  # from libcuda's file name
        host_driver_root=HOST_ROOT,
        hook_path="/usr/bin/nvidia-ctk",
        kernel_release="6.8.0",
    )
    assert edits.gap is None
    assert {m.container_path: m.host_path for m in edits.mounts} == {
        "/usr/bin/nvidia-smi": f"{HOST_ROOT}/usr/bin/nvidia-smi",
        f"{LIB}/libcuda.so.{V}": f"{HOST_ROOT}{LIB}/libcuda.so.{V}",
        f"{LIB}/libnvidia-ml.so.{V}": f"{HOST_ROOT}{LIB}/libnvidia-ml.so.{V}",
        f"{LIB}/libnvidia-ptxjitcompiler.so.{V}": (
            f"{HOST_ROOT}{LIB}/libnvidia-ptxjitcompiler.so.{V}"
        ),
        f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin": (
            f"{HOST_ROOT}/lib/firmware/nvidia/{V}/gsp_ga10x.bin"
        ),
    }
    assert [h.args[:3] for h in edits.hooks] == [
        ("nvidia-ctk", "hook", "create-symlinks"),
        ("nvidia-ctk", "hook", "update-ldcache"),
    ]
    assert edits.hooks[0].args[3:] == (
        "--link",
        f"libcuda.so.1::{LIB}/libcuda.so",
        "--link",
        f"libcuda.so.{V}::{LIB}/libcuda.so.1",
        "--link",
        f"libnvidia-ml.so.{V}::{LIB}/libnvidia-ml.so.1",
    )
    assert edits.hooks[1].args[3:] == ("--folder", LIB)


def test_an_empty_root_gives_no_edits(tmp_path) -> None:
    edits = read_driver_edits(
        tmp_path, nvml_version=V, host_driver_root="/", hook_path="/usr/bin/nvidia-ctk"
    )
    assert (edits.mounts, edits.hooks, edits.gap) == ((), (), DriverGap.NO_LIBRARIES)


@pytest.mark.parametrize("mounted", [True, False], ids=["container mount", "no mount: host"])
def test_the_container_mount_is_read_when_there(tmp_path, mounted) -> None:
    container = tmp_path / "driver-root"
    if mounted:
        container.mkdir()
    expected = container if mounted else Path("/run/nvidia/driver")
    found = visible_root(container_driver_root=str(container), driver_root="/run/nvidia/driver")
    assert found == expected


def install(tmp_path: Path, container_driver_root: Path) -> Path:
    """Run the plugin's CDI step for one GPU; the path of our gpu spec."""
    config = PluginConfig(
        flags=Flags(
            nvidia_driver_root=HOST_ROOT,
            plugin=PluginFlags(
                device_list_strategy=("cdi-cri",),
                container_driver_root=str(container_driver_root),
            ),
        )
    )
    spec_dir = tmp_path / "cdi"
    settings = PluginSettings(cdi_spec_dirs=str(spec_dir))
    services = build_services(node(gpu(0)), config, stats=RpcStats())
    install_cdi_specs(settings, config, services, [], driver_version=V)
    return spec_dir / OUR_GPU_SPEC


def test_the_plugins_spec_carries_the_driver(tmp_path, driver_root, caplog) -> None:
    with caplog.at_level(logging.WARNING):
        spec = json.loads(install(tmp_path, driver_root).read_text())
    edits = spec["containerEdits"]
    assert {
        "hostPath": f"{HOST_ROOT}{LIB}/libcuda.so.{V}",
        "containerPath": f"{LIB}/libcuda.so.{V}",
        "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"],
    } in edits["mounts"]
    assert all(m["hostPath"].startswith(HOST_ROOT + "/") for m in edits["mounts"])
    assert [h["hookName"] for h in edits["hooks"]] == ["createContainer"] * 2
    assert [h["path"] for h in edits["hooks"]] == ["/usr/bin/nvidia-ctk"] * 2
    assert not caplog.records


def test_without_a_driver_the_spec_has_nodes_and_a_warning_says_so(tmp_path, caplog) -> None:
    empty = tmp_path / "empty-root"
    empty.mkdir()
    with caplog.at_level(logging.WARNING):
        spec = json.loads(install(tmp_path, empty).read_text())
    assert set(spec["containerEdits"]) == {"env", "deviceNodes"}
    (record,) = caplog.records
    assert "nvidia-ctk cdi generate" in record.getMessage()
    assert f"no libcuda.so.{V}" in record.getMessage()


def test_an_unreadable_directory_is_skipped(driver_root, monkeypatch, caplog) -> None:
    # Root reads any directory, so the permission error is injected where os.scandir
    # would raise it for anyone else: the listing goes on without that directory.
    scandir = os.scandir

    def denied(path):
        if str(path).endswith(LIB):
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", denied)
    with caplog.at_level(logging.WARNING):
        listing = read_listing(driver_root, directories=[LIB, "/usr/bin"])
    assert listing.entries == {"/usr/bin/nvidia-smi": EntryKind.EXECUTABLE}
    assert "cannot list" in caplog.text and "Permission denied" in caplog.text


NV = "/usr/local/nvidia/lib64"
LDCACHE_DATA = Path(__file__).resolve().parents[2] / "data" / "ldcache"


@pytest.fixture
def nv_root(tmp_path: Path) -> Path:
    """A driver outside the standard directories (the H200 image's), with ldconfig's cache."""
    root = tmp_path / "host"
    for name in ("libcuda.so", "libnvidia-ml.so"):
        put(root, f"{NV}/{name}.{V}", mode=0o755)
        link(root, f"{NV}/{name}.1", f"{name}.{V}")
    (root / "etc").mkdir()
    (root / "etc" / "ld.so.cache").write_bytes((LDCACHE_DATA / "new.cache").read_bytes())
    return root


def nv_edits(root: Path):
    return read_driver_edits(
        root, nvml_version=V, host_driver_root="/", hook_path="/usr/bin/nvidia-ctk"
    )


def test_a_driver_registered_with_ldconfig_is_found_through_its_cache(nv_root) -> None:
    edits = nv_edits(nv_root)
    assert edits.gap is None
    assert [m.container_path for m in edits.mounts] == [
        f"{NV}/libcuda.so.{V}",
        f"{NV}/libnvidia-ml.so.{V}",
    ]
    assert edits.hooks[-1].args[3:] == ("--folder", NV)


def test_an_unreadable_cache_is_one_warning_and_the_standard_search(nv_root, caplog) -> None:
    (nv_root / "etc" / "ld.so.cache").write_bytes(b"not a cache")
    with caplog.at_level(logging.WARNING):
        edits = nv_edits(nv_root)
    assert edits.gap is DriverGap.NO_LIBRARIES
    (record,) = caplog.records
    assert "etc/ld.so.cache: not read" in record.getMessage()
    assert "neither glibc-ld.so.cache1.1 nor ld.so-1.7.0" in record.getMessage()
