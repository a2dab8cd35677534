"""Series building: one collection (`NodeSample`) plus the pod view -> metric families.

Labels follow dcgm-exporter's GPU template exactly, because dashboards and alert rules
match on them: `gpu, UUID, pci_bus_id, device, modelName, [GPU_I_PROFILE, GPU_I_ID],
[Hostname]`, then the `label` rows of the CSV sorted by key, then the attributes sorted by
key (`container, err_code, err_msg, namespace, pod, pod_uid, vgpu`, `dra_*`, and our `xid`).
Pod labels (`--kubernetes-enable-pod-labels`) come between the two, sorted by key;
dcgm-exporter sorts them together with the label rows (only the order differs, and
Prometheus ignores it).
dcgm-exporter keeps the pod labels and `err_code`/`err_msg` in one attributes map and its
template ranges over it in key order, so on an XID series of a pod they interleave.

Sums are physically true: every field appears exactly once per GPU or MIG instance.
- An entity held by one container gets one series per field, with that pod's labels (as
  dcgm-exporter); an entity no pod holds gets one without pod labels.
- An entity held by several (time-slicing, MPS) keeps its device-level fields on one
  device series without pod labels. Each pod gets its own `SPLIT_FIELDS` (GPU_UTIL,
  FB_USED) where NVML can split them, and the device series keeps only the rest that no
  pod accounts for (driver memory, stray processes), so the sum over a GPU's series is
  the GPU's value. Where the split is unknown the device series keeps the whole value.
- On a MIG-enabled GPU the whole-GPU quantities (`MigSource.PARENT`: temperature, power,
  clocks, energy, ECC, ...) are served once, on the GPU's own series (no GPU_I labels),
  and each instance serves its own fields. dcgm-exporter copies them onto every instance.
- `gpufleet_pod_gpu_share` is the part of its physical GPU a pod is attributed, and
  `gpufleet_pod_power_usage` that part of the GPU's power, so power and energy can be
  charged to pods without changing what any DCGM name means.

XID series exist only for GPUs the XID watcher watches (`NodeSample.xid`): where event
registration failed, no XID is known and none is claimed, not even "No Error". They are
per GPU, so they go on the GPU's series only (never a MIG instance's or a sharing pod's).

dcgm-exporter's own windowed counts (`windows.py`) add `window_size_in_ms` and `xid` or
`clock_event` among the label-row labels (dcgm keeps them in the same map), sorted by key.
They have series for the xids / reasons counted at least once in the window, and, as in
dcgm-exporter, one series of value 0 without the `xid` / `clock_event` label while none
was; only for GPUs with a history (XIDs: watched GPUs; clock events: GPUs whose reasons
NVML reported within the window).

DCGM_EXP_GPU_HEALTH_STATUS and DCGM_EXP_P2P_STATUS are per physical GPU, whatever -d
selects, with `health_watch`/`health_error_code` or `peer_gpu`/`link_status` among the
label-row labels, as dcgm-exporter serves them.

Pure: no I/O, no clock, no logging. Escaping is the renderer's job; values here are raw.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from gpufleet.exporter.core.counters import SelectedField, Selection
from gpufleet.exporter.core.fields import (
    CLOCK_EVENTS_COUNT_FIELD,
    HEALTH_FIELD,
    P2P_FIELD,
    XID_COUNT_FIELD,
    XID_FIELD,
    XID_MESSAGES,
    MetricType,
    MigSource,
)
from gpufleet.exporter.core.profiles import (
    LABEL_NAMES,
    OLD_LABEL_NAMES,
    HostnameLabel,
    LabelNames,
    Profile,
    served_name,
    unit_scale,
)
from gpufleet.exporter.core.samples import SPLIT_FIELDS, EntitySample, NodeSample, PodShare, PodView
from gpufleet.exporter.core.windows import count_clock_events, count_xids

XID_TOTAL_NAME = "gpufleet_xid_errors_total"
XID_TOTAL_HELP = "Number of XID events per xid since the exporter started."
# dcgm-exporter's err_msg for code 0 and for codes outside its table.
XID_NONE_MESSAGE = "No Error"
XID_UNKNOWN_MESSAGE = "Unknown Error"
_WINDOWED = frozenset({XID_COUNT_FIELD, CLOCK_EVENTS_COUNT_FIELD})
GPU_SHARE_NAME = "gpufleet_pod_gpu_share"
GPU_SHARE_HELP = (
    "Part of its physical GPU attributed to the pod (0-1): its part of the GPU's SM "
    "activity, or of its memory when idle, times its MIG instance's part of the GPU."
)
POD_POWER_NAME = "gpufleet_pod_power_usage"
POD_POWER_HELP = "Power draw of the pod's GPU share (in W): gpufleet_pod_gpu_share x GPU power."
POWER_FIELD = "DCGM_FI_DEV_POWER_USAGE"
# dcgm-exporter's `link_status` values for NVML_P2P_STATUS_* (p2pStatusToString).
P2P_STATUS = {
    0: "OK",
    1: "ChipsetNotSupported",
    2: "GPUNotSupported",
    3: "TopologyNotSupported",
    4: "DisabledByRegKey",
    5: "NotSupported",
    6: "Unknown",
}

Labels = tuple[tuple[str, str], ...]


class Sample(NamedTuple):
    """One series: labels in rendering order, and its value. A NamedTuple, not a frozen
    dataclass: thousands are built per collection and tuples build several times faster."""

    labels: Labels
    value: float


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricFamily:
    """One metric: its samples share name, type and help. LABEL families never render."""

    name: str
    type: MetricType
    help: str
    samples: tuple[Sample, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SeriesOptions:
    """How series are named and labelled (dcgm-exporter's compatibility switches)."""

    profile: Profile = Profile.LEGACY
    hostname: str | None = None  # value of the hostname label; None or "" = no label
    hostname_label: HostnameLabel = HostnameLabel.LEGACY
    pod_uid: bool = False  # --kubernetes-enable-pod-uid
    old_namespace: bool = False  # -o: uuid, pod_name, pod_namespace, container_name
    replace_blanks_in_model_name: bool = False  # -rbmn
    virtual_gpus: bool = False  # --kubernetes-virtual-gpus: add `vgpu` where known
    xid_window_ms: int = 300_000  # -x: window of DCGM_EXP_XID_ERRORS_COUNT
    clock_events_window_ms: int = 300_000  # window of DCGM_EXP_CLOCK_EVENTS_COUNT


@dataclass(frozen=True, slots=True, kw_only=True)
class _Row:
    """One series label set (an entity, and a pod or none) and the values it serves."""

    entity: EntitySample
    share: PodShare | None
    gpu_row: bool  # the GPU's own series: where per-GPU things (XIDs) go
    values: Mapping[str, float]  # field -> value this row serves, in legacy units
    base: Labels  # identity, hostname and label-row labels
    label_rows: Labels  # the label-row part of `base`, sorted by key
    attributes: Labels  # pod attributes, sorted by key
    labels: Labels  # base + attributes, built once and shared by every family


def build_families(
    sample: NodeSample, *, selection: Selection, pods: PodView, options: SeriesOptions
) -> tuple[MetricFamily, ...]:
    """Turn one collection into metric families, in selection order.

    Names, values and default help texts follow the profile. A field missing from an
    entity's values (unsupported, lost) gives that entity no series; a family with no
    series at all is left out, as dcgm-exporter does. `DCGM_FI_DEV_XID_ERRORS` is the last
    XID of the GPU (0 if none since start) with dcgm-exporter's `err_code` and `err_msg`,
    and is followed by `gpufleet_xid_errors_total` (per GPU and xid); both only for GPUs
    in `sample.xid`. DCGM_EXP_*_COUNT count `sample`'s histories over the options'
    windows ending at `sample.collected_monotonic`. The pods' GPU shares and power come
    last. Samples are ordered by entity (gpu, GPU instance), then the device series of a
    shared entity, then in the pod view's order.
    """
    names = OLD_LABEL_NAMES if options.old_namespace else LABEL_NAMES
    rows = _rows(sample, selection=selection, pods=pods, options=options, names=names)
    xid_rows = _xid_rows(sample, rows, selection=selection, options=options, names=names)
    families = []
    for selected in selection.metrics:
        if selected.spec.name == XID_FIELD:
            families.append(_xid_family(selected, xid_rows, sample, options.profile))
            families.append(_xid_total_family(xid_rows, sample))
        elif selected.spec.name in _WINDOWED:
            families.append(_windowed_family(selected, xid_rows, sample, options))
        elif selected.spec.name in (HEALTH_FIELD, P2P_FIELD):
            gpu_rows = _gpu_rows(sample, rows, selection=selection, options=options, names=names)
            families.append(_gpu_status_family(selected, gpu_rows, sample))
        else:
            families.append(_field_family(selected, rows, options.profile))
    families.extend(_share_families(rows))
    return tuple(family for family in families if family.samples)


def _rows(
    sample: NodeSample,
    *,
    selection: Selection,
    pods: PodView,
    options: SeriesOptions,
    names: LabelNames,
) -> list[_Row]:
    label_rows = sorted(
        ((f.spec.name, served_name(f.spec, options.profile)) for f in selection.labels),
        key=lambda row: row[1],
    )
    whole_gpu = frozenset(f.spec.name for f in selection.metrics if f.spec.mig is MigSource.PARENT)
    mig_gpus = {s.entity.gpu for s in sample.entities if s.entity.mig is not None}
    rows = []
    for entity_sample in sorted(sample.entities, key=_entity_order):
        entity = entity_sample.entity
        identity, row_labels = _base_labels(entity_sample, sample, label_rows, options, names)
        base = identity + row_labels
        values = entity_sample.values
        if entity.mig is None and entity.gpu in mig_gpus:
            # The instances serve their own fields; the GPU keeps the whole-GPU ones.
            values = {k: v for k, v in values.items() if k in whole_gpu}
        shares = pods.get(entity.key, ())
        common = {"entity": entity_sample, "base": base, "label_rows": row_labels}
        if len({(s.pod.namespace, s.pod.name) for s in shares}) <= 1:
            # One pod (even through several containers) holds the whole entity: the labels
            # of the container `List` gave it last, as dcgm-exporter's map keeps.
            share = shares[-1] if shares else None
            rows.append(_row(share, values, gpu_row=True, options=options, names=names, **common))
            continue
        unclaimed = _unclaimed(values, shares)
        rows.append(_row(None, unclaimed, gpu_row=True, options=options, names=names, **common))
        rows.extend(
            _row(s, s.values, gpu_row=False, options=options, names=names, **common) for s in shares
        )
    return rows


def _row(
    share: PodShare | None,
    values: Mapping[str, float],
    *,
    gpu_row: bool,
    entity: EntitySample,
    base: Labels,
    label_rows: Labels,
    options: SeriesOptions,
    names: LabelNames,
) -> _Row:
    attributes = () if share is None else _pod_attributes(share, options, names)
    return _Row(
        entity=entity,
        share=share,
        gpu_row=gpu_row and entity.entity.mig is None,
        values=values,
        base=base,
        label_rows=label_rows,
        attributes=attributes,
        labels=base + attributes,
    )


def _unclaimed(values: Mapping[str, float], shares: tuple[PodShare, ...]) -> dict[str, float]:
    """The device series of a shared entity: its device-level fields, and of each split
    field what no pod accounts for (the whole value where no pod got one)."""
    rest = dict(values)
    for field in SPLIT_FIELDS:
        claimed = [s.values[field] for s in shares if field in s.values]
        if field in rest and claimed:
            rest[field] = max(0.0, rest[field] - sum(claimed))
    return rest


def _entity_order(entity_sample: EntitySample) -> tuple[int, int]:
    gpu, gi_id = entity_sample.entity.key
    return (gpu, -1 if gi_id is None else gi_id)


def _base_labels(
    entity_sample: EntitySample,
    sample: NodeSample,
    label_rows: list[tuple[str, str]],
    options: SeriesOptions,
    names: LabelNames,
) -> tuple[Labels, Labels]:
    """(identity and hostname labels, label-row labels sorted by key)."""
    entity = entity_sample.entity
    model = entity.model_name
    if options.replace_blanks_in_model_name:
        # dcgm-exporter collapses runs of whitespace, then swaps the blanks for dashes.
        model = "-".join(model.split())
    labels = [
        ("gpu", str(entity.gpu)),
        (names.uuid, entity.uuid),
        ("pci_bus_id", entity.pci_bus_id),
        ("device", f"nvidia{entity.gpu}"),
        ("modelName", model),
    ]
    if entity.mig is not None:
        labels.append(("GPU_I_PROFILE", entity.mig.profile))
        labels.append(("GPU_I_ID", str(entity.mig.gi_id)))
    if options.hostname:
        labels.append((options.hostname_label.value, options.hostname))
    rows = []
    for field, key in label_rows:
        value = entity_sample.labels.get(field)
        if value is None:
            value = sample.node_labels.get(field)
        if value is not None:  # an unreadable label is left out, like a blank DCGM value
            rows.append((key, value))
    return tuple(labels), tuple(rows)


def _pod_attributes(share: PodShare, options: SeriesOptions, names: LabelNames) -> Labels:
    pod = share.pod
    attributes = [
        (names.container, pod.container),
        (names.namespace, pod.namespace),
        (names.pod, pod.name),
    ]
    if options.pod_uid and pod.uid is not None:
        attributes.append(("pod_uid", pod.uid))
    if options.virtual_gpus and share.vgpu is not None:
        attributes.append(("vgpu", share.vgpu))
    attributes += pod.attributes
    attributes.sort()
    return pod.labels + tuple(attributes)


def _field_family(selected: SelectedField, rows: list[_Row], profile: Profile) -> MetricFamily:
    spec = selected.spec
    field = spec.name
    scale = unit_scale(spec, profile)
    samples = []
    for row in rows:
        value = row.values.get(field)
        if value is None:
            continue
        samples.append(Sample(labels=row.labels, value=value * scale if scale != 1.0 else value))
    return MetricFamily(
        name=served_name(spec, profile),
        type=selected.type,
        help=_served_help(selected, profile),
        samples=tuple(samples),
    )


def _share_families(rows: list[_Row]) -> tuple[MetricFamily, MetricFamily]:
    """Each pod's share of its physical GPU, and that share of the GPU's power."""
    power = {
        r.entity.entity.gpu: r.values[POWER_FIELD]
        for r in rows
        if r.gpu_row and POWER_FIELD in r.values
    }
    shares, watts = [], []
    for row in rows:
        if row.share is None or row.share.gpu_share is None:
            continue
        shares.append(Sample(labels=row.labels, value=row.share.gpu_share))
        gpu_power = power.get(row.entity.entity.gpu)
        if gpu_power is not None:
            watts.append(Sample(labels=row.labels, value=row.share.gpu_share * gpu_power))
    return (
        MetricFamily(
            name=GPU_SHARE_NAME, type=MetricType.GAUGE, help=GPU_SHARE_HELP, samples=tuple(shares)
        ),
        MetricFamily(
            name=POD_POWER_NAME, type=MetricType.GAUGE, help=POD_POWER_HELP, samples=tuple(watts)
        ),
    )


def _xid_family(
    selected: SelectedField, rows: list[_Row], sample: NodeSample, profile: Profile
) -> MetricFamily:
    """The last XID per watched GPU, as dcgm-exporter renders it: err_code="0",
    err_msg="No Error" until the first XID, then the code and its text; the value is the
    code itself. A GPU missing from `sample.xid` (not watched) gets no series."""
    samples = []
    for row in _served_gpu_rows(rows):
        state = sample.xid.get(row.entity.entity.gpu)
        if state is None:
            continue
        extra = (("err_code", str(state.last)), ("err_msg", _xid_message(state.last)))
        samples.append(Sample(labels=_with(row, extra), value=state.last))
    return MetricFamily(
        name=served_name(selected.spec, profile),
        type=selected.type,
        help=_served_help(selected, profile),
        samples=tuple(samples),
    )


def _xid_total_family(rows: list[_Row], sample: NodeSample) -> MetricFamily:
    """XID events per GPU and xid, on the GPU's series."""
    samples = []
    for row in _served_gpu_rows(rows):
        state = sample.xid.get(row.entity.entity.gpu)
        if state is None:
            continue
        for xid, count in sorted(state.counts.items()):
            samples.append(Sample(labels=_with(row, (("xid", str(xid)),)), value=count))
    return MetricFamily(
        name=XID_TOTAL_NAME,
        type=MetricType.COUNTER,
        help=XID_TOTAL_HELP,
        samples=tuple(samples),
    )


def _windowed_family(
    selected: SelectedField, rows: list[_Row], sample: NodeSample, options: SeriesOptions
) -> MetricFamily:
    """A DCGM_EXP_*_COUNT family: on each GPU's own row (never a MIG instance's or a
    sharing pod's), one series per xid or clock event reason counted in the window, or
    dcgm-exporter's one 0 without that label while the window is empty."""
    if selected.spec.name == XID_COUNT_FIELD:
        window_ms, key = options.xid_window_ms, "xid"
        histories = {gpu: state.recent for gpu, state in sample.xid.items()}
        count = count_xids
    else:
        window_ms, key = options.clock_events_window_ms, "clock_event"
        histories = sample.clock_events
        count = count_clock_events
    counts = {
        gpu: count(history, now=sample.collected_monotonic, window_ms=window_ms)
        for gpu, history in histories.items()
    }
    window = ("window_size_in_ms", str(window_ms))
    samples = []
    for row in _served_gpu_rows(rows):
        gpu_counts = counts.get(row.entity.entity.gpu)
        if gpu_counts is None:
            continue
        identity = row.base[: len(row.base) - len(row.label_rows)]
        if not gpu_counts:  # dcgm-exporter's zero: no xid / clock_event label at all
            labels = tuple(sorted((*row.label_rows, window)))
            samples.append(Sample(labels=identity + labels + row.attributes, value=0))
        for value, n in gpu_counts.items():
            labels = tuple(sorted((*row.label_rows, window, (key, str(value)))))
            samples.append(Sample(labels=identity + labels + row.attributes, value=n))
    return MetricFamily(
        name=selected.spec.name,
        type=selected.type,
        help=selected.help,
        samples=tuple(samples),
    )


def _xid_rows(
    sample: NodeSample,
    rows: list[_Row],
    *,
    selection: Selection,
    options: SeriesOptions,
    names: LabelNames,
) -> list[_Row]:
    """The rows XIDs and clock events go on: each GPU's own, those read this round and
    those lost (`sample.lost`: a GPU fallen off the bus keeps its XID series, XID 79)."""
    if not sample.lost:
        return rows
    alone = NodeSample(entities=sample.lost, node_labels=sample.node_labels)
    lost = _rows(alone, selection=selection, pods={}, options=options, names=names)
    return sorted(rows + lost, key=lambda r: r.entity.entity.gpu)


def _served_gpu_rows(rows: list[_Row]) -> list[_Row]:
    """XIDs and clock events are per GPU: one series each, on the GPU's own row."""
    return [r for r in rows if r.gpu_row]


def _gpu_rows(
    sample: NodeSample,
    rows: list[_Row],
    *,
    selection: Selection,
    options: SeriesOptions,
    names: LabelNames,
) -> list[_Row]:
    """Rows of every physical GPU in `sample.gpus`: its whole-GPU rows where -d serves it
    (with their pods), else one row of its own labels, as dcgm-exporter's per-GPU collectors
    label a GPU whatever -d selects."""
    served: dict[int, list[_Row]] = {}
    for row in _served_gpu_rows(rows):
        served.setdefault(row.entity.entity.gpu, []).append(row)
    gpu_rows = []
    for gpu, entity_sample in sorted(sample.gpus.items()):
        alone = NodeSample(entities=(entity_sample,), node_labels=sample.node_labels)
        gpu_rows += served.get(gpu) or _rows(
            alone, selection=selection, pods={}, options=options, names=names
        )
    return gpu_rows


def _gpu_status_family(
    selected: SelectedField, rows: list[_Row], sample: NodeSample
) -> MetricFamily:
    """DCGM_EXP_GPU_HEALTH_STATUS (one series per health watch: `health_watch`,
    `health_error_code`, value PASS 0 / WARN 10 / FAIL 20) or DCGM_EXP_P2P_STATUS (one per
    peer: `peer_gpu`, `link_status`, value NVML_P2P_STATUS_*), per GPU. dcgm-exporter keeps
    these labels with the label-row labels, sorted by key."""
    health = selected.spec.name == HEALTH_FIELD
    samples = []
    for row in rows:
        gpu = row.entity.entity.gpu
        if health:
            found = [
                ((("health_error_code", i.code), ("health_watch", w)), int(i.result))
                for w, i in sample.health.get(gpu, {}).items()
            ]
        else:
            found = [
                ((("link_status", P2P_STATUS.get(v, "Unknown")), ("peer_gpu", str(peer))), v)
                for peer, v in sorted(sample.p2p.get(gpu, {}).items())
            ]
        identity = row.base[: len(row.base) - len(row.label_rows)]
        for extra, value in found:
            labels = tuple(sorted((*row.label_rows, *extra)))
            samples.append(Sample(labels=identity + labels + row.attributes, value=value))
    return MetricFamily(
        name=selected.spec.name, type=selected.type, help=selected.help, samples=tuple(samples)
    )


def _served_help(selected: SelectedField, profile: Profile) -> str:
    """The CSV row's help; under the 4.9 profile, a help left at the legacy default text
    names the old unit, so it is replaced by the field's 4.9 text."""
    spec = selected.spec
    if profile is Profile.V49 and spec.name_v49 and spec.help_v49 and selected.help == spec.help:
        return spec.help_v49
    return selected.help


def _with(row: _Row, extra: Labels) -> Labels:
    """The row's labels with more attributes merged in key order (dcgm's attribute map)."""
    return row.base + tuple(sorted(row.attributes + extra))


def _xid_message(code: int) -> str:
    message = XID_MESSAGES.get(code)
    if message is not None:
        return message
    return XID_NONE_MESSAGE if code == 0 else XID_UNKNOWN_MESSAGE
