"""Series building: dcgm-exporter's labels, in dcgm-exporter's order, per entity and pod."""

from collections.abc import Mapping

import pytest
from helpers import TEST_DATA
from helpers.fields import DRIVER, ENERGY, FB_FREE, FB_USED, SERIAL, UTIL, XID

from gpufleet.exporter.core.counters import parse_counters, select_fields
from gpufleet.exporter.core.fields import CATALOG, FieldSpec, MetricType
from gpufleet.exporter.core.profiles import HostnameLabel, Profile
from gpufleet.exporter.core.render import render_text
from gpufleet.exporter.core.samples import (
    Entity,
    EntitySample,
    MigInstance,
    NodeSample,
    PodRef,
    PodShare,
    XidState,
)
from gpufleet.exporter.core.series import (
    XID_TOTAL_HELP,
    XID_TOTAL_NAME,
    MetricFamily,
    Sample,
    SeriesOptions,
    build_families,
)

G, C, L = MetricType.GAUGE, MetricType.COUNTER, MetricType.LABEL

CATALOG_SMALL = {s.name: s for s in (UTIL, FB_USED, FB_FREE, ENERGY, XID, DRIVER, SERIAL)}

H100 = "NVIDIA H100 80GB HBM3"
UUID0 = "GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b"
UUID1 = "GPU-15338f3e-5fd9-962d-921a-979b820520f0"
GPU0 = Entity(gpu=0, uuid=UUID0, pci_bus_id="00000000:8D:00.0", model_name=H100)
GPU1 = Entity(gpu=1, uuid=UUID1, pci_bus_id="00000000:91:00.0", model_name=H100)
HOST = "computeinstance-e00c1p6dpy98xytphp"


def _selection(*rows: str):
    text = "\n".join(rows)
    selection, warnings = select_fields(
        parse_counters(text, source="t.csv"), CATALOG_SMALL, source="t.csv"
    )
    assert warnings == ()
    return selection


def _share(pod: str, *, ns: str = "default", container: str | None = None, **kw) -> PodShare:
    ref = PodRef(namespace=ns, name=pod, container=container or pod, uid=kw.pop("uid", None))
    return PodShare(pod=ref, **kw)


def _build(
    entities: list[EntitySample],
    *,
    rows: tuple[str, ...] = ("DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).",),
    pods: Mapping | None = None,
    xid: Mapping[int, XidState] | None = None,
    node_labels: Mapping[str, str] | None = None,
    **options,
) -> tuple[MetricFamily, ...]:
    sample = NodeSample(
        entities=tuple(entities),
        node_labels=node_labels or {},
        xid=xid or {},
    )
    return build_families(
        sample,
        selection=_selection(*rows),
        pods=pods or {},
        options=SeriesOptions(**options),
    )


def _labels(family: MetricFamily) -> list[dict[str, str]]:
    return [dict(s.labels) for s in family.samples]


def _id_labels(entity: Entity) -> list[tuple[str, str]]:
    return [
        ("gpu", str(entity.gpu)),
        ("UUID", entity.uuid),
        ("pci_bus_id", entity.pci_bus_id),
        ("device", f"nvidia{entity.gpu}"),
        ("modelName", entity.model_name),
    ]


DRIVER_ROW = "DCGM_FI_DRIVER_VERSION, label, Driver Version"
UTIL_ROW = "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %)."


def test_labels_match_dcgm_exporter_issue_490_byte_for_byte() -> None:
    # GPU 0 is used by a pod; GPU 1 has no pod labels at all (not empty strings).
    families = _build(
        [
            EntitySample(entity=GPU1, values={"DCGM_FI_DEV_GPU_UTIL": 0.0}),
            EntitySample(entity=GPU0, values={"DCGM_FI_DEV_GPU_UTIL": 0.0}),
        ],
        rows=(UTIL_ROW, DRIVER_ROW),
        pods={GPU0.key: (_share("dcgmproftester2"),)},
        node_labels={"DCGM_FI_DRIVER_VERSION": "550.144.03"},
        hostname=HOST,
    )
    assert render_text(families) == (
        b"# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
        b"# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        b'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b",'
        b'pci_bus_id="00000000:8D:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",'
        b'Hostname="computeinstance-e00c1p6dpy98xytphp",DCGM_FI_DRIVER_VERSION="550.144.03",'
        b'container="dcgmproftester2",namespace="default",pod="dcgmproftester2"} 0\n'
        b'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-15338f3e-5fd9-962d-921a-979b820520f0",'
        b'pci_bus_id="00000000:91:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",'
        b'Hostname="computeinstance-e00c1p6dpy98xytphp",DCGM_FI_DRIVER_VERSION="550.144.03"} 0\n'
    )


