"""The PCI class of each GPU, from sysfs: GFD's `nvidia.com/gpu.mode` (compute or graphics).

NVML does not say whether a GPU presents itself as a 3D controller (compute) or a VGA
controller (display); the PCI class in sysfs does, and GFD reads it there too.
"""

from collections.abc import Iterable
from pathlib import Path

SYSFS_PCI_DEVICES = Path("/sys/bus/pci/devices")


def pci_classes(bus_ids: Iterable[str], *, root: Path = SYSFS_PCI_DEVICES) -> tuple[int, ...]:
    """The class (e.g. 0x030200) of each device named by NVML's bus id ("00000000:18:00.0";
    sysfs names it "0000:18:00.0"). Raises OSError or ValueError when one cannot be read:
    GFD then labels the mode unknown."""
    classes = []
    for bus_id in bus_ids:
        domain, _, rest = bus_id.lower().partition(":")
        name = f"{domain[-4:]}:{rest}"
        classes.append(int((root / name / "class").read_text().strip(), 16))
    return tuple(classes)
