"""Pod attribution: the pure join of pod-resources, the checkpoint and NVML processes; at
the end, the same join fed by the fake kubelet (terminated pods, a bad checkpoint entry)."""

import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpufleet.exporter.core.attribution import (
    FB_USED,
    GPU_UTIL,
    AttributionStats,
    ContainerDevices,
    attribute,
    build_index,
)
from gpufleet.exporter.core.dra import DraHolding
from gpufleet.exporter.core.podmeta import PodMeta
from gpufleet.exporter.core.samples import Entity, EntitySample, MigInstance, ProcessSample
from gpufleet.exporter.pods.podresources import PodResourcesWatcher
from gpufleet.kubelet.checkpoint import CheckpointEntry
from gpufleet.lab.kubelet.kubelet import (
    ContainerAllocation,
    DeviceAllocation,
    FakeKubelet,
    PodAllocation,
    TerminatedPods,
)

MIB = 1 << 20


def _gpu_uuid(gpu: int) -> str:
    return f"GPU-{gpu:08x}-1111-2222-3333-444444444444"


def _mig_uuid(gpu: int, gi: int) -> str:
    return f"MIG-{gpu:04x}{gi:04x}-5555-6666-7777-888888888888"


def _entity(gpu: int, gi: int | None = None) -> Entity:
    mig = None
    if gi is not None:
        mig = MigInstance(profile="1g.10gb", gi_id=gi, ci_id=0, uuid=_mig_uuid(gpu, gi), dcgm_id=gi)
    return Entity(
        gpu=gpu,
        uuid=_gpu_uuid(gpu),
        pci_bus_id=f"00000000:{gpu + 0x10:02X}:00.0",
        model_name="NVIDIA H100 80GB HBM3",
        mig=mig,
    )


# The node: GPUs 0 and 1 whole; GPU 2 MIG-enabled with instances 1 and 2 (dcgm's flex mode
# reports the instances, not the parent).
NODE = (_entity(0), _entity(1), _entity(2, 1), _entity(2, 2))
GPU0, GPU1, MIG21, MIG22 = (0, None), (1, None), (2, 1), (2, 2)


def held(pod: str, *ids: str, res: str = "nvidia.com/gpu", ctr: str = "main") -> ContainerDevices:
    namespace, _, name = pod.rpartition("/")
    return ContainerDevices(
        namespace=namespace or "default",
        pod=name,
        container=ctr,
        resource_name=res,
        device_ids=ids,
    )


def entry(uid: str, *ids: str, res: str = "nvidia.com/gpu", ctr: str = "main") -> CheckpointEntry:
    return CheckpointEntry(pod_uid=uid, container_name=ctr, resource_name=res, device_ids=ids)


def proc(pid: int, util: float | None = None, mib: int | None = None) -> ProcessSample:
    return ProcessSample(
        pid=pid, sm_util_percent=util, used_memory_bytes=None if mib is None else mib * MIB
    )


@dataclass(frozen=True, kw_only=True)
class Case:
    containers: tuple[ContainerDevices, ...]
    checkpoint: tuple[CheckpointEntry, ...] = ()
    processes: dict = field(default_factory=dict)  # entity key -> processes (None: unknown)
    pid_pods: dict = field(default_factory=dict)
    extra: tuple[str, ...] = ()
    sampled: tuple[Entity, ...] = NODE
    # entity key -> [(namespace/pod/container, uid, vgpu, values)]
    want: dict = field(default_factory=dict)
    stats: AttributionStats = field(default_factory=AttributionStats)


def _run(case: Case):
    index = build_index(case.containers, case.checkpoint, NODE, extra_resource_names=case.extra)
    samples = [
        EntitySample(entity=e, values=DEVICE_VALUES, processes=case.processes.get(e.key, ()))
        for e in case.sampled
    ]
    return attribute(index, samples, case.pid_pods)


def _flat(pods):
    return {
        key: [
            (f"{s.pod.namespace}/{s.pod.name}/{s.pod.container}", s.pod.uid, s.vgpu, dict(s.values))
            for s in shares
        ]
        for key, shares in pods.items()
    }