def test_mig_labels_match_dcgm_exporter_issue_544() -> None:
    parent = Entity(
        gpu=0,
        uuid="GPU-153bdcb7-0000-0000-0000-000000000000",
        pci_bus_id="00000000:00:06.0",
        model_name="NVIDIA H100 NVL",
        mig=MigInstance(profile="1g.12gb", gi_id=7, ci_id=0, uuid="MIG-aaaa", dcgm_id=7),
    )
    families = _build(
        [EntitySample(entity=parent, values={"DCGM_FI_DEV_FB_USED": 12})],
        rows=("DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).", DRIVER_ROW),
        node_labels={"DCGM_FI_DRIVER_VERSION": "535.230.02"},
        hostname="h",
    )
    assert render_text(families).splitlines()[2] == (
        b'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-153bdcb7-0000-0000-0000-000000000000",'
        b'pci_bus_id="00000000:00:06.0",device="nvidia0",modelName="NVIDIA H100 NVL",'
        b'GPU_I_PROFILE="1g.12gb",GPU_I_ID="7",Hostname="h",'
        b'DCGM_FI_DRIVER_VERSION="535.230.02"} 12'
    )


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"hostname": "node-a"}, [("Hostname", "node-a")]),
        (
            {"hostname": "node-a", "hostname_label": HostnameLabel.LOWER},
            [("hostname", "node-a")],
        ),
        ({"hostname": None}, []),
        ({"hostname": ""}, []),
    ],
    ids=["Hostname-up-to-4.8.2", "lowercase-hostname", "no-hostname", "empty-hostname"],
)
def test_hostname_label(options: dict, expected: list[tuple[str, str]]) -> None:
    (family,) = _build([EntitySample(entity=GPU0, values={"DCGM_FI_DEV_GPU_UTIL": 5})], **options)
    assert family.samples == (Sample(labels=tuple(_id_labels(GPU0) + expected), value=5),)


def test_old_namespace_uses_1x_label_names() -> None:
    (family,) = _build(
        [EntitySample(entity=GPU0, values={"DCGM_FI_DEV_GPU_UTIL": 5})],
        pods={GPU0.key: (_share("p", ns="team", container="c", uid="u-1"),)},
        old_namespace=True,
        pod_uid=True,
    )
    assert family.samples[0].labels == (
        ("gpu", "0"),
        ("uuid", UUID0),
        ("pci_bus_id", "00000000:8D:00.0"),
        ("device", "nvidia0"),
        ("modelName", H100),
        ("container_name", "c"),
        ("pod_name", "p"),
        ("pod_namespace", "team"),
        ("pod_uid", "u-1"),
    )


def test_replace_blanks_in_model_name() -> None:
    entity = Entity(gpu=0, uuid=UUID0, pci_bus_id="b", model_name="NVIDIA  A100-SXM4 40GB ")
    (family,) = _build(
        [EntitySample(entity=entity, values={"DCGM_FI_DEV_GPU_UTIL": 1})],
        replace_blanks_in_model_name=True,
    )
    assert dict(family.samples[0].labels)["modelName"] == "NVIDIA-A100-SXM4-40GB"


def test_v49_profile_renames_and_rescales() -> None:
    """Units change only with a confirmed 4.9 name; FB_USED and energy have none here, so
    they keep their legacy names *and* units rather than change meaning under a name."""
    families = _build(
        [
            EntitySample(
                entity=GPU0,
                values={
                    "DCGM_FI_DEV_GPU_UTIL": 50,
                    "DCGM_FI_DEV_FB_USED": 3,
                    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 1500,
                },
            )
        ],
        rows=(
            UTIL_ROW,
            "DCGM_FI_DEV_FB_USED, gauge, My custom help",
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since "
            "boot (in mJ).",
            DRIVER_ROW,
        ),
        node_labels={"DCGM_FI_DRIVER_VERSION": "550.144.03"},
        profile=Profile.V49,
    )
    assert [(f.name, f.type, f.help, f.samples[0].value) for f in families] == [
        ("DCGM_FI_DEV_GPU_UTIL_RATIO", G, "GPU utilization (ratio).", 0.5),
        ("DCGM_FI_DEV_FB_USED", G, "My custom help", 3),
        (
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            C,
            "Total energy consumption since boot (in mJ).",
            1500,
        ),
    ]
    assert families[0].samples[0].labels[-1] == ("DCGM_FI_SYSTEM_DRIVER_VERSION", "550.144.03")


