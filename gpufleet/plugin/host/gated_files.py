"""The host files behind the GDS, MOFED and GDRCopy CDI specs (nvidia-container-toolkit's
"gated" modes, `internal/discover/{gds,mofed,gdrcopy}.go`), read once at startup.

Each mode is its device nodes, found by glob: `/dev/nvidia-fs*` (GDS),
`/dev/infiniband/uverbs*` and `/dev/infiniband/rdma_cm` (MOFED), `/dev/gdrdrv` (GDRCopy).
GDS also mounts the host's `/run/udev` and `/etc/cufile.json`, when it has nodes and those
exist. Nodes are looked up as `host_devices` looks up IMEX channels (under the container
driver root when it has a /dev), mounts under the driver root this process sees.

Partial results: a mode without nodes gets no spec (and Allocate names none); nothing here
fails startup.
"""

from pathlib import Path

from gpufleet.plugin.core.cdi_driver import Mount

GATED_NODES = {
    "gds": ("/dev/nvidia-fs*",),
    "mofed": ("/dev/infiniband/uverbs*", "/dev/infiniband/rdma_cm"),
    "gdrcopy": ("/dev/gdrdrv",),
}
GDS_MOUNTS = ("/run/udev", "/etc/cufile.json")


def gated_nodes(mode: str, *, container_driver_root: Path) -> tuple[str, ...]:
    """The mode's character devices present on the host, as container paths, sorted."""
    root = container_driver_root if (container_driver_root / "dev").is_dir() else Path("/")
    found: set[str] = set()
    for pattern in GATED_NODES[mode]:
        for path in root.glob(pattern.lstrip("/")):
            if path.is_char_device():
                found.add("/" + str(path.relative_to(root)))
    return tuple(sorted(found))


def gated_mounts(mode: str, *, visible_root: Path, host_driver_root: str) -> tuple[Mount, ...]:
    """The mode's mounts that exist under `visible_root` (this process's view of the
    driver root), with host paths under `host_driver_root`."""
    if mode != "gds":
        return ()
    return tuple(
        Mount(host_path=str(Path(host_driver_root) / p.lstrip("/")), container_path=p)
        for p in GDS_MOUNTS
        if (visible_root / p.lstrip("/")).exists()
    )
