"""Pod attribution: which pod holds each GPU, MIG slice or time-sliced share, and what each
pod sharing an entity uses of it.

Pure: no I/O, no clock, no logging. The adapters gather the kubelet's view
(`pods.podresources`) and the pid -> pod UID map (`pods.procfs`); this module joins them
with one collection, placing each device ID through `device_placement`. It never guesses: a
device ID it cannot place, or a sharing pod whose UID it cannot resolve, is left out and
counted, never attributed by heuristics; a shared entity whose per-process data NVML could
not give gets no per-pod values (counted unsplit), so its device series keeps the whole
value rather than pods a made-up one. Each pod also gets its part of the physical GPU
(`PodShare.gpu_share`), by SM activity, memory, or allocation, so power and energy can be
charged to it.

Terminated pods: kubelets before 1.34 list them too (dcgm-exporter #140). Since 1.16 `List`
first frees the devices of pods in a terminal phase, so such a pod is listed without
devices and gets no series; older kubelets, and any kubelet whose pod sources are not yet
ready after a restart, still report its devices until the next allocation frees them.
Those pods stay attributed until then (telling them apart needs the pod phase, from the
API server). Should a whole device (no `::n` replica) ever be listed for two pods, only
the pods the device manager's checkpoint confirms keep it; without such evidence all keep
it and are counted `ambiguous_holders`.

Two steps keep the per-collection cost O(entities + processes): `build_index` runs when the
kubelet view or the node's entities change (every few seconds at most); `attribute` runs
every collection.
"""

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from gpufleet.core.mig_geometry import mig_compute_fraction
from gpufleet.exporter.core.device_placement import (
    Key,
    keeps_resource,
    locate,
    node_topology,
    parse_device_id,
)
from gpufleet.exporter.core.dra import DraHolding
from gpufleet.exporter.core.fields import BYTES_PER_MIB
from gpufleet.exporter.core.podmeta import PodMeta
from gpufleet.exporter.core.samples import (
    FB_USED,
    GPU_UTIL,
    Entity,
    EntitySample,
    PodRef,
    PodShare,
    PodView,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerDevices:
    """Devices of one resource held by one container, as pod-resources `List` reports them
    (one record per NUMA node is fine: `build_index` merges them)."""

    namespace: str
    pod: str
    container: str
    resource_name: str
    device_ids: tuple[str, ...]


class CheckpointRecord(Protocol):
    """One kubelet checkpoint entry (gpufleet.kubelet.checkpoint.CheckpointEntry fits)."""

    @property
    def pod_uid(self) -> str: ...
    @property
    def container_name(self) -> str: ...
    @property
    def resource_name(self) -> str: ...
    @property
    def device_ids(self) -> Collection[str]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class AttributionStats:
    """What could not be attributed. Gauges: counts for the current kubelet view and the
    current collection, not increments."""

    unknown_device_ids: int = 0  # kept-resource IDs that match no entity on this node
    unresolved_uids: int = 0  # holding pods with no (or an ambiguous) checkpoint UID
    # shared entities left without per-pod values: a UID missing, or NVML could not tell
    # the entity's processes
    unsplit_entities: int = 0
    unattributed_processes: int = 0  # processes on a split entity not in any holding pod
    stale_holders: int = 0  # pods dropped from a whole device the checkpoint gives another
    ambiguous_holders: int = 0  # pods sharing a whole device, none confirmed by checkpoint


@dataclass(frozen=True, slots=True, kw_only=True)
class AttributionIndex:
    """The kubelet view placed on the node's entities. Build once per kubelet refresh."""

    holders: Mapping[Key, tuple[PodShare, ...]]  # sorted; `values` empty
    splits: Mapping[Key, frozenset[str]]  # shared entities with every pod's UID known
    stats: AttributionStats


@dataclass(frozen=True, slots=True, kw_only=True)
class Attribution:
    """One collection's pod view and what it could not attribute."""

    pods: PodView
    stats: AttributionStats


_NO_META = PodMeta()
EMPTY_INDEX = AttributionIndex(holders={}, splits={}, stats=AttributionStats())


def build_index(
    containers: Iterable[ContainerDevices],
    checkpoint: Iterable[CheckpointRecord],
    entities: Iterable[Entity],
    *,
    extra_resource_names: Collection[str] = (),
    pods: Mapping[tuple[str, str], PodMeta] | None = None,
    claims: Iterable[DraHolding] = (),
) -> AttributionIndex:
    """Place every kept container's devices, and every DRA claim's, on the node's entities.

    Rebuild when the kubelet view, the API view or the set of entities changes. IDs that
    parse to no entity are dropped and counted; a pod's UID comes from the checkpoint entry
    with the same (container, resource, set of device IDs), else from the API (`pods`, by
    namespace and name, which also gives its labels), and stays None when neither knows it
    or conflicting entries match. A whole device listed for several pods stays only with
    those whose holding matches a checkpoint entry (all of them when none does).
    """
    pods = pods or {}
    kept = _merged(c for c in containers if keeps_resource(c.resource_name, extra_resource_names))
    topology = node_topology(entities)
    table = _uid_table(checkpoint, kept)
    uids = _pod_uids(kept, table)
    stale, stale_pods, ambiguous_pods = _stale_holdings(kept, table)
    replicas: dict[Key, dict[PodRef, set[int]]] = {}
    unknown = 0
    for position, held in enumerate(kept):
        meta = pods.get((held.namespace, held.pod), _NO_META)
        pod = PodRef(
            namespace=held.namespace,
            name=held.pod,
            container=held.container,
            uid=uids[(held.namespace, held.pod)] or meta.uid,
            labels=meta.labels,
        )
        for raw in held.device_ids:
            if (position, raw) in stale:
                continue
            device = parse_device_id(raw)
            keys = () if device is None else locate(device, topology)
            unknown += not keys
            for key in keys:
                # Last in: `_shares` keeps a pod's containers in the order they last held
                # the entity, so the last is the one dcgm-exporter's map keeps.
                holding = replicas.setdefault(key, {})
                got = holding.pop(pod, set())
                holding[pod] = got
                if device is not None and device.replica is not None:
                    got.add(device.replica)
    for claim in claims:
        meta = pods.get((claim.namespace, claim.pod), _NO_META)
        pod = PodRef(
            namespace=claim.namespace,
            name=claim.pod,
            container=claim.container,
            uid=meta.uid,
            labels=meta.labels,
            attributes=claim.attributes,
        )
        device = parse_device_id(claim.device_id)
        keys = () if device is None else locate(device, topology)
        unknown += not keys
        for key in keys:
            replicas.setdefault(key, {}).setdefault(pod, set())
    holders = {key: _shares(held) for key, held in replicas.items()}
    splits, unsplit = _splits(holders)
    stats = AttributionStats(
        unknown_device_ids=unknown,
        # pods left holding something: a pod dropped as stale is not a UID to find
        unresolved_uids=len(
            {(p.namespace, p.name) for held in replicas.values() for p in held if p.uid is None}
        ),
        unsplit_entities=unsplit,
        stale_holders=stale_pods,
        ambiguous_holders=ambiguous_pods,
    )
    return AttributionIndex(holders=holders, splits=splits, stats=stats)


def _merged(containers: Iterable[ContainerDevices]) -> list[ContainerDevices]:
    """One record per (pod, container, resource) with its unique IDs, in order.

    `List` reports a container's devices once per NUMA node (a device spanning nodes under
    each), while the checkpoint has one entry per resource: merge before joining.
    """
    ids: dict[tuple[str, str, str, str], dict[str, None]] = {}
    for held in containers:
        key = (held.namespace, held.pod, held.container, held.resource_name)
        ids.setdefault(key, {}).update(dict.fromkeys(held.device_ids))
    return [
        ContainerDevices(
            namespace=ns, pod=pod, container=ctr, resource_name=res, device_ids=tuple(got)
        )
        for (ns, pod, ctr, res), got in ids.items()
    ]


def _uid_table(
    checkpoint: Iterable[CheckpointRecord], kept: Iterable[ContainerDevices]
) -> dict[tuple[str, str, frozenset[str]], str | None]:
    """(container, resource, device IDs) -> pod UID; None where entries disagree.

    Only keys exactly one listed pod holds: when two pods' holdings look the same (a stale
    and a live pod with the same container name), an entry cannot tell which one it is.
    """
    claims: dict[tuple[str, str, frozenset[str]], set[tuple[str, str]]] = {}
    for held in kept:
        claims.setdefault(_join_key(held), set()).add((held.namespace, held.pod))
    table: dict[tuple[str, str, frozenset[str]], str | None] = {}
    for entry in checkpoint:
        key = (entry.container_name, entry.resource_name, frozenset(entry.device_ids))
        if len(claims.get(key, ())) == 1:
            agree = table.get(key, entry.pod_uid) == entry.pod_uid
            table[key] = entry.pod_uid if agree else None
    return table


def _stale_holdings(
    kept: Sequence[ContainerDevices],
    table: Mapping[tuple[str, str, frozenset[str]], str | None],
) -> tuple[frozenset[tuple[int, str]], int, int]:
    """Holdings of whole devices (no replica suffix) that `List` gives to 2+ pods.

    A pod with a holding of the device that matches a checkpoint entry (in `table`, so no
    other pod's holding looks the same) is live; the others' holdings of it are stale.
    Returns the stale (position in `kept`, device ID) pairs, the number of pods losing a
    device that way, and the number of pods kept on a contested device for want of any
    checkpoint match.
    """
    positions: dict[str, list[int]] = {}
    for position, held in enumerate(kept):
        for raw in held.device_ids:
            device = parse_device_id(raw)
            if device is not None and device.replica is None:
                positions.setdefault(raw, []).append(position)
    stale: set[tuple[int, str]] = set()
    stale_pods: set[tuple[str, str]] = set()
    ambiguous_pods: set[tuple[str, str]] = set()
    for raw, held_at in positions.items():
        pods = {(kept[p].namespace, kept[p].pod) for p in held_at}
        if len(pods) < 2:
            continue
        live = {(kept[p].namespace, kept[p].pod) for p in held_at if _join_key(kept[p]) in table}
        if not live:
            ambiguous_pods |= pods
            continue
        for p in held_at:
            if (kept[p].namespace, kept[p].pod) not in live:
                stale.add((p, raw))
                stale_pods.add((kept[p].namespace, kept[p].pod))
    return frozenset(stale), len(stale_pods), len(ambiguous_pods)


def _join_key(held: ContainerDevices) -> tuple[str, str, frozenset[str]]:
    """What a `List` holding shares with its checkpoint entry."""
    return (held.container, held.resource_name, frozenset(held.device_ids))


def _pod_uids(
    kept: Sequence[ContainerDevices],
    table: Mapping[tuple[str, str, frozenset[str]], str | None],
) -> dict[tuple[str, str], str | None]:
    """(namespace, pod) -> UID. Any matching container resolves its pod; conflicts -> None."""
    found: dict[tuple[str, str], set[str | None]] = {}
    for held in kept:
        uid = table.get(_join_key(held))
        found.setdefault((held.namespace, held.pod), set()).add(uid)
    resolved: dict[tuple[str, str], str | None] = {}
    for pod, candidates in found.items():
        known = candidates - {None}
        resolved[pod] = next(iter(known)) if len(known) == 1 else None
    return resolved


def _shares(pods: Mapping[PodRef, set[int]]) -> tuple[PodShare, ...]:
    """By pod; one pod's containers (stable sort) in the order they last held the entity."""
    ordered = sorted(pods, key=lambda p: (p.namespace, p.name))
    return tuple(
        PodShare(pod=pod, vgpu=",".join(str(n) for n in sorted(pods[pod])) or None)
        for pod in ordered
    )


def _splits(holders: Mapping[Key, tuple[PodShare, ...]]) -> tuple[dict[Key, frozenset[str]], int]:
    """Shared entities (2+ pods) whose pods all have a UID, and how many lack one."""
    splits: dict[Key, frozenset[str]] = {}
    unsplit = 0
    for key, shares in holders.items():
        if len({(s.pod.namespace, s.pod.name) for s in shares}) < 2:
            continue
        uids = [s.pod.uid for s in shares]
        if None in uids:
            unsplit += 1
        else:
            splits[key] = frozenset(uid for uid in uids if uid is not None)
    return splits, unsplit


def attribute(
    index: AttributionIndex, samples: Iterable[EntitySample], pid_pods: Mapping[int, str]
) -> Attribution:
    """Join one collection with the kubelet index.

    Entities held by no pod are absent from the view. An entity held by one container gets
    no per-pod values (the device value is the pod's value) and the entity's whole share
    of its GPU. On an entity held by several, each pod gets its own GPU_UTIL and FB_USED
    from its processes (`pid_pods` maps pid -> pod UID), fitted so that the pods' sum never
    exceeds the device's value; where NVML could not tell the processes (`processes` None)
    or a UID is missing, the pods get no split values and the entity counts as unsplit.
    Values and shares are per pod, so they go on the pod's last container only (the one
    whose labels the pod's series carry): a process maps to a pod, not a container.
    """
    pods: dict[Key, tuple[PodShare, ...]] = {}
    stray = 0
    unknown = 0
    for sample in samples:
        key = sample.entity.key
        shares = index.holders.get(key)
        if not shares:
            continue
        fraction = gpu_fraction(sample.entity)
        if len(shares) == 1:
            pods[key] = (replace(shares[0], gpu_share=fraction),)
            continue
        uids = index.splits.get(key)
        if uids is None or sample.processes is None:
            pods[key] = _allocation_shares(shares, fraction)
            unknown += uids is not None
            continue
        pods[key], unmatched = _split(shares, sample, uids, pid_pods, fraction)
        stray += unmatched
    stats = replace(
        index.stats,
        unattributed_processes=stray,
        unsplit_entities=index.stats.unsplit_entities + unknown,
    )
    return Attribution(pods=pods, stats=stats)


def gpu_fraction(entity: Entity) -> float:
    """The part of its physical GPU an entity is: 1 for a whole GPU, a MIG instance's
    compute slices over the GPU's (1g.10gb on an H100: 1/7)."""
    if entity.mig is None:
        return 1.0
    return mig_compute_fraction(entity.mig.profile)


def _last_containers(shares: Sequence[PodShare]) -> list[bool]:
    """Which shares are the last container of their pod: the one whose labels dcgm-exporter
    gives the pod's series, so values and shares go there."""
    seen: set[tuple[str, str]] = set()
    last = []
    for share in reversed(shares):
        pod = (share.pod.namespace, share.pod.name)
        last.append(pod not in seen)
        seen.add(pod)
    return last[::-1]


def _allocation_shares(shares: tuple[PodShare, ...], fraction: float) -> tuple[PodShare, ...]:
    """No per-process view: each pod gets an equal part of the entity, its allocation."""
    last = _last_containers(shares)
    part = fraction / sum(last)
    return tuple(replace(s, gpu_share=part) if f else s for s, f in zip(shares, last, strict=True))


def _split(
    shares: tuple[PodShare, ...],
    sample: EntitySample,
    uids: frozenset[str],
    pid_pods: Mapping[int, str],
    fraction: float,
) -> tuple[tuple[PodShare, ...], int]:
    """Per-pod GPU_UTIL (%) and FB_USED (MiB) and GPU share on one shared entity.

    A field is split only when the device reports it and some process reports it (or there
    are no processes): when NVML gave no per-process value the pods get none, rather than
    a made-up 0. Pods with no processes get 0. Per-process SM samples and memory can add up
    to more than the device's own reading (different sampling); the pods are then scaled
    down together, so their sum is the device's value. The share of the entity is the
    pod's part of all processes' SM utilization, of their memory when none is busy, or an
    equal part when neither tells. Returns the shares and the count of stray processes.
    """
    processes = sample.processes or ()
    util = dict.fromkeys(uids, 0.0)
    used_mib = dict.fromkeys(uids, 0.0)
    stray = 0
    stray_util = stray_mib = 0.0
    for process in processes:
        sm = process.sm_util_percent or 0.0
        mib = (process.used_memory_bytes or 0) / BYTES_PER_MIB
        uid = pid_pods.get(process.pid)
        if uid not in util:
            stray += 1
            stray_util += sm
            stray_mib += mib
            continue
        util[uid] += sm
        used_mib[uid] += mib
    fitted: dict[str, dict[str, float]] = {uid: {} for uid in uids}
    for field, parts, extra, reported in (
        (GPU_UTIL, util, stray_util, any(p.sm_util_percent is not None for p in processes)),
        (FB_USED, used_mib, stray_mib, any(p.used_memory_bytes is not None for p in processes)),
    ):
        device = sample.values.get(field)
        if device is None or (processes and not reported):
            continue
        for uid, value in _fit(parts, extra, device).items():
            fitted[uid][field] = value
    entity_share = _activity_shares(util, stray_util) or _activity_shares(used_mib, stray_mib)
    last = _last_containers(shares)
    out = []
    for share, is_last in zip(shares, last, strict=True):
        uid = share.pod.uid or ""
        if not is_last:
            out.append(share)
            continue
        part = entity_share[uid] if entity_share else 1.0 / len(uids)
        out.append(replace(share, values=fitted[uid], gpu_share=part * fraction))
    return tuple(out), stray


def _fit(parts: Mapping[str, float], extra: float, device: float) -> dict[str, float]:
    """Scale the pods' parts (and the stray `extra`) down to the device's value if they
    exceed it, so the sum over pods plus the unattributed rest is the device's value."""
    total = sum(parts.values()) + extra
    scale = device / total if total > device and total > 0 else 1.0
    return {uid: value * scale for uid, value in parts.items()}


def _activity_shares(parts: Mapping[str, float], extra: float) -> dict[str, float] | None:
    """Each pod's part of the total including strays; None when nothing is active."""
    total = sum(parts.values()) + extra
    if total <= 0:
        return None
    return {uid: value / total for uid, value in parts.items()}