def test_v49_csv_names_with_legacy_profile_serve_legacy_names() -> None:
    (family,) = _build(
        [EntitySample(entity=GPU0, values={"DCGM_FI_DEV_GPU_UTIL": 50})],
        rows=("DCGM_FI_DEV_GPU_UTIL_RATIO, gauge, GPU utilization (ratio).",),
    )
    assert (family.name, family.samples[0].value) == ("DCGM_FI_DEV_GPU_UTIL", 50)


def test_shared_gpu_splits_its_value_between_pods_and_the_unclaimed_rest() -> None:
    """Each pod gets its own share; the device row keeps only what no pod accounts for, so
    the sum over the GPU's series is the GPU's value. A pod with no split value gets no
    series for the field (never the device's value again)."""
    shares = (
        _share("a", uid="uid-a", vgpu="0", values={"DCGM_FI_DEV_GPU_UTIL": 30.0}),
        _share("b", uid="uid-b", vgpu="1"),
    )
    (util,) = _build(
        [EntitySample(entity=GPU0, values={"DCGM_FI_DEV_GPU_UTIL": 70.0})],
        pods={GPU0.key: shares},
        pod_uid=True,
        virtual_gpus=True,
    )
    assert [(s.labels[5:], s.value) for s in util.samples] == [
        ((), 40.0),
        (
            (
                ("container", "a"),
                ("namespace", "default"),
                ("pod", "a"),
                ("pod_uid", "uid-a"),
                ("vgpu", "0"),
            ),
            30.0,
        ),
    ]
    assert sum(s.value for s in util.samples) == 70.0


def test_shared_gpu_serves_device_fields_once_byte_for_byte() -> None:
    """Fields NVML cannot split (FB_FREE) are on the device row only, once; FB_USED is
    split, the device row keeping the driver's part."""
    shares = (
        _share("a", uid="uid-a", values={"DCGM_FI_DEV_FB_USED": 1024.0}),
        _share("b", uid="uid-b", values={"DCGM_FI_DEV_FB_USED": 3072.0}),
    )
    families = _build(
        [
            EntitySample(
                entity=GPU0,
                values={
                    "DCGM_FI_DEV_FB_USED": 4100.0,
                    "DCGM_FI_DEV_FB_FREE": 77000.0,
                },
            )
        ],
        rows=(
            "DCGM_FI_DEV_FB_FREE, gauge, Framebuffer memory free (in MiB).",
            "DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).",
        ),
        pods={GPU0.key: shares},
    )
    ident = (
        b'gpu="0",UUID="GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b",pci_bus_id="00000000:8D:00.0",'
        b'device="nvidia0",modelName="NVIDIA H100 80GB HBM3"'
    )
    assert render_text(families[:2]) == (
        b"# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).\n"
        b"# TYPE DCGM_FI_DEV_FB_FREE gauge\n"
        b"DCGM_FI_DEV_FB_FREE{" + ident + b"} 77000\n"
        b"# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n"
        b"# TYPE DCGM_FI_DEV_FB_USED gauge\n"
        b"DCGM_FI_DEV_FB_USED{" + ident + b"} 4\n"
        b"DCGM_FI_DEV_FB_USED{" + ident + b',container="a",namespace="default",pod="a"} 1024\n'
        b"DCGM_FI_DEV_FB_USED{" + ident + b',container="b",namespace="default",pod="b"} 3072\n'
    )


def test_two_containers_of_one_pod_are_one_holder() -> None:
    """One pod holding a GPU through two containers: one series, labelled with the container
    listed last (a sidecar is listed before the app), as dcgm-exporter's map keeps it."""
    (util,) = _build(
        [EntitySample(entity=GPU0, values={"DCGM_FI_DEV_GPU_UTIL": 70.0})],
        pods={GPU0.key: (_share("a", container="sidecar"), _share("a", container="app"))},
    )
    assert [(dict(s.labels).get("container"), s.value) for s in util.samples] == [("app", 70.0)]


