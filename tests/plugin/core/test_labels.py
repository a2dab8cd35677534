"""`gfd_labels`: GPU Feature Discovery's label names and values (issue 16 §3).

Facts from NVIDIA k8s-device-plugin v0.20: the label table of
docs/gpu-feature-discovery/README.md, and internal/lm/resource_test.go's expectations."""

import dataclasses
import re

import pytest
from helpers.plugin_node import gpu, node

from gpufleet.plugin.core.config import (
    Flags,
    PluginConfig,
    ReplicatedResource,
    Sharing,
    SharingKind,
)
from gpufleet.plugin.core.labels import gfd_labels, product_value, render_features
from gpufleet.plugin.core.model import MigAttributes

# GFD's documented labels (docs/gpu-feature-discovery/README.md, v0.20), MIG_TYPE standing
# for a mixed-strategy resource such as mig-1g.10gb.
DOCUMENTED = {
    "nvidia.com/cuda.driver.major",
    "nvidia.com/cuda.driver.minor",
    "nvidia.com/cuda.driver.rev",
    "nvidia.com/cuda.driver-version.major",
    "nvidia.com/cuda.driver-version.minor",
    "nvidia.com/cuda.driver-version.revision",
    "nvidia.com/cuda.driver-version.full",
    "nvidia.com/cuda.runtime.major",
    "nvidia.com/cuda.runtime.minor",
    "nvidia.com/cuda.runtime-version.major",
    "nvidia.com/cuda.runtime-version.minor",
    "nvidia.com/cuda.runtime-version.full",
    "nvidia.com/gfd.timestamp",
    "nvidia.com/gpu.compute.major",
    "nvidia.com/gpu.compute.minor",
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.family",
    "nvidia.com/gpu.machine",
    "nvidia.com/gpu.memory",
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.replicas",
    "nvidia.com/gpu.mode",
    "nvidia.com/gpu.clique",
    "nvidia.com/mig.strategy",
    "nvidia.com/gpu.multiprocessors",
    "nvidia.com/gpu.slices.gi",
    "nvidia.com/gpu.slices.ci",
    "nvidia.com/gpu.engines.copy",
    "nvidia.com/gpu.engines.decoder",
    "nvidia.com/gpu.engines.encoder",
    "nvidia.com/gpu.engines.jpeg",
    "nvidia.com/gpu.engines.ofa",
    *(
        f"nvidia.com/MIG_TYPE.{suffix}"
        for suffix in (
            "count",
            "memory",
            "multiprocessors",
            "slices.ci",
            "slices.gi",
            "engines.copy",
            "engines.decoder",
            "engines.encoder",
            "engines.jpeg",
            "engines.ofa",
        )
    ),
}
# In GFD's code and tests beside the table: the sharing strategy, per-MIG-type product,
# replicas and strategy, and the mig/mps capability labels.
IN_CODE = {
    "nvidia.com/gpu.sharing-strategy",
    "nvidia.com/mig.capable",
    "nvidia.com/mps.capable",
    "nvidia.com/MIG_TYPE.product",
    "nvidia.com/MIG_TYPE.replicas",
    "nvidia.com/MIG_TYPE.sharing-strategy",
}
# Documented, not published: optional, or not known from NVML discovery (see labels.py).
NOT_PUBLISHED = {"nvidia.com/gfd.timestamp", "nvidia.com/gpu.clique"}
ATTRIBUTES = MigAttributes(
    memory_mb=300,
    multiprocessors=14,
    gi_slices=1,
    ci_slices=2,
    copy_engines=1,
    decoders=2,
    encoders=0,
    jpegs=3,
    ofas=4,
)


def with_attributes(g):
    """`g` MIG-capable, its MIG devices with NVML attributes."""
    migs = tuple(dataclasses.replace(m, attributes=ATTRIBUTES) for m in g.migs)
    return dataclasses.replace(g, mig_capable=True, migs=migs)


H100 = dataclasses.replace(gpu(0), mig_capable=True)
DRIVER = dict(driver_version="550.54.15", cuda_driver_version=12040)


def h100s(*gpus):
    return dataclasses.replace(node(*gpus), **DRIVER)


