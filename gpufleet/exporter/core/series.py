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

Unlike dcgm-exporter, an entity held by several pods (time-slicing, MPS) yields one series
per pod (not one arbitrary pod), each with that pod's own value where NVML can split it.
For the fields it splits (`SPLIT_FIELDS`: GPU_UTIL, FB_USED) such an entity also keeps its
device-level series without pod labels, as dcgm-exporter does since its #594, so the
device total stays visible (FB_FREE + FB_USED adds up to the device's memory). Entities no
pod holds carry no pod labels at all (dcgm-exporter 4.x), not empty strings.

XID series exist only for GPUs the XID watcher watches (`NodeSample.xid`): where event
registration failed, no XID is known and none is claimed, not even "No Error".

dcgm-exporter's own windowed counts (`windows.py`) add `window_size_in_ms` and `xid` or
`clock_event` among the label-row labels (dcgm keeps them in the same map), sorted by key.
They have series only for xids / reasons counted at least once in the window, and only for
GPUs with a history (XIDs: watched GPUs; clock events: GPUs whose reasons NVML reported).

Pure: no I/O, no clock, no logging. Escaping is the renderer's job; values here are raw.
"""

from dataclasses import dataclass
from typing import NamedTuple

from gpufleet.exporter.core.counters import SelectedField, Selection
from gpufleet.exporter.core.fields import (
    CLOCK_EVENTS_COUNT_FIELD,
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
    hostname: str | None = None  # value of the hostname label; None or "" = no label (-n)
    hostname_label: HostnameLabel = HostnameLabel.LEGACY
    pod_uid: bool = False  # --kubernetes-enable-pod-uid
    old_namespace: bool = False  # -o: uuid, pod_name, pod_namespace, container_name
    replace_blanks_in_model_name: bool = False  # -rbmn
    virtual_gpus: bool = False  # --kubernetes-virtual-gpus: add `vgpu` where known
    xid_window_ms: int = 300_000  # -x: window of DCGM_EXP_XID_ERRORS_COUNT
    clock_events_window_ms: int = 300_000  # window of DCGM_EXP_CLOCK_EVENTS_COUNT


@dataclass(frozen=True, slots=True, kw_only=True)
class _Row:
    """One (entity, pod or none) pair: the label set every family repeats for it."""

    entity: EntitySample
    share: PodShare | None
    split_only: bool  # the device row of a shared entity: only SPLIT_FIELDS use it
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
    XID of the entity's GPU (0 if none since start) with dcgm-exporter's `err_code` and
    `err_msg`, and is followed by `gpufleet_xid_errors_total` (per GPU and xid); both only
    for GPUs in `sample.xid`. DCGM_EXP_*_COUNT count `sample`'s histories over the
    options' windows ending at `sample.collected_monotonic`. Samples are ordered by entity
    (gpu, GPU instance), then the device row of a shared entity (SPLIT_FIELDS only), then in
    the pod view's order.
    """
    names = OLD_LABEL_NAMES if options.old_namespace else LABEL_NAMES
    rows = _rows(sample, selection=selection, pods=pods, options=options, names=names)
    families = []
    for selected in selection.metrics:
        if selected.spec.name == XID_FIELD:
            families.append(_xid_family(selected, rows, sample, options.profile))
            families.append(_xid_total_family(selected, rows, sample))
        elif selected.spec.name in _WINDOWED:
            families.append(_windowed_family(selected, rows, sample, options))
        else:
            families.append(_field_family(selected, rows, options.profile))
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
    rows = []
    for entity_sample in sorted(sample.entities, key=_entity_order):
        identity, row_labels = _base_labels(entity_sample, sample, label_rows, options, names)
        base = identity + row_labels
        shares = pods.get(entity_sample.entity.key, ())
        shared = len({(s.pod.namespace, s.pod.name) for s in shares}) > 1
        if not shares or shared:
            rows.append(
                _Row(
                    entity=entity_sample,
                    share=None,
                    split_only=shared,
                    base=base,
                    label_rows=row_labels,
                    attributes=(),
                    labels=base,
                )
            )
        for share in shares:
            attributes = _pod_attributes(share, options, names)
            rows.append(
                _Row(
                    entity=entity_sample,
                    share=share,
                    split_only=False,
                    base=base,
                    label_rows=row_labels,
                    attributes=attributes,
                    labels=base + attributes,
                )
            )
    return rows


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
    split = field in SPLIT_FIELDS
    for row in rows:
        if row.split_only and not split:
            continue
        value = None
        if row.share is not None:
            value = row.share.values.get(field)  # this pod's share, where NVML splits it
        if value is None:
            value = row.entity.values.get(field)
        if value is None:
            continue
        samples.append(Sample(labels=row.labels, value=value * scale if scale != 1.0 else value))
    return MetricFamily(
        name=served_name(spec, profile),
        type=selected.type,
        help=_served_help(selected, profile),
        samples=tuple(samples),
    )


def _xid_family(
    selected: SelectedField, rows: list[_Row], sample: NodeSample, profile: Profile
) -> MetricFamily:
    """The last XID per watched GPU, as dcgm-exporter renders it: err_code="0",
    err_msg="No Error" until the first XID, then the code and its text; the value is the
    code itself. A GPU missing from `sample.xid` (not watched) gets no series."""
    samples = []
    for row in _xid_rows(selected, rows):
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


def _xid_total_family(
    selected: SelectedField, rows: list[_Row], sample: NodeSample
) -> MetricFamily:
    """XID events per GPU and xid. Like the last-XID gauge, every entity of a GPU (each MIG
    instance, each pod) repeats its GPU's counts, so aggregate with max by (UUID, xid)."""
    samples = []
    for row in _xid_rows(selected, rows):
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
    """A DCGM_EXP_*_COUNT family: per GPU (repeated on its MIG instances and pods, like
    the XID gauge), one series per xid or clock event reason counted in the window."""
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
    for row in _xid_rows(selected, rows):
        identity = row.base[: len(row.base) - len(row.label_rows)]
        for value, n in counts.get(row.entity.entity.gpu, {}).items():
            labels = tuple(sorted((*row.label_rows, window, (key, str(value)))))
            samples.append(Sample(labels=identity + labels + row.attributes, value=n))
    return MetricFamily(
        name=selected.spec.name,
        type=selected.type,
        help=selected.help,
        samples=tuple(samples),
    )


def _xid_rows(selected: SelectedField, rows: list[_Row]) -> list[_Row]:
    """XIDs are per GPU; MIG instances carry their GPU's unless the field says NONE."""
    mig = selected.spec.mig is not MigSource.NONE
    return [r for r in rows if not r.split_only and (mig or r.entity.entity.mig is None)]


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