def test_vgpu_and_pod_uid_only_when_enabled() -> None:
    (util,) = _build(
        [EntitySample(entity=GPU0, values={"DCGM_FI_DEV_GPU_UTIL": 70.0})],
        pods={GPU0.key: (_share("a", uid="uid-a", vgpu="0"),)},
    )
    assert [k for k, _ in util.samples[0].labels[5:]] == ["container", "namespace", "pod"]


def test_unsplit_shared_gpu_keeps_the_whole_value_on_its_device_row() -> None:
    """No pod got a split value (NVML could not tell the processes): the device row keeps
    the device's value, and no pod claims a copy of it."""
    (util,) = _build(
        [EntitySample(entity=GPU0, values={"DCGM_FI_DEV_GPU_UTIL": 55.0})],
        pods={GPU0.key: (_share("a"), _share("b"))},
    )
    assert [(s.labels[5:], s.value) for s in util.samples] == [((), 55.0)]


def test_missing_values_give_no_series_and_empty_families_are_dropped() -> None:
    families = _build(
        [
            EntitySample(entity=GPU0, values={"DCGM_FI_DEV_GPU_UTIL": 1}),
            EntitySample(entity=GPU1, values={}),
        ],
        rows=(UTIL_ROW, "DCGM_FI_DEV_FB_USED, gauge, h"),
    )
    assert [(f.name, len(f.samples)) for f in families] == [("DCGM_FI_DEV_GPU_UTIL", 1)]


def test_family_order_is_csv_order_and_samples_follow_entity_then_pod() -> None:
    mig = [
        Entity(
            gpu=1,
            uuid=UUID1,
            pci_bus_id="b",
            model_name="m",
            mig=MigInstance(profile="1g.10gb", gi_id=gi, ci_id=0, uuid=f"MIG-{gi}", dcgm_id=gi),
        )
        for gi in (13, 5)
    ]
    values = {"DCGM_FI_DEV_GPU_UTIL": 1, "DCGM_FI_DEV_FB_USED": 2}
    families = _build(
        [EntitySample(entity=e, values=values) for e in (mig[0], GPU0, mig[1])],
        rows=("DCGM_FI_DEV_FB_USED, gauge, h", UTIL_ROW),
        pods={mig[1].key: (_share("x", values=values), _share("y", values=values))},
    )
    assert [f.name for f in families] == ["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL"]
    order = [(d["gpu"], d.get("GPU_I_ID"), d.get("pod")) for d in _labels(families[0])]
    assert order == [
        ("0", None, None),
        ("1", "5", None),  # shared: the device row comes first
        ("1", "5", "x"),
        ("1", "5", "y"),
        ("1", "13", None),
    ]
    util_order = [(d["gpu"], d.get("GPU_I_ID"), d.get("pod")) for d in _labels(families[1])]
    assert util_order == order


def test_label_rows_prefer_entity_values_sort_by_key_and_skip_missing() -> None:
    (family,) = _build(
        [
            EntitySample(
                entity=GPU0,
                values={"DCGM_FI_DEV_GPU_UTIL": 1},
                labels={"DCGM_FI_DEV_SERIAL": "1650123", "DCGM_FI_DRIVER_VERSION": "999"},
            ),
            EntitySample(entity=GPU1, values={"DCGM_FI_DEV_GPU_UTIL": 1}),
        ],
        rows=(UTIL_ROW, DRIVER_ROW, "DCGM_FI_DEV_SERIAL, label, Device Serial Number"),
        node_labels={"DCGM_FI_DRIVER_VERSION": "550.144.03"},
    )
    assert [s.labels[5:] for s in family.samples] == [
        (("DCGM_FI_DEV_SERIAL", "1650123"), ("DCGM_FI_DRIVER_VERSION", "999")),
        (("DCGM_FI_DRIVER_VERSION", "550.144.03"),),
    ]


XID_ROW = "DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered."