def shared(kind=SharingKind.TIME_SLICING, rename=False, name="nvidia.com/gpu", replicas=4):
    return Sharing(
        kind=kind,
        rename_by_default=rename,
        resources=(ReplicatedResource(name=name, replicas=replicas),),
    )


def _documented_name(label: str) -> str:
    """`nvidia.com/mig-1g.10gb.count` -> `nvidia.com/MIG_TYPE.count`."""
    return re.sub(r"^nvidia\.com/mig-(\d+c\.)?\d+g\.\d+gb\.", "nvidia.com/MIG_TYPE.", label)


@pytest.mark.parametrize(
    "config",
    [
        PluginConfig(),
        PluginConfig(sharing=shared()),
        PluginConfig(flags=Flags(mig_strategy="single")),
        PluginConfig(flags=Flags(mig_strategy="mixed")),
    ],
    ids=["none", "time-slicing", "single", "mixed"],
)
def test_every_label_is_gfds_and_only_the_listed_ones_are_missing(config):
    migs = ("1g.10gb",) * 7 if config.flags.mig_strategy == "single" else ("1g.10gb", "3g.40gb")
    gpus = (
        (dataclasses.replace(gpu(0, profiles=migs), mig_capable=True),)
        if config.flags.mig_strategy != "none"
        else (H100, dataclasses.replace(gpu(1), mig_capable=True))
    )
    names = {_documented_name(n) for n in gfd_labels(h100s(*gpus), config)}
    assert names <= DOCUMENTED | IN_CODE, names - DOCUMENTED - IN_CODE


def test_the_full_label_set_covers_gfds_documented_one():
    single = gfd_labels(
        h100s(with_attributes(gpu(0, profiles=("1g.10gb",)))),
        PluginConfig(flags=Flags(mig_strategy="single")),
    )
    mixed = gfd_labels(
        h100s(with_attributes(gpu(0, profiles=("1g.10gb",)))),
        PluginConfig(flags=Flags(mig_strategy="mixed")),
    )
    published = {_documented_name(n) for n in (*single, *mixed)}
    assert DOCUMENTED - published == NOT_PUBLISHED


def test_whole_gpus_no_sharing():
    assert gfd_labels(
        h100s(H100, dataclasses.replace(gpu(1), mig_capable=True)), PluginConfig()
    ) == {
        "nvidia.com/cuda.driver-version.full": "550.54.15",
        "nvidia.com/cuda.driver-version.major": "550",
        "nvidia.com/cuda.driver-version.minor": "54",
        "nvidia.com/cuda.driver-version.revision": "15",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "54",
        "nvidia.com/cuda.driver.rev": "15",
        "nvidia.com/cuda.runtime-version.full": "12.4",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": "4",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": "2",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.machine": "unknown",
        "nvidia.com/gpu.memory": str(H100.memory_mib),
        "nvidia.com/gpu.mode": "unknown",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mps.capable": "false",
    }


# internal/lm/resource_test.go TestGPUResourceLabeler / TestMigResourceLabeler rows.
SHARING_ROWS = [
    pytest.param(Sharing(), "NVIDIA-H100-80GB-HBM3", "1", "none", id="no sharing"),
    pytest.param(
        shared(name="nvidia.com/not-gpu", replicas=2),
        "NVIDIA-H100-80GB-HBM3",
        "1",
        "none",
        id="time-slicing ignores non-matching resource",
    ),
    pytest.param(
        shared(replicas=2),
        "NVIDIA-H100-80GB-HBM3-SHARED",
        "2",
        "time-slicing",
        id="time-slicing appends suffix",
    ),
    pytest.param(
        shared(replicas=2, rename=True),
        "NVIDIA-H100-80GB-HBM3",
        "2",
        "time-slicing",
        id="time-slicing renamed does not append suffix",
    ),
    pytest.param(
        shared(SharingKind.MPS, replicas=2),
        "NVIDIA-H100-80GB-HBM3-SHARED",
        "2",
        "mps",
        id="mps appends suffix",
    ),
    pytest.param(
        shared(SharingKind.MPS, replicas=2, rename=True),
        "NVIDIA-H100-80GB-HBM3",
        "2",
        "mps",
        id="mps renamed does not append suffix",
    ),
]


