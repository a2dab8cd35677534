"""`publish_labels`: GFD's labels to NFD's feature file and onto the Node (fake API server);
a failure is a warning, never an exception (issue 16 §3)."""

import dataclasses
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.kube import api_client
from helpers.plugin_node import gpu, node
from kubernetes import client

from gpufleet.lab.kubeapi.server import FakeApiServer
from gpufleet.lab.nvml.api import SimulatedNvml
from gpufleet.plugin.core.config import Flags, PluginConfig
from gpufleet.plugin.labels import publish_labels
from gpufleet.plugin.nvml.discovery import discover

NODE = dataclasses.replace(
    node(
        *(
            dataclasses.replace(
                gpu(i, profiles=("1g.10gb",) * 7), pci_bus_id=f"00000000:{i + 24:02X}:00.0"
            )
            for i in range(2)
        )
    ),
    driver_version="550.54.15",
    cuda_driver_version=12040,
)
SINGLE = PluginConfig(flags=Flags(mig_strategy="single"))


def sysfs(root: Path, pci_class: str) -> Path:
    """/sys/bus/pci/devices with NODE's two GPUs of `pci_class`."""
    devices = root / "sys" / "bus" / "pci" / "devices"
    for bus in ("18", "19"):
        (devices / f"0000:{bus}:00.0").mkdir(parents=True)
        (devices / f"0000:{bus}:00.0" / "class").write_text(f"{pci_class}\n")
    return devices


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        client.CoreV1Api(api_client(server.url)).create_node({"metadata": {"name": "gpu-0"}})
        yield server


def test_file_and_node_get_the_same_labels(tmp_path: Path, apiserver) -> None:
    features = tmp_path / "features.d" / "gpufleet-plugin"
    features.parent.mkdir()
    dmi = tmp_path / "product_name"
    dmi.write_text("DGX H100\n")
    labels = publish_labels(
        NODE,
        SINGLE,
        features_file=str(features),
        node_name="gpu-0",
        machine_type_file=str(dmi),
        kube_url=apiserver.url,
        pci_devices=sysfs(tmp_path, "0x030200"),
    )
    assert labels["nvidia.com/gpu.machine"] == "DGX-H100"
    assert labels["nvidia.com/gpu.mode"] == "compute"
    assert labels["nvidia.com/gpu.count"] == "14"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert features.read_text() == "".join(f"{k}={v}\n" for k, v in labels.items())
    on_node = client.CoreV1Api(api_client(apiserver.url)).read_node("gpu-0").metadata.labels
    assert on_node == labels


def test_a_label_the_api_server_would_refuse_costs_only_itself(
    tmp_path: Path, apiserver, caplog
) -> None:
    """A common BIOS default DMI name ends in '.', which no label value may: the one merge
    patch carrying it was refused (422), and the Node got none of GFD's labels. NFD leaves
    such a label off; so does the Node's patch now."""
    dmi = tmp_path / "product_name"
    dmi.write_text("To Be Filled By O.E.M.\n")
    labels = publish_labels(
        NODE,
        SINGLE,
        features_file="",
        node_name="gpu-0",
        machine_type_file=str(dmi),
        kube_url=apiserver.url,
        pci_devices=sysfs(tmp_path, "0x030200"),
    )
    assert labels["nvidia.com/gpu.machine"] == "To-Be-Filled-By-O.E.M."  # as GFD makes it
    on_node = client.CoreV1Api(api_client(apiserver.url)).read_node("gpu-0").metadata.labels
    assert on_node == {k: v for k, v in labels.items() if k != "nvidia.com/gpu.machine"}
    assert any(
        "nvidia.com/gpu.machine='To-Be-Filled-By-O.E.M.' left off" in r.getMessage()
        for r in caplog.records
    )


def test_failures_are_warnings(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.WARNING)
    labels = publish_labels(
        NODE,
        SINGLE,
        features_file=str(tmp_path / "no-nfd" / "features.d" / "gpufleet-plugin"),
        node_name="gpu-0",
        machine_type_file=str(tmp_path / "no-dmi"),
        pci_devices=tmp_path / "no-sysfs",
        kube_url="http://127.0.0.1:9",  # discard port: connection refused
    )
    assert labels["nvidia.com/gpu.machine"] == "unknown"
    messages = [r.getMessage() for r in caplog.records]
    assert any("no such directory (is Node Feature Discovery installed?)" in m for m in messages)
    assert any(m.startswith("node gpu-0: cannot set GFD labels:") for m in messages)
    assert any("no-dmi: cannot read the machine type" in m for m in messages)
    assert labels["nvidia.com/gpu.mode"] == "unknown"
    assert any("cannot read the GPUs' PCI class" in m for m in messages)


# GFD's own end-to-end expectations (k8s-device-plugin v0.20 tests/expected-output-*.txt,
# copied verbatim into tests/plugin/data/gfd): one regex per label line. GFD's checkResult
# requires every output line to match one of them (Go's MatchString: unanchored search).
GFD_EXPECTED = Path(__file__).parent / "data" / "gfd"


@pytest.mark.parametrize(
    ("fleet", "strategy", "expected"),
    [
        ("2xH100", "none", "expected-output-mig-none.txt"),
        ("2xH100:mig=7x1g.10gb", "single", "expected-output-mig-single.txt"),
        ("1xH100:mig=2x1g.10gb,1x3g.40gb+1xH100", "mixed", "expected-output-mig-mixed.txt"),
    ],
    ids=["mig none", "mig single", "mig mixed"],
)
def test_labels_pass_gfds_expected_output(tmp_path: Path, fleet, strategy, expected) -> None:
    with SimulatedNvml(fleet, proc_root=tmp_path / "proc") as lib:
        lib.nvmlInit()
        discovered = discover(lib)
    features = tmp_path / "features.d" / "gpufleet-plugin"
    features.parent.mkdir()
    publish_labels(
        discovered,
        PluginConfig(flags=Flags(mig_strategy=strategy)),
        features_file=str(features),
        node_name="",
        machine_type_file="",
        pci_devices=tmp_path / "no-sysfs",
    )
    patterns = [re.compile(p) for p in (GFD_EXPECTED / expected).read_text().splitlines() if p]
    lines = features.read_text().splitlines()
    unmatched = [line for line in lines if not any(p.search(line) for p in patterns)]
    assert unmatched == []
    # And the other way: every label GFD expects is there, but the optional timestamp.
    missing = [p.pattern for p in patterns if not any(p.search(line) for line in lines)]
    assert missing == [r"nvidia\.com\/gfd\.timestamp=[0-9]{10}"]