def test_xid_gauge_carries_dcgm_err_labels_and_per_xid_counter_follows() -> None:
    families = _build(
        [
            EntitySample(entity=GPU0, values={}),
            EntitySample(entity=GPU1, values={}),
            EntitySample(
                entity=Entity(gpu=2, uuid="GPU-2", pci_bus_id="c", model_name="m"), values={}
            ),
        ],
        rows=(XID_ROW, UTIL_ROW),
        xid={
            0: XidState(last=79, counts={79: 1, 13: 4}),
            1: XidState(last=0, counts={}),  # watched, no XID yet
            2: XidState(last=250, counts={250: 1}),
        },
    )
    assert [f.name for f in families] == ["DCGM_FI_DEV_XID_ERRORS", XID_TOTAL_NAME]
    gauge, total = families
    assert [(s.labels[5:], s.value) for s in gauge.samples] == [
        ((("err_code", "79"), ("err_msg", "GPU has fallen off the bus")), 79),
        ((("err_code", "0"), ("err_msg", "No Error")), 0),
        ((("err_code", "250"), ("err_msg", "Unknown Error")), 250),
    ]
    assert (total.type, total.help) == (C, XID_TOTAL_HELP)
    assert [(s.labels[0], s.labels[5:], s.value) for s in total.samples] == [
        (("gpu", "0"), (("xid", "13"),), 4),
        (("gpu", "0"), (("xid", "79"),), 1),
        (("gpu", "2"), (("xid", "250"),), 1),
    ]


def test_xid_series_only_for_watched_gpus() -> None:
    """No watcher on a GPU (event registration failed): no XID is known, none is claimed."""
    families = _build(
        [EntitySample(entity=GPU0, values={"DCGM_FI_DEV_GPU_UTIL": 1})],
        rows=(XID_ROW, UTIL_ROW),
        xid={},
    )
    assert [f.name for f in families] == ["DCGM_FI_DEV_GPU_UTIL"]


def test_xid_attributes_sort_among_pod_labels_as_in_dcgm() -> None:
    # dcgm-exporter keeps pod labels and err_* in one map rendered in key order.
    gauge, total = _build(
        [EntitySample(entity=GPU0, values={})],
        rows=(XID_ROW, DRIVER_ROW),
        pods={GPU0.key: (_share("p", ns="n", container="c"),)},
        xid={0: XidState(last=79, counts={79: 1})},
        node_labels={"DCGM_FI_DRIVER_VERSION": "550"},
        hostname="h",
    )
    assert [k for k, _ in gauge.samples[0].labels[5:]] == [
        "Hostname",
        "DCGM_FI_DRIVER_VERSION",
        "container",
        "err_code",
        "err_msg",
        "namespace",
        "pod",
    ]
    assert [k for k, _ in total.samples[0].labels[5:]] == [
        "Hostname",
        "DCGM_FI_DRIVER_VERSION",
        "container",
        "namespace",
        "pod",
        "xid",
    ]


def test_xids_go_on_the_gpu_series_only() -> None:
    """XIDs are per GPU: one series on the GPU's own row, never repeated on its MIG
    instances or on the pods sharing it; with instances only (`-d i`) there is none."""
    instance = Entity(
        gpu=0,
        uuid=UUID0,
        pci_bus_id="b",
        model_name="m",
        mig=MigInstance(profile="1g.10gb", gi_id=9, ci_id=0, uuid="MIG-9", dcgm_id=9),
    )
    state = {0: XidState(last=48, counts={48: 2}), 1: XidState(last=0, counts={})}
    entities = [
        EntitySample(entity=GPU0, values={}),
        EntitySample(entity=instance, values={}),
        EntitySample(entity=GPU1, values={}),
    ]
    pods = {GPU1.key: (_share("a"), _share("b"))}
    gauge, total = _build(entities, rows=(XID_ROW,), xid=state, pods=pods)
    assert [(dict(s.labels)["gpu"], "GPU_I_ID" in dict(s.labels)) for s in gauge.samples] == [
        ("0", False),
        ("1", False),
    ]
    assert all("pod" not in dict(s.labels) for s in gauge.samples)
    assert [s.value for s in total.samples] == [2]
    assert _build(entities[1:2], rows=(XID_ROW,), xid=state) == ()