@pytest.mark.parametrize(("sharing", "product", "replicas", "strategy"), SHARING_ROWS)
def test_sharing(sharing, product, replicas, strategy):
    labels = gfd_labels(h100s(H100), PluginConfig(sharing=sharing))
    assert labels["nvidia.com/gpu.product"] == product
    assert labels["nvidia.com/gpu.replicas"] == replicas
    assert labels["nvidia.com/gpu.sharing-strategy"] == strategy
    assert labels["nvidia.com/gpu.count"] == "1"
    assert labels["nvidia.com/mps.capable"] == str(sharing.kind is SharingKind.MPS).lower()


def test_mig_single_overrides_gpu_labels():
    node_ = h100s(dataclasses.replace(gpu(0, profiles=("1g.10gb",) * 7), mig_capable=True))
    labels = gfd_labels(node_, PluginConfig(flags=Flags(mig_strategy="single"), sharing=shared()))
    assert {
        k: v for k, v in labels.items() if k.startswith(("nvidia.com/gpu.", "nvidia.com/mig"))
    } == {
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": "7",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.machine": "unknown",
        "nvidia.com/gpu.memory": "9856",
        "nvidia.com/gpu.mode": "unknown",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED",
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
        "nvidia.com/gpu.slices.ci": "1",
        "nvidia.com/gpu.slices.gi": "1",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "single",
    }