G0, G1 = _gpu_uuid(0), _gpu_uuid(1)
# What every sampled entity's device reads: the pods' split values are fitted under these.
DEVICE_VALUES = {GPU_UTIL: 100.0, FB_USED: 81_559.0}
M21, M22 = _mig_uuid(2, 1), _mig_uuid(2, 2)

CASES = [
    pytest.param(
        Case(
            containers=(held("a", G0),),
            checkpoint=(entry("uid-a", G0),),
            want={GPU0: [("default/a/main", "uid-a", None, {})]},
        ),
        id="whole GPU to one pod: labels only, device values",
    ),
    pytest.param(
        Case(
            containers=(held("a", f"{G0}::0"), held("b", f"{G0}::1")),
            checkpoint=(entry("uid-a", f"{G0}::0"), entry("uid-b", f"{G0}::1")),
            processes={GPU0: (proc(10, 30, 1024), proc(11, 20, 512), proc(20, 110), proc(21, 40))},
            pid_pods={10: "uid-a", 11: "uid-a", 20: "uid-b", 21: "uid-b"},
            want={
                GPU0: [
                    ("default/a/main", "uid-a", "0", {GPU_UTIL: 25.0, FB_USED: 1536.0}),
                    ("default/b/main", "uid-b", "1", {GPU_UTIL: 75.0, FB_USED: 0.0}),
                ]
            },
        ),
        id="time-sliced GPU split per pod; per-process SM over the device's reading scaled to it",
    ),
    pytest.param(
        Case(
            containers=(held("a", f"{G0}::0"), held("b", f"{G0}::1")),
            checkpoint=(entry("uid-a", f"{G0}::0"), entry("uid-b", f"{G0}::1")),
            processes={GPU0: (proc(10, 70, 300),)},
            pid_pods={10: "uid-a"},
            want={
                GPU0: [
                    ("default/a/main", "uid-a", "0", {GPU_UTIL: 70.0, FB_USED: 300.0}),
                    ("default/b/main", "uid-b", "1", {GPU_UTIL: 0.0, FB_USED: 0.0}),
                ]
            },
        ),
        id="sharing pod with no processes gets 0",
    ),
    pytest.param(
        Case(
            containers=(held("a", f"{G0}::0"), held("b", f"{G0}::1")),
            checkpoint=(entry("uid-a", f"{G0}::0"), entry("uid-b", f"{G0}::1")),
            processes={GPU0: (proc(10, None, 100), proc(20, None, 200))},
            pid_pods={10: "uid-a", 20: "uid-b"},
            want={
                GPU0: [
                    ("default/a/main", "uid-a", "0", {FB_USED: 100.0}),
                    ("default/b/main", "uid-b", "1", {FB_USED: 200.0}),
                ]
            },
        ),
        id="no per-process utilisation from NVML: util not split, memory is",
    ),
    pytest.param(
        Case(
            containers=(held("a", f"{G0}::0"), held("b", f"{G0}::1")),
            checkpoint=(entry("uid-a", f"{G0}::0"), entry("uid-b", f"{G0}::1")),
            processes={GPU0: None},
            want={
                GPU0: [
                    ("default/a/main", "uid-a", "0", {}),
                    ("default/b/main", "uid-b", "1", {}),
                ]
            },
            stats=AttributionStats(unsplit_entities=1),
        ),
        id="NVML could not tell the processes: device value kept, never 0, counted unsplit",
    ),
    pytest.param(
        Case(
            containers=(held("a", f"{G0}::0"), held("b", f"{G0}::1")),
            checkpoint=(entry("uid-a", f"{G0}::0"), entry("uid-b", f"{G0}::1")),
            processes={GPU0: ()},
            want={
                GPU0: [
                    ("default/a/main", "uid-a", "0", {GPU_UTIL: 0.0, FB_USED: 0.0}),
                    ("default/b/main", "uid-b", "1", {GPU_UTIL: 0.0, FB_USED: 0.0}),
                ]
            },
        ),
        id="NVML says no processes: every sharing pod uses 0",
    ),
    pytest.param(
        Case(
            containers=(held("a", G0),),
            checkpoint=(entry("uid-a", G0),),
            processes={GPU0: None},
            want={GPU0: [("default/a/main", "uid-a", None, {})]},
        ),
        id="unknown processes on a GPU held by one pod: nothing to split, not counted",
    ),
    pytest.param(
        Case(
            containers=(held("a", f"{G0}::3", f"{G0}::0", f"{G1}::2"),),
            checkpoint=(entry("uid-a", f"{G0}::3", f"{G0}::0", f"{G1}::2"),),
            want={
                GPU0: [("default/a/main", "uid-a", "0,3", {})],
                GPU1: [("default/a/main", "uid-a", "2", {})],
            },
        ),
        id="replica ids with ::n: one container, several replicas of one GPU",
    ),
    pytest.param(
        Case(
            containers=(held("a", M21, res="nvidia.com/mig-1g.10gb"),),
            checkpoint=(entry("uid-a", M21, res="nvidia.com/mig-1g.10gb"),),
            want={MIG21: [("default/a/main", "uid-a", None, {})]},
        ),
        id="MIG slice to GI",
    ),
    pytest.param(
        Case(
            containers=(
                held("a", f"{M22}::0", res="nvidia.com/mig-1g.10gb"),
                held("b", f"{M22}::1", res="nvidia.com/mig-1g.10gb"),
            ),
            checkpoint=(
                entry("uid-a", f"{M22}::0", res="nvidia.com/mig-1g.10gb"),
                entry("uid-b", f"{M22}::1", res="nvidia.com/mig-1g.10gb"),
            ),
            processes={MIG22: (proc(10, 10, 10), proc(20, 20, 20))},
            pid_pods={10: "uid-a", 20: "uid-b"},
            want={
                MIG22: [
                    ("default/a/main", "uid-a", "0", {GPU_UTIL: 10.0, FB_USED: 10.0}),
                    ("default/b/main", "uid-b", "1", {GPU_UTIL: 20.0, FB_USED: 20.0}),
                ]
            },
        ),
        id="time-sliced MIG slice split per pod",
    ),
    pytest.param(
        Case(
            containers=(held("a", f"MIG-{_gpu_uuid(2)}/2/0"),),
            want={MIG22: [("default/a/main", None, None, {})]},
            stats=AttributionStats(unresolved_uids=1),
        ),
        id="old-driver MIG-GPU-uuid/gi/ci",
    ),
    pytest.param(
        Case(
            containers=(
                held("a", "nvidia2/gi1/vgpu3"),
                held("b", "nvidia1/vgpu4"),
                held("c", "nvidia0"),
                held("d", "nvidia2/gi2"),
            ),
            checkpoint=(
                entry("uid-a", "nvidia2/gi1/vgpu3"),
                entry("uid-b", "nvidia1/vgpu4"),
                entry("uid-c", "nvidia0"),
                entry("uid-d", "nvidia2/gi2"),
            ),
            want={
                GPU0: [("default/c/main", "uid-c", None, {})],
                GPU1: [("default/b/main", "uid-b", "4", {})],
                MIG21: [("default/a/main", "uid-a", "3", {})],
                MIG22: [("default/d/main", "uid-d", None, {})],
            },
        ),
        id="GKE nvidiaN, nvidiaN/vgpuM, nvidiaN/giK[/vgpuM]",
    ),
    pytest.param(
        Case(
            containers=(held("a", _gpu_uuid(2)),),
            checkpoint=(entry("uid-a", _gpu_uuid(2)),),
            want={
                MIG21: [("default/a/main", "uid-a", None, {})],
                MIG22: [("default/a/main", "uid-a", None, {})],
            },
        ),
        id="whole-GPU id on a MIG-enabled GPU holds all its instances",
    ),
    pytest.param(
        Case(
            containers=(held("a", f"{G0}::0", res="nvidia.com/gpu.shared"),),
            checkpoint=(entry("uid-a", f"{G0}::0", res="nvidia.com/gpu.shared"),),
            want={GPU0: [("default/a/main", "uid-a", "0", {})]},
        ),
        id="shared resource name kept by default (dcgm-exporter #151)",
    ),
    pytest.param(
        Case(
            containers=(held("a", G0, res="example.com/gpu"), held("b", G1, res="amd.com/gpu")),
            checkpoint=(entry("uid-a", G0, res="example.com/gpu"),),
            extra=("example.com/gpu",),
            want={GPU0: [("default/a/main", "uid-a", None, {})]},
        ),
        id="configured extra resource name kept, others ignored uncounted",
    ),
    pytest.param(
        Case(
            containers=(
                held("a", G0, "GPU-ffffffff-0000-0000-0000-000000000000", "GPU-x::y", "nvidia9"),
            ),
            checkpoint=(
                entry(
                    "uid-a", G0, "GPU-ffffffff-0000-0000-0000-000000000000", "GPU-x::y", "nvidia9"
                ),
            ),
            want={GPU0: [("default/a/main", "uid-a", None, {})]},
            stats=AttributionStats(unknown_device_ids=3),
        ),
        id="unknown id counted, known ids of the same container kept",
    ),
    pytest.param(
        Case(
            containers=(held("a", f"{G0}::0"), held("b", f"{G0}::1")),
            checkpoint=(entry("uid-a", f"{G0}::0"),),
            processes={GPU0: (proc(10, 30, 30),)},
            pid_pods={10: "uid-a"},
            want={
                GPU0: [
                    ("default/a/main", "uid-a", "0", {}),
                    ("default/b/main", None, "1", {}),
                ]
            },
            stats=AttributionStats(unresolved_uids=1, unsplit_entities=1),
        ),
        id="uid unresolved -> no split",
    ),
    pytest.param(
        Case(
            containers=(held("a", f"{G0}::0"), held("b", f"{G0}::1")),
            checkpoint=(
                entry("uid-a", f"{G0}::0"),
                entry("uid-b", f"{G0}::1"),
                entry("uid-old", f"{G0}::1"),
            ),
            want={
                GPU0: [
                    ("default/a/main", "uid-a", "0", {}),
                    ("default/b/main", None, "1", {}),
                ]
            },
            stats=AttributionStats(unresolved_uids=1, unsplit_entities=1),
        ),
        id="conflicting checkpoint entries -> uid unresolved, never guessed",
    ),
    pytest.param(
        Case(
            containers=(
                held("a", G1, ctr="main"),
                held("a", f"{G0}::0", ctr="sidecar"),
                held("b", f"{G0}::1"),
            ),
            checkpoint=(entry("uid-a", G1, ctr="main"), entry("uid-b", f"{G0}::1")),
            processes={GPU0: (proc(10, 5, 5),)},
            pid_pods={10: "uid-a"},
            want={
                GPU0: [
                    ("default/a/sidecar", "uid-a", "0", {GPU_UTIL: 5.0, FB_USED: 5.0}),
                    ("default/b/main", "uid-b", "1", {GPU_UTIL: 0.0, FB_USED: 0.0}),
                ],
                GPU1: [("default/a/main", "uid-a", None, {})],
            },
        ),
        id="pod uid resolved through another container's checkpoint entry",
    ),
    pytest.param(
        Case(
            containers=(
                held("a", f"{G0}::0", f"{G1}::0"),
                held("a", f"{G1}::0", f"{G1}::5"),
                held("b", f"{G0}::1"),
            ),
            checkpoint=(
                entry("uid-a", f"{G0}::0", f"{G1}::0", f"{G1}::5"),
                entry("uid-b", f"{G0}::1"),
            ),
            processes={GPU0: (proc(10, 1, 1),)},
            pid_pods={10: "uid-a"},
            want={
                GPU0: [
                    ("default/a/main", "uid-a", "0", {GPU_UTIL: 1.0, FB_USED: 1.0}),
                    ("default/b/main", "uid-b", "1", {GPU_UTIL: 0.0, FB_USED: 0.0}),
                ],
                GPU1: [("default/a/main", "uid-a", "0,5", {})],
            },
        ),
        id="List splits a container per NUMA node: merged before the checkpoint join",
    ),
    pytest.param(
        Case(containers=(), checkpoint=(entry("uid-a", G0),), want={}),
        id="pod gone -> no series",
    ),
    pytest.param(
        Case(
            containers=(held("ml/job", G0, ctr="train"), held("ml/next", G0)),
            checkpoint=(entry("uid-next", G0),),
            want={GPU0: [("ml/next/main", "uid-next", None, {})]},
            stats=AttributionStats(stale_holders=1),
        ),
        id="whole GPU listed for two pods: the checkpoint's holder keeps it (dcgm-exporter #140)",
    ),
    pytest.param(
        Case(
            containers=(held("ml/job", G0), held("ml/next", G0)),
            checkpoint=(entry("uid-next", G0),),
            want={
                GPU0: [
                    ("ml/job/main", None, None, {}),
                    ("ml/next/main", None, None, {}),
                ]
            },
            stats=AttributionStats(ambiguous_holders=2, unresolved_uids=2, unsplit_entities=1),
        ),
        id="two pods' holdings look the same: the entry tells neither apart, no UID given",
    ),
    pytest.param(
        Case(
            containers=(held("ml/job", G0, G1, ctr="train"), held("ml/next", G0)),
            checkpoint=(entry("uid-next", G0),),
            want={
                GPU0: [("ml/next/main", "uid-next", None, {})],
                GPU1: [("ml/job/train", None, None, {})],
            },
            stats=AttributionStats(stale_holders=1, unresolved_uids=1),
        ),
        id="stale holder loses only the contested GPU: no evidence about the other",
    ),
    pytest.param(
        Case(
            containers=(held("ml/job", G0), held("ml/next", G0)),
            want={
                GPU0: [
                    ("ml/job/main", None, None, {}),
                    ("ml/next/main", None, None, {}),
                ]
            },
            stats=AttributionStats(ambiguous_holders=2, unresolved_uids=2, unsplit_entities=1),
        ),
        id="whole GPU listed for two pods, no checkpoint match: both kept, counted ambiguous",
    ),
    pytest.param(
        Case(
            containers=(held("a", G0, ctr="init"), held("a", G0, ctr="main")),
            checkpoint=(entry("uid-a", G0, ctr="main"),),
            want={
                GPU0: [("default/a/init", "uid-a", None, {}), ("default/a/main", "uid-a", None, {})]
            },
        ),
        id="one pod's containers reusing a GPU are not contested",
    ),
    pytest.param(
        Case(
            containers=(held("a", G0), held("b", G1)),
            checkpoint=(entry("uid-a", G0), entry("uid-b", G1)),
            sampled=(_entity(0),),
            want={GPU0: [("default/a/main", "uid-a", None, {})]},
        ),
        id="held GPU missing from the collection -> no series",
    ),
    pytest.param(
        Case(
            containers=(held("a", f"{G0}::0"), held("b", f"{G0}::1"), held("c", f"{G1}::0")),
            checkpoint=(
                entry("uid-a", f"{G0}::0"),
                entry("uid-b", f"{G0}::1"),
                entry("uid-c", f"{G1}::0"),
            ),
            processes={GPU0: (proc(10, 10, 10), proc(30, 40, 50), proc(99, 40, 50))},
            pid_pods={10: "uid-a", 30: "uid-c"},
            want={
                GPU0: [
                    ("default/a/main", "uid-a", "0", {GPU_UTIL: 10.0, FB_USED: 10.0}),
                    ("default/b/main", "uid-b", "1", {GPU_UTIL: 0.0, FB_USED: 0.0}),
                ],
                GPU1: [("default/c/main", "uid-c", "0", {})],
            },
            stats=AttributionStats(unattributed_processes=2),
        ),
        id="processes of other pods or no pod ignored and counted",
    ),
    pytest.param(
        Case(
            containers=(
                held("a", f"{G0}::0", ctr="main"),
                held("a", f"{G0}::1", ctr="worker"),
            ),
            checkpoint=(entry("uid-a", f"{G0}::0"),),
            processes={GPU0: (proc(10, 10, 10),)},
            pid_pods={10: "uid-a"},
            want={
                GPU0: [
                    ("default/a/main", "uid-a", "0", {}),
                    ("default/a/worker", "uid-a", "1", {}),
                ]
            },
        ),
        id="two containers of one pod on a GPU: not shared, no split",
    ),
    pytest.param(
        Case(
            containers=(
                held("team-b/x", f"{G0}::2"),
                held("team-a/y", f"{G0}::1", ctr="z"),
                held("team-a/y", f"{G0}::0", ctr="b"),
            ),
            checkpoint=(
                entry("uid-x", f"{G0}::2"),
                entry("uid-y", f"{G0}::1", ctr="z"),
            ),
            processes={GPU0: (proc(10, 10, 10),)},
            pid_pods={10: "uid-y"},
            want={
                GPU0: [
                    ("team-a/y/z", "uid-y", "1", {}),
                    ("team-a/y/b", "uid-y", "0", {GPU_UTIL: 10.0, FB_USED: 10.0}),
                    ("team-b/x/main", "uid-x", "2", {GPU_UTIL: 0.0, FB_USED: 0.0}),
                ]
            },
        ),
        # dcgm-exporter's device -> pod map keeps the container `List` gives last.
        id="sorted by namespace, pod, then List order; values per pod, on its last container",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_attribution(case: Case) -> None:
    result = _run(case)
    assert _flat(result.pods) == case.want
    assert result.stats == case.stats


def test_index_is_reused_across_collections() -> None:
    """The index is built once per kubelet refresh; each collection only joins."""
    index = build_index(
        (held("a", f"{G0}::0"), held("b", f"{G0}::1")),
        (entry("uid-a", f"{G0}::0"), entry("uid-b", f"{G0}::1")),
        NODE,
    )
    first = attribute(index, [EntitySample(entity=NODE[0], values=DEVICE_VALUES)], {})
    busy = EntitySample(entity=NODE[0], values=DEVICE_VALUES, processes=(proc(10, 40, 40),))
    second = attribute(index, [busy], {10: "uid-b"})
    assert [dict(s.values) for s in first.pods[GPU0]] == [
        {GPU_UTIL: 0.0, FB_USED: 0.0},
        {GPU_UTIL: 0.0, FB_USED: 0.0},
    ]
    assert [dict(s.values) for s in second.pods[GPU0]] == [
        {GPU_UTIL: 0.0, FB_USED: 0.0},
        {GPU_UTIL: 40.0, FB_USED: 40.0},
    ]


def _shares(containers, checkpoint, samples, pid_pods=None):
    index = build_index(containers, checkpoint, NODE)
    pods = attribute(index, samples, pid_pods or {}).pods
    return {key: [s.gpu_share for s in shares] for key, shares in pods.items()}


def test_gpu_share_follows_sm_activity_then_memory_then_allocation() -> None:
    """A pod's part of its physical GPU: SM activity (strays keep theirs, unattributed),
    memory when nothing is busy, an equal part when NVML tells nothing."""
    containers = (held("a", f"{G0}::0"), held("b", f"{G0}::1"))
    checkpoint = (entry("uid-a", f"{G0}::0"), entry("uid-b", f"{G0}::1"))
    pids = {10: "uid-a", 20: "uid-b"}

    def sample(*processes):
        return EntitySample(entity=NODE[0], values=DEVICE_VALUES, processes=processes)

    busy = sample(proc(10, 30, 100), proc(20, 10, 900), proc(99, 40, 0))
    assert _shares(containers, checkpoint, [busy], pids) == {GPU0: [0.375, 0.125]}
    idle = sample(proc(10, 0, 100), proc(20, 0, 300))
    assert _shares(containers, checkpoint, [idle], pids) == {GPU0: [0.25, 0.75]}
    unknown = EntitySample(entity=NODE[0], values=DEVICE_VALUES, processes=None)
    assert _shares(containers, checkpoint, [unknown], pids) == {GPU0: [0.5, 0.5]}


def test_gpu_share_of_whole_gpus_and_mig_slices() -> None:
    """A pod holding a whole GPU has all of it; a 1g.10gb slice is 1/7 of an H100, and two
    pods time-sharing that slice split the seventh; a pod's other containers get none (its
    share goes on the one `List` gives last)."""
    containers = (
        held("a", G0),
        held("b", f"{M21}::0", res="nvidia.com/mig-1g.10gb"),
        held("c", f"{M21}::1", res="nvidia.com/mig-1g.10gb"),
        held("d", f"{G1}::0", ctr="x"),
        held("d", f"{G1}::1", ctr="y"),
    )
    checkpoint = (
        entry("uid-a", G0),
        entry("uid-b", f"{M21}::0", res="nvidia.com/mig-1g.10gb"),
        entry("uid-c", f"{M21}::1", res="nvidia.com/mig-1g.10gb"),
    )
    samples = [EntitySample(entity=e, values=DEVICE_VALUES) for e in NODE]
    shares = _shares(containers, checkpoint, samples)
    assert shares[GPU0] == [1.0]
    assert shares[MIG21] == [1 / 7 / 2, 1 / 7 / 2]
    assert shares[GPU1] == [None, 1.0]


# --- against the fake kubelet: terminated pods and the checkpoint, as a node shows them ------

KUBELET_GPU = _gpu_uuid(0)


def _gpu_pod(name: str, uid: str, container: str = "main") -> PodAllocation:
    devices = DeviceAllocation(resource_name="nvidia.com/gpu", device_ids=(KUBELET_GPU,))
    return PodAllocation(
        namespace="ml",
        name=name,
        uid=uid,
        containers=(ContainerAllocation(name=container, devices=(devices,)),),
    )


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    # A short root: unix socket paths are limited to 107 bytes, pytest's tmp_path can be long.
    with (
        tempfile.TemporaryDirectory(prefix="gf-", dir="/tmp") as root,
        FakeKubelet(Path(root)) as fake,
    ):
        yield fake


def _attributed(kubelet: FakeKubelet) -> tuple[dict, AttributionStats, dict[str, int]]:
    watcher = PodResourcesWatcher(
        socket_path=kubelet.pod_resources_socket, checkpoint_path=kubelet.checkpoint_path
    )
    try:
        view = watcher.refresh_now()
    finally:
        watcher.stop()
    index = build_index(view.containers, view.checkpoint, NODE)
    result = attribute(index, [EntitySample(entity=NODE[0], values={})], {})
    errors = {kind: n for kind, n in watcher.errors().items() if n}
    return _flat(result.pods), result.stats, errors


_NEXT_ONLY = {GPU0: [("ml/next/main", "uid-next", None, {})]}


@pytest.mark.parametrize(
    ("mode", "reallocated", "want"),
    [
        *(
            pytest.param(mode, True, _NEXT_ONLY, id=f"{mode}: GPU reallocated -> new pod only")
            for mode in TerminatedPods
        ),
        pytest.param(TerminatedPods.HIDDEN, False, {}, id="hidden (1.34+): gone at once"),
        pytest.param(
            TerminatedPods.WITHOUT_DEVICES, False, {}, id="without-devices (1.16-1.33): gone"
        ),
        # The remaining gap: a kubelet older than 1.16 lists the finished pod with its GPU
        # until the next allocation; only its phase (API server) could tell.
        pytest.param(
            TerminatedPods.WITH_DEVICES,
            False,
            {GPU0: [("ml/job/main", "uid-job", None, {})]},
            id="with-devices (pre-1.16): kept until the next allocation",
        ),
    ],
)
def test_finished_job_pod_through_the_kubelet(
    kubelet: FakeKubelet, mode: TerminatedPods, reallocated: bool, want: dict
) -> None:
    kubelet.terminated_pods = mode
    kubelet.add_pod(_gpu_pod("job", "uid-job"))
    kubelet.terminate_pod("ml", "job")
    if reallocated:
        kubelet.add_pod(_gpu_pod("next", "uid-next"))
    pods, stats, _ = _attributed(kubelet)
    assert pods == want
    assert (stats.stale_holders, stats.ambiguous_holders) == (0, 0)


def test_malformed_checkpoint_entry_costs_only_its_own_pod_uid(kubelet: FakeKubelet) -> None:
    kubelet.add_pod(_gpu_pod("a", "uid-a"))
    document = json.loads(kubelet.checkpoint_path.read_text())
    document["Data"]["PodDeviceEntries"].append({"PodUID": 7})
    kubelet.checkpoint_path.write_text(json.dumps(document))
    pods, stats, errors = _attributed(kubelet)
    assert pods == {GPU0: [("ml/a/main", "uid-a", None, {})]}
    assert (stats.unresolved_uids, errors) == (0, {"checkpoint": 1})


# --- issue 15 §2: pod metadata from the API, and DRA claims -----------------------------------


def test_api_pods_give_labels_and_a_uid_the_checkpoint_lacks() -> None:
    meta = {("ml", "a"): PodMeta(uid="api-uid-a", labels=(("app", "x"),))}
    index = build_index(
        (held("ml/a", _gpu_uuid(0)), held("ml/b", _gpu_uuid(1))), (), NODE, pods=meta
    )
    (a,) = index.holders[GPU0]
    (b,) = index.holders[GPU1]
    assert (a.pod.uid, a.pod.labels) == ("api-uid-a", (("app", "x"),))
    assert (b.pod.uid, b.pod.labels) == (None, ())
    assert index.stats.unresolved_uids == 1


def test_checkpoint_uid_wins_over_the_api() -> None:
    meta = {("ml", "a"): PodMeta(uid="api-uid")}
    index = build_index(
        (held("ml/a", _gpu_uuid(0)),), (entry("kubelet-uid", _gpu_uuid(0)),), NODE, pods=meta
    )
    assert index.holders[GPU0][0].pod.uid == "kubelet-uid"


DRA_ATTRS = (("dra_claim_name", "c"),)


@pytest.mark.parametrize(
    ("device_id", "keys", "unknown"),
    [
        pytest.param(_gpu_uuid(1), [GPU1], 0, id="whole-gpu"),
        pytest.param(_mig_uuid(2, 2), [MIG22], 0, id="mig-on-its-instance"),
        pytest.param(_gpu_uuid(2), [MIG21, MIG22], 0, id="mig-mode-gpu-whole"),
        pytest.param(_gpu_uuid(9), [], 1, id="not-on-this-node"),
    ],
)
def test_dra_claims_are_placed_like_device_ids(device_id, keys, unknown) -> None:
    claim = DraHolding(
        namespace="ml", pod="p", container="c", device_id=device_id, attributes=DRA_ATTRS
    )
    meta = {("ml", "p"): PodMeta(uid="uid-p", labels=(("app", "x"),))}
    index = build_index((), (), NODE, pods=meta, claims=(claim,))
    assert sorted(index.holders, key=str) == sorted(keys, key=str)
    for key in keys:
        (share,) = index.holders[key]
        assert share.pod.attributes == DRA_ATTRS
        assert (share.pod.uid, share.pod.labels) == ("uid-p", (("app", "x"),))
    assert index.stats.unknown_device_ids == unknown


def test_two_dra_pods_sharing_a_gpu_are_split_by_api_uids() -> None:
    claims = [
        DraHolding(namespace="ml", pod=p, container="c", device_id=_gpu_uuid(0), attributes=())
        for p in ("p", "q")
    ]
    meta = {("ml", p): PodMeta(uid=f"uid-{p}") for p in ("p", "q")}
    index = build_index((), (), NODE, pods=meta, claims=claims)
    busy = EntitySample(entity=NODE[0], values=DEVICE_VALUES, processes=(proc(10, 30, 64),))
    shares = attribute(index, [busy], {10: "uid-q"}).pods[GPU0]
    assert [(s.pod.name, dict(s.values)) for s in shares] == [
        ("p", {GPU_UTIL: 0.0, FB_USED: 0.0}),
        ("q", {GPU_UTIL: 30.0, FB_USED: 64.0}),
    ]