def test_mig_gpu_keeps_whole_gpu_fields_once_and_instances_their_own() -> None:
    """On a MIG-enabled GPU, power (a whole-GPU field) is served once, on the GPU's row;
    FB_USED (per instance) on each instance, not on the GPU. sum() stays physical."""
    power = FieldSpec(name="DCGM_FI_DEV_POWER_USAGE", type=G, help="p", nvml="-")
    catalog = {**CATALOG_SMALL, power.name: power}
    rows = "DCGM_FI_DEV_POWER_USAGE, gauge, p\nDCGM_FI_DEV_FB_USED, gauge, f"
    selection, _ = select_fields(parse_counters(rows, source="t"), catalog, source="t")
    instances = [
        Entity(
            gpu=0,
            uuid=UUID0,
            pci_bus_id="b",
            model_name="m",
            mig=MigInstance(profile="1g.10gb", gi_id=gi, ci_id=0, uuid=f"MIG-{gi}", dcgm_id=gi),
        )
        for gi in (7, 8)
    ]
    gpu_values = {"DCGM_FI_DEV_POWER_USAGE": 350.0, "DCGM_FI_DEV_FB_USED": 9000.0}
    entities = (
        EntitySample(entity=GPU0, values=gpu_values),
        EntitySample(entity=instances[0], values={"DCGM_FI_DEV_FB_USED": 4000.0}),
        EntitySample(entity=instances[1], values={"DCGM_FI_DEV_FB_USED": 5000.0}),
    )
    pods = {instances[0].key: (_share("a", gpu_share=1 / 7),)}
    power_family, fb, share, pod_power = build_families(
        NodeSample(entities=entities), selection=selection, pods=pods, options=SeriesOptions()
    )
    assert [(dict(s.labels).get("GPU_I_ID"), s.value) for s in power_family.samples] == [
        (None, 350.0)
    ]
    assert [(dict(s.labels).get("GPU_I_ID"), s.value) for s in fb.samples] == [
        ("7", 4000.0),
        ("8", 5000.0),
    ]
    assert (share.name, [s.value for s in share.samples]) == ("gpufleet_pod_gpu_share", [1 / 7])
    assert pod_power.name == "gpufleet_pod_power_usage"
    assert [(dict(s.labels)["pod"], s.value) for s in pod_power.samples] == [("a", 50.0)]


def test_xid_name_follows_the_v49_profile() -> None:
    gauge, total = _build(
        [EntitySample(entity=GPU0, values={})],
        rows=(XID_ROW,),
        xid={0: XidState(last=31, counts={31: 1})},
        profile=Profile.V49,
    )
    assert (gauge.name, total.name) == ("DCGM_FI_DEV_XID_ERROR", XID_TOTAL_NAME)


def test_full_catalog_default_file_builds_every_default_metric() -> None:
    path = TEST_DATA / "dcgm-default-counters.csv"
    selection, _ = select_fields(
        parse_counters(path.read_text(), source=str(path)), CATALOG, source=str(path)
    )
    values = {s.spec.name: 1.0 for s in selection.metrics}
    families = build_families(
        NodeSample(
            entities=(EntitySample(entity=GPU0, values=values),),
            node_labels={"DCGM_FI_DRIVER_VERSION": "550.144.03"},
            xid={0: XidState(last=0, counts={})},
        ),
        selection=selection,
        pods={},
        options=SeriesOptions(hostname="h"),
    )
    # No XID seen: the per-xid counter has no series yet, so it is left out.
    assert [f.name for f in families] == [s.spec.name for s in selection.metrics]
    assert len(families) == 25
    for family in families:
        assert family.samples[0].labels[5:7] == (
            ("Hostname", "h"),
            ("DCGM_FI_DRIVER_VERSION", "550.144.03"),
        )


def test_pod_labels_and_dra_attributes_byte_for_byte() -> None:
    # issue 15 §2: pod labels follow the label rows, dra_* sort among the attributes.
    ref = PodRef(
        namespace="ml",
        name="p",
        container="c",
        labels=(("app", "vllm"), ("tier", "gold")),
        attributes=(("dra_claim_name", "p-gpu"), ("dra_pool_name", "node-a")),
    )
    families = _build(
        [EntitySample(entity=GPU0, values={"DCGM_FI_DEV_GPU_UTIL": 7.0})],
        rows=(UTIL_ROW, DRIVER_ROW),
        pods={GPU0.key: (PodShare(pod=ref),)},
        node_labels={"DCGM_FI_DRIVER_VERSION": "550.144.03"},
    )
    assert render_text(families).splitlines()[2] == (
        b'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b",'
        b'pci_bus_id="00000000:8D:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",'
        b'DCGM_FI_DRIVER_VERSION="550.144.03",app="vllm",tier="gold",'
        b'container="c",dra_claim_name="p-gpu",dra_pool_name="node-a",namespace="ml",pod="p"} 7'
    )