def test_mig_mixed_labels_each_profile():
    node_ = h100s(
        dataclasses.replace(
            gpu(0, profiles=("1g.10gb", "1g.10gb", "1c.3g.40gb")), mig_capable=True
        ),
        H100,
    )
    labels = gfd_labels(node_, PluginConfig(flags=Flags(mig_strategy="mixed")))
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig-1g.10gb.count"] == "2"
    assert labels["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert labels["nvidia.com/mig-1g.10gb.replicas"] == "1"
    assert labels["nvidia.com/mig-1g.10gb.sharing-strategy"] == "none"
    assert labels["nvidia.com/mig-1c.3g.40gb.slices.gi"] == "3"
    assert labels["nvidia.com/mig-1c.3g.40gb.slices.ci"] == "1"
    # The MIG-disabled GPU describes nvidia.com/gpu; the count is of GPUs of that model.
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/gpu.replicas"] == "1"


def test_mig_attributes_are_nvmls():
    """TestMigResourceLabeler's attribute labels, from NVML's attributes when it gave them."""
    node_ = h100s(with_attributes(gpu(0, profiles=("1g.10gb",))))
    labels = gfd_labels(node_, PluginConfig(flags=Flags(mig_strategy="mixed")))
    assert {k: v for k, v in labels.items() if k.startswith("nvidia.com/mig-1g.10gb.")} == {
        "nvidia.com/mig-1g.10gb.count": "1",
        "nvidia.com/mig-1g.10gb.engines.copy": "1",
        "nvidia.com/mig-1g.10gb.engines.decoder": "2",
        "nvidia.com/mig-1g.10gb.engines.encoder": "0",
        "nvidia.com/mig-1g.10gb.engines.jpeg": "3",
        "nvidia.com/mig-1g.10gb.engines.ofa": "4",
        "nvidia.com/mig-1g.10gb.memory": "300",
        "nvidia.com/mig-1g.10gb.multiprocessors": "14",
        "nvidia.com/mig-1g.10gb.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
        "nvidia.com/mig-1g.10gb.replicas": "1",
        "nvidia.com/mig-1g.10gb.sharing-strategy": "none",
        "nvidia.com/mig-1g.10gb.slices.ci": "2",
        "nvidia.com/mig-1g.10gb.slices.gi": "1",
    }


def test_only_mig_enabled_gpus_are_labelled_without_sharing():
    node_ = h100s(dataclasses.replace(gpu(0, profiles=("1g.10gb",)), mig_capable=True))
    labels = gfd_labels(node_, PluginConfig(sharing=shared()))
    assert labels["nvidia.com/gpu.replicas"] == "0"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


@pytest.mark.parametrize(
    ("major", "minor", "family"),
    [
        (7, 0, "volta"),
        (7, 5, "turing"),
        (8, 0, "ampere"),
        (8, 9, "ada-lovelace"),
        (9, 0, "hopper"),
        (10, 0, "blackwell"),
        (12, 0, "blackwell"),
        (13, 0, "rubin"),
        (4, 0, "undefined"),
    ],
)
def test_family(major, minor, family):
    labels = gfd_labels(h100s(gpu(0, compute_capability=(major, minor))), PluginConfig())
    assert labels["nvidia.com/gpu.family"] == family


@pytest.mark.parametrize(
    ("driver", "cuda", "present", "absent"),
    [
        ("550.54", 0, {"nvidia.com/cuda.driver.rev": ""}, "nvidia.com/cuda.runtime.major"),
        (
            "garbage",
            12020,
            {"nvidia.com/cuda.runtime-version.full": "12.2"},
            "nvidia.com/cuda.driver.major",
        ),
    ],
    ids=["two-part driver, no CUDA version", "malformed driver version left out"],
)
def test_versions(driver, cuda, present, absent):
    node_ = dataclasses.replace(node(gpu(0)), driver_version=driver, cuda_driver_version=cuda)
    labels = gfd_labels(node_, PluginConfig())
    assert present.items() <= labels.items()
    assert absent not in labels


def test_machine_type_is_sanitised_as_gfd_does():
    labels = gfd_labels(h100s(H100), PluginConfig(), machine="  NVIDIA DGX H100 (rev 2)\n")
    assert labels["nvidia.com/gpu.machine"] == "NVIDIA-DGX-H100-rev-2"


@pytest.mark.parametrize(
    ("classes", "mode"),
    [
        ((0x030000,), "graphics"),
        ((0x030200,), "compute"),
        ((0x068000,), "unknown"),
        ((0x030200,) * 3, "compute"),
        ((0x030000,) * 3, "graphics"),
        ((0x030200, 0x030000), "unknown"),
        ((), "unknown"),
    ],
    ids=[
        "VGA controller",
        "3D controller",
        "bridge class",
        "all 3D",
        "all VGA",
        "mixed classes",
        "unread",
    ],
)
def test_gpu_mode(classes, mode):
    """GFD's TestGPUModeLabeler rows."""
    assert (
        gfd_labels(h100s(H100), PluginConfig(), pci_classes=classes)["nvidia.com/gpu.mode"] == mode
    )


def test_no_gpu_no_labels_and_feature_file_format():
    assert gfd_labels(node(), PluginConfig()) == {}
    assert render_features({"a/b": "1", "c/d": ""}) == "a/b=1\nc/d=\n"


LONG_MODEL = "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition"  # 55 characters


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        (["MOCKMODEL", "MIG", "1g.300gb"], "MOCKMODEL-MIG-1g.300gb"),
        (["MOCKMODEL"], "MOCKMODEL"),
        (
            [LONG_MODEL, "MIG", "1g.24gb"],
            "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edi-MIG-1g.24gb",
        ),
        (
            [LONG_MODEL, "MIG", "1g.24gb.me"],
            "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-MIG-1g.24gb.me",
        ),
        (["A" * 51 + "." + "B" * 10, "MIG", "1g.5gb"], "A" * 51 + "-MIG-1g.5gb"),
        (["A" * 80], "A" * 63),
        (
            [LONG_MODEL, "MIG", "1g.24gb", "SHARED"],
            "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstat-MIG-1g.24gb-SHARED",
        ),
    ],
    ids=[
        "short value is returned unchanged",
        "short bare model is returned unchanged",
        "long model with mig profile truncates the model and preserves the profile",
        "media-extension profile is preserved and trailing separator is trimmed",
        "trailing dot from truncation is trimmed",
        "long bare model is truncated to the limit",
        "shared suffix is preserved when truncating",
    ],
)
def test_a_product_fits_a_label_value_as_nvidias_fix_cuts_it(parts, expected) -> None:
    """NVIDIA k8s-device-plugin PR #1880 (issue #1876), internal/lm/resource_test.go's
    TestGetProductName: a 67-character product had no label under NFD."""
    value = product_value(parts)
    assert value == expected
    assert len(value) <= 63 and re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", value)
