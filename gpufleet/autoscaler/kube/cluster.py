"""What the controller reads from and writes to the cluster, over the official client."""

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.autoscaler.core.buffers import (
    BUFFER_GROUP,
    BUFFER_KIND,
    BUFFER_PLURAL,
    BUFFER_VERSION,
)
from gpufleet.autoscaler.core.kueue import QueuedPodSet, queued_pod_sets
from gpufleet.autoscaler.core.nodepools import POOL_LABEL, pod_gpus, pool_node
from gpufleet.autoscaler.core.placeholders import OWNER_LABEL, placeholder_owner
from gpufleet.autoscaler.core.replicas import DELETION_COST, PodState
from gpufleet.autoscaler.core.spec import GROUP, PLURAL, VERSION, TargetRef
from gpufleet.core.numbers import ascii_int
from gpufleet.core.selectors import selector_string
from gpufleet.core.watch_state import Skipped
from gpufleet.kube.custom_objects import cluster_custom_objects
from gpufleet.kube.errors import KubeError, KubeErrorKind, kube_call
from gpufleet.kube.reflector import Reflector, stop_all
from gpufleet.logs import OutageLog, ThrottledLog

log = logging.getLogger(__name__)
T = TypeVar("T")
MERGE_PATCH = "application/merge-patch+json"
KEDA = ("keda.sh", "v1alpha1", "scaledobjects")
NODEPOOLS = ("karpenter.sh", "v1", "nodepools")
KUEUE_WORKLOADS = ("kueue.x-k8s.io", "v1beta2", "workloads")
KUEUE_FLAVORS = ("kueue.x-k8s.io", "v1beta2", "resourceflavors")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleView:
    replicas: int  # spec.replicas: what was asked for
    selector: str  # status.selector: which pods are the target's
    resource_version: str


def _seconds(value: str | None) -> float | None:
    """An RFC 3339 timestamp from a raw list answer -> unix seconds."""
    if value is None:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterView:
    """One tick's reads, a list call each, whatever the number of workloads."""

    autoscalers: list[dict[str, Any]]
    pods: list[PodState]
    # (namespace, kind, name) -> scale, for Deployments and StatefulSets (read from their
    # objects: the same replicas and selector their scale subresource shows)
    scales: dict[tuple[str, str, str], ScaleView]
    # (namespace, kind, name) -> "HorizontalPodAutoscaler/x" or "ScaledObject/y"
    competitors: dict[tuple[str, str, str], str]
    # (namespace, kind, name) -> the pod template's spec, for Deployments and StatefulSets:
    # what one replica asks for, which its placeholders copy
    templates: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    # (namespace, GPUAutoscaler) -> spec.replicas of the placeholder Deployment it made
    placeholders: dict[tuple[str, str], int] = field(default_factory=dict)
    # (namespace, GPUAutoscaler) -> spec.replicas of the CapacityBuffer it made; None where
    # the CRD is not installed (then headroom is held as placeholder pods)
    buffers: dict[tuple[str, str], int] | None = None
    # Karpenter's NodePools; None where Karpenter is not installed
    nodepools: list[dict[str, Any]] | None = None
    # the nodes labelled karpenter.sh/nodepool, read only when there are NodePools
    pool_nodes: list[dict[str, Any]] = field(default_factory=list)
    # Kueue's Workloads (each one's pod sets still to come) and ResourceFlavors, read only
    # when there are NodePools to plan on
    kueue_workloads: list[tuple[QueuedPodSet, ...]] = field(default_factory=list)
    kueue_flavors: list[dict[str, Any]] = field(default_factory=list)


APPS_KINDS = ("Deployment", "StatefulSet")
# A kind discovery did not find is looked for again after this long, not at every tick of
# each workload naming it: a CRD installed later is found within a minute.
DISCOVERY_RETRY_SECONDS = 60.0
# With watches, a tick refuses the collections once their watch has been down this long:
# a minute-old view would scale on pods long gone. The lists failed at once, before them.
STALE_AFTER_SECONDS = 60.0
# Each watch asks to be ended after 1x to 2x this (client-go asks 5 to 10 minutes): one a
# proxy holds open and silent counts as down once that has passed, not minutes later.
WATCH_SECONDS = 60


@dataclass(frozen=True, slots=True)
class _App:
    """What a tick needs of a Deployment or a StatefulSet."""

    key: tuple[str, str, str]  # (namespace, kind, name)
    scale: ScaleView
    template: dict[str, Any]  # the pod template's spec: what one replica asks for
    placeholder_of: str | None  # the GPUAutoscaler whose placeholders these are


class Cluster:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        clock: Callable[[], float] = time.monotonic,
        watch: bool = False,
    ) -> None:
        """`watch`: keep the collections a tick reads by list then watch, and read them
        from there; else list each of them at every tick."""
        self._core = client.CoreV1Api(api)
        self._apps = client.AppsV1Api(api)
        self._custom = client.CustomObjectsApi(api)
        self._autoscaling = client.AutoscalingV2Api(api)
        self._resources = client.ApisApi(api)
        self._api = api
        self._plurals: dict[tuple[str, str], str] = {}
        # (group/version, kind) discovery did not find -> (when, what it said)
        self._unfound: dict[tuple[str, str], tuple[float, KubeError]] = {}
        self._clock = clock
        self._watch = watch
        self._failures: Counter[str] = Counter()  # watch failures by kube_<kind>, not taken
        self._failures_lock = threading.Lock()
        reflect = partial(_reflector, clock=clock, failed=self._count_failure)
        # a custom resource whose CRD may not be installed: its 404 is no failure
        installed = partial(reflect, optional=True)

        custom_list = partial(cluster_custom_objects, api)  # streams, as the typed APIs
        self._autoscalers: Reflector[dict[str, Any]] = reflect(
            "gpuautoscalers", custom_list(GROUP, VERSION, PLURAL), _plain
        )
        self._pods = reflect("pods", self._core.list_pod_for_all_namespaces, _pod_state)
        self._deployments = reflect(
            "deployments", self._apps.list_deployment_for_all_namespaces, _app("Deployment")
        )
        self._statefulsets = reflect(
            "statefulsets", self._apps.list_stateful_set_for_all_namespaces, _app("StatefulSet")
        )
        self._hpas = reflect(
            "horizontalpodautoscalers",
            self._autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces,
            _hpa_target,
        )
        self._scaledobjects = installed("scaledobjects", custom_list(*KEDA), _scaled_object)
        self._buffer_objects = installed(
            "capacitybuffers",
            custom_list(BUFFER_GROUP, BUFFER_VERSION, BUFFER_PLURAL),
            _buffer_replicas,
        )
        self._nodepools = installed("nodepools", custom_list(*NODEPOOLS), _plain)
        self._kueue_workloads = installed(
            "workloads", custom_list(*KUEUE_WORKLOADS), queued_pod_sets
        )
        self._kueue_flavors = installed("resourceflavors", custom_list(*KUEUE_FLAVORS), _plain)
        self._pool_nodes = reflect(
            "nodes",
            lambda **kw: self._core.list_node(label_selector=POOL_LABEL, **kw),
            pool_node,
        )
        self._every_tick = (
            self._autoscalers,
            self._pods,
            self._deployments,
            self._statefulsets,
            self._hpas,
            self._scaledobjects,
            self._buffer_objects,
            self._nodepools,
        )
        # and, where there are NodePools, started at their first read
        self._reflectors = (
            *self._every_tick,
            self._kueue_workloads,
            self._kueue_flavors,
            self._pool_nodes,
        )
        self._started = False

    def take_watch_failures(self) -> Counter[str]:
        """The watches' failures by kind (`kube_<kind>`) since the last call: they retry on
        their own, so no tick fails for them, and the self-metrics count them."""
        with self._failures_lock:
            taken, self._failures = self._failures, Counter()
        return taken

    def _count_failure(self, err: KubeError) -> None:
        with self._failures_lock:
            self._failures[f"kube_{err.kind}"] += 1

    def close(self, timeout_seconds: float = 10.0) -> None:
        """End the watches (a Cluster that lists has none), waiting at most
        `timeout_seconds` in all for their threads."""
        if self._started:
            stop_all(self._reflectors, timeout_seconds)

    def _read(self, reflector: "Reflector[Any]") -> tuple[Any, ...]:
        if not self._watch:
            return reflector.read()
        if not self._started:  # at the first view: a daemon that fails to start watches none
            self._started = True
            for each in self._every_tick:  # together: their first lists overlap
                each.start()
        reflector.start()
        return reflector.items(stale_after=STALE_AFTER_SECONDS)

    def _installed(self, reflector: "Reflector[T]") -> tuple[T, ...] | None:
        """A custom resource's objects; None where its CRD is not installed (404)."""
        try:
            return self._read(reflector)
        except KubeError as err:
            if err.kind is KubeErrorKind.NOT_FOUND:
                return None
            raise

    # --- reads ---

    def view(self) -> ClusterView:
        """Everything a tick reads, from the watches (or a list each): GPUAutoscalers, pods,
        Deployments, StatefulSets, HPAs, ScaledObjects, CapacityBuffers and NodePools;
        where Karpenter's NodePool CRD is installed also Kueue's Workloads, their
        ResourceFlavors where any Workload exists, and the pools' nodes where any NodePool
        exists. A CRD that is not installed answers 404, and counts as none."""
        scales: dict[tuple[str, str, str], ScaleView] = {}
        templates: dict[tuple[str, str, str], dict[str, Any]] = {}
        placeholders: dict[tuple[str, str], int] = {}
        for reflector in (self._deployments, self._statefulsets):
            for app in self._read(reflector):
                scales[app.key] = app.scale
                templates[app.key] = app.template
                if app.placeholder_of is not None:
                    placeholders[(app.key[0], app.placeholder_of)] = app.scale.replicas
        return ClusterView(
            autoscalers=list(self._read(self._autoscalers)),
            pods=list(self._read(self._pods)),
            scales=scales,
            competitors=self._competitors(),
            templates=templates,
            placeholders=placeholders,
            buffers=self._buffers(),
            **self._node_plan_inputs(),
        )

    def _node_plan_inputs(self) -> dict[str, Any]:
        nodepools = self._installed(self._nodepools)
        if nodepools is None:
            return {}
        nodes = self._read(self._pool_nodes) if nodepools else ()
        workloads = self._installed(self._kueue_workloads) or ()
        flavors = (self._installed(self._kueue_flavors) or ()) if workloads else ()
        return {
            "nodepools": list(nodepools),
            "pool_nodes": list(nodes),
            "kueue_workloads": list(workloads),
            "kueue_flavors": list(flavors),
        }

    def _buffers(self) -> dict[tuple[str, str], int] | None:
        buffers = self._installed(self._buffer_objects)
        return None if buffers is None else dict(b for b in buffers if b is not None)

    def _competitors(self) -> dict[tuple[str, str, str], str]:
        out: dict[tuple[str, str, str], str] = {}
        for key, name in self._read(self._hpas):
            out.setdefault(key, f"HorizontalPodAutoscaler/{name}")
        for key, name in self._installed(self._scaledobjects) or ():
            out.setdefault(key, f"ScaledObject/{name}")
        return out

    def read_scale(self, namespace: str, target: TargetRef) -> ScaleView:
        scale = kube_call(lambda: self._scale_api(target, "read")(target.name, namespace))
        return _scale_view(scale)

    # --- writes ---

    def write_scale(
        self,
        namespace: str,
        target: TargetRef,
        replicas: int,
        *,
        decided_from: int | None = None,
        attempts: int = 3,
    ) -> bool:
        """Set spec.replicas through the scale subresource: a read, then a PATCH that
        carries its resourceVersion; a 409 (someone wrote in between) reads again. False,
        and nothing written, where it is `replicas` already, or where it is not
        `decided_from`, the count the decision was made from: a view that trailed a write
        (this autoscaler's own, seen late through a watch, or anyone's) decides again at the
        next tick, on the count there is."""
        for attempt in range(attempts):
            current = self.read_scale(namespace, target)
            if current.replicas == replicas:
                return False
            if decided_from is not None and current.replicas != decided_from:
                return False
            # A merge patch that carries the resourceVersion it read: the API server refuses
            # it with a 409 if anyone wrote since.
            patch = {
                "metadata": {"resourceVersion": current.resource_version},
                "spec": {"replicas": replicas},
            }
            try:
                kube_call(
                    lambda b=patch: self._scale_api(target, "patch")(target.name, namespace, b)
                )
            except KubeError as err:
                if err.kind is KubeErrorKind.CONFLICT and attempt + 1 < attempts:
                    continue
                raise
            return True
        raise AssertionError("unreachable")

    def write_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge `status` in. The answer (the whole object) is read but not parsed: a
        thousand workloads' status refreshes spent as much CPU parsing them as writing."""
        response = kube_call(
            lambda: self._custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                {"status": status},
                _content_type=MERGE_PATCH,
                _preload_content=False,
            )
        )
        response.read()  # to its end, so the connection can serve the next request
        response.release_conn()

    def ensure_priority_class(self, body: dict[str, Any]) -> None:
        """Create the PriorityClass unless it exists (a chart may have made it)."""
        scheduling = client.SchedulingV1Api(self._api)
        try:
            kube_call(lambda: scheduling.read_priority_class(body["metadata"]["name"]))
        except KubeError as err:
            if err.kind is not KubeErrorKind.NOT_FOUND:
                raise
            try:
                kube_call(lambda: scheduling.create_priority_class(body))
            except KubeError as created:
                if created.kind is not KubeErrorKind.CONFLICT:  # made meanwhile: fine
                    raise

    def write_placeholders(self, body: dict[str, Any], *, exists: bool) -> None:
        """Create the placeholder Deployment, or merge its replicas and template in."""
        meta = body["metadata"]
        if exists:
            kube_call(
                lambda: self._apps.patch_namespaced_deployment(
                    meta["name"],
                    meta["namespace"],
                    {"spec": body["spec"]},
                    _content_type=MERGE_PATCH,
                )
            )
            return
        _create_own(
            body,
            create=lambda: self._apps.create_namespaced_deployment(meta["namespace"], body),
            read=partial(self._apps.read_namespaced_deployment, meta["name"], meta["namespace"]),
            merge=lambda: self.write_placeholders(body, exists=True),
        )

    def write_buffer(
        self, template: dict[str, Any], buffer: dict[str, Any], *, exists: bool
    ) -> None:
        """Create or update a CapacityBuffer and the PodTemplate it names (first, so the
        buffer never names a template that is not there)."""
        meta = template["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        _create_own(
            template,
            create=lambda: self._core.create_namespaced_pod_template(namespace, template),
            read=partial(self._core.read_namespaced_pod_template, name, namespace),
            merge=lambda: kube_call(
                lambda: self._core.patch_namespaced_pod_template(
                    name, namespace, {"template": template["template"]}, _content_type=MERGE_PATCH
                )
            ),
        )
        merge = partial(self._patch_buffer_spec, namespace, name, buffer["spec"])
        if exists:
            merge()
            return
        args = (BUFFER_GROUP, BUFFER_VERSION, namespace, BUFFER_PLURAL)
        _create_own(
            buffer,
            create=lambda: self._custom.create_namespaced_custom_object(*args, buffer),
            read=partial(self._custom.get_namespaced_custom_object, *args, name),
            merge=merge,
        )

    def release_buffer(self, namespace: str, name: str) -> None:
        """Set a CapacityBuffer's replicas to 0, leaving the rest of it as it is."""
        self._patch_buffer_spec(namespace, name, {"replicas": 0})

    def _patch_buffer_spec(self, namespace: str, name: str, spec: dict[str, Any]) -> None:
        """Merge `spec` into a CapacityBuffer's."""
        kube_call(
            lambda: self._custom.patch_namespaced_custom_object(
                BUFFER_GROUP,
                BUFFER_VERSION,
                namespace,
                BUFFER_PLURAL,
                name,
                {"spec": spec},
                _content_type=MERGE_PATCH,
            )
        )

    def set_deletion_cost(self, namespace: str, pod: str, cost: int) -> None:
        patch = {"metadata": {"annotations": {DELETION_COST: str(cost)}}}
        kube_call(
            lambda: self._core.patch_namespaced_pod(
                pod, namespace, patch, _content_type=MERGE_PATCH
            )
        )

    # --- the scale subresource of any kind ---

    def _scale_api(self, target: TargetRef, verb: str) -> Any:
        """The client call for `verb` (read, patch) on `target`'s scale subresource."""
        group, _, version = target.api_version.rpartition("/")
        typed = {
            ("apps", "Deployment"): (self._apps, "deployment"),
            ("apps", "StatefulSet"): (self._apps, "stateful_set"),
            ("", "ReplicationController"): (self._core, "replication_controller"),
        }.get((group, target.kind))
        if typed is not None:
            api, kind = typed
            call = getattr(api, f"{verb}_namespaced_{kind}_scale")
            if verb == "read":
                return call
            return lambda name, ns, body: call(name, ns, body, _content_type=MERGE_PATCH)
        plural = self._plural(group, version, target.kind)
        call = getattr(
            self._custom, f"{'get' if verb == 'read' else verb}_namespaced_custom_object_scale"
        )
        if verb == "read":
            return lambda name, ns: call(group, version, ns, plural, name)
        return lambda name, ns, body: call(
            group, version, ns, plural, name, body, _content_type=MERGE_PATCH
        )

    def _plural(self, group: str, version: str, kind: str) -> str:
        """`kind`'s resource name in group/version, from discovery (cached; a kind or a
        group/version not found is asked for again only after DISCOVERY_RETRY_SECONDS, an
        API error at the next call)."""
        key = (f"{group}/{version}", kind)
        if key in self._plurals:
            return self._plurals[key]
        now = self._clock()
        unfound = self._unfound.get(key)
        if unfound is not None and now - unfound[0] < DISCOVERY_RETRY_SECONDS:
            raise unfound[1]
        try:
            self._discover(key[0], f"/apis/{group}/{version}" if group else f"/api/{version}")
            if key not in self._plurals:
                raise KubeError(
                    KubeErrorKind.NOT_FOUND,
                    f"no resource of kind {kind} with a scale subresource in {key[0]}",
                )
        except KubeError as err:
            if err.kind is KubeErrorKind.NOT_FOUND:
                self._unfound[key] = (now, err)
            raise
        self._unfound.pop(key, None)
        return self._plurals[key]

    def _discover(self, group_version: str, path: str) -> None:
        """Cache the resource name of every kind with a scale subresource at `path` (none
        where the API serves no such group/version). `call_api` raises on no status: a 503
        read as an empty list said the target's kind was gone, and its headroom went."""

        def get() -> tuple[int, bytes]:
            answer = self._api.call_api(
                *self._api.param_serialize(method="GET", resource_path=path)
            )
            if answer.status >= 400 and answer.status != 404:
                raise ApiException(status=answer.status, reason=answer.reason)
            return answer.status, answer.read()

        status, body = kube_call(get)
        if status == 404:
            return
        resources = json.loads(body).get("resources", [])
        names = {resource["name"] for resource in resources}
        for resource in resources:
            if f"{resource['name']}/scale" in names:
                self._plurals[(group_version, resource["kind"])] = resource["name"]


def _field(obj: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """`obj[name]` where it is an object, else an empty one."""
    value = obj.get(name)
    return value if isinstance(value, Mapping) else {}


def _cost(text: Any) -> int | None:
    """A pod-deletion-cost annotation as the API takes it (an int32), else None: "²" is a
    digit to isdigit() and not to int()."""
    if not isinstance(text, str):
        return None
    cost = ascii_int(text.removeprefix("-"), max_digits=10)
    return None if cost is None else -cost if text.startswith("-") else cost


def _create_own(
    body: dict[str, Any],
    *,
    create: Callable[[], Any],
    read: Callable[..., Any],
    merge: Callable[[], Any],
) -> None:
    """Create an object holding a GPUAutoscaler's headroom. One of its name that exists
    already is read: made since the view was taken (a watch trails the API by its
    latency), it is gpufleet's by its label and owner, and `merge`d as if the view had
    shown it; anyone else's is left as it is, and the 409 says so."""
    try:
        kube_call(create)
    except KubeError as err:
        if err.kind is not KubeErrorKind.CONFLICT:
            raise
        kind = body["kind"]
        found = kube_call(lambda: read(_preload_content=False))
        owner = placeholder_owner(json.loads(found.data).get("metadata") or {}, kind=kind)
        if owner is None or owner != placeholder_owner(body["metadata"], kind=kind):
            raise _foreign(body) from None
        merge()


def _foreign(body: dict[str, Any]) -> KubeError:
    meta = body["metadata"]
    owner = meta["labels"][OWNER_LABEL]
    return KubeError(
        KubeErrorKind.CONFLICT,
        f"409: {body['kind']} {meta['namespace']}/{meta['name']} exists and gpufleet did not "
        f"make it (no label {OWNER_LABEL}={owner}): left as it is; rename it to keep headroom",
        status=409,
    )


def _scale_view(scale: Any) -> ScaleView:
    if isinstance(scale, dict):
        return ScaleView(
            replicas=int((scale.get("spec") or {}).get("replicas") or 0),
            selector=(scale.get("status") or {}).get("selector") or "",
            resource_version=(scale.get("metadata") or {}).get("resourceVersion") or "",
        )
    return ScaleView(
        replicas=scale.spec.replicas or 0,
        selector=scale.status.selector or "",
        resource_version=scale.metadata.resource_version or "",
    )


def _reflector(
    what: str,
    call: Callable[..., Any],
    reduce: Callable[[dict[str, Any]], T],
    *,
    clock: Callable[[], float],
    failed: Callable[[KubeError], None],
    optional: bool = False,
) -> Reflector[T]:
    """A collection's reflector, its failures given to `failed` and logged as an outage (a
    line when it starts and ends), the objects it leaves out at most a line per 10 s.
    `optional`: a custom resource whose CRD may not be installed: a 404 is an answer, and
    a CRD installed later is found within ABSENT_RETRY_SECONDS."""
    outage = OutageLog(log, f"cannot list and watch {what}")
    skipped = ThrottledLog(log, clock=clock)

    def skip(s: Skipped) -> None:
        skipped.log(logging.WARNING, "%s: %s/%s left out: %s", what, *s.key, s.reason)

    def failure(err: KubeError) -> None:
        failed(err)
        outage.failed(str(err), kind=str(err.kind))

    return Reflector(
        what,
        call,
        reduce,
        on_failure=failure,
        on_working=outage.recovered,
        on_skip=skip,
        watch_seconds=WATCH_SECONDS,
        absent_ok=optional,
        clock=clock,
    )


def _plain(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


def _app(kind: str) -> Callable[[dict[str, Any]], _App]:
    def reduce(obj: dict[str, Any]) -> _App:
        meta = obj["metadata"]
        return _App(
            key=(meta.get("namespace", ""), kind, meta["name"]),
            scale=_object_scale(obj),
            template=((obj.get("spec") or {}).get("template") or {}).get("spec") or {},
            placeholder_of=placeholder_owner(meta, kind=kind) if kind == "Deployment" else None,
        )

    return reduce


def _scaled_object(so: dict[str, Any]) -> tuple[tuple[str, str, str], str]:
    """A ScaledObject's target as (namespace, kind, name), and its own name. A CRD's
    object: its schema may be looser than its controller assumes."""
    ref = _field(_field(so, "spec"), "scaleTargetRef")
    meta = so["metadata"]
    return (meta.get("namespace", ""), ref.get("kind", "Deployment"), ref.get("name", "")), meta[
        "name"
    ]


def _buffer_replicas(buffer: dict[str, Any]) -> tuple[tuple[str, str], int] | None:
    """A CapacityBuffer gpufleet made: ((namespace, GPUAutoscaler), spec.replicas); None
    for anyone else's."""
    meta = buffer["metadata"]
    owner = placeholder_owner(meta, kind=BUFFER_KIND)
    if owner is None:
        return None
    return (meta.get("namespace", ""), owner), int(_field(buffer, "spec").get("replicas") or 0)


def _hpa_target(hpa: dict[str, Any]) -> tuple[tuple[str, str, str], str]:
    """An HPA's target as (namespace, kind, name), and its own name."""
    ref = _field(_field(hpa, "spec"), "scaleTargetRef")
    meta = hpa["metadata"]
    return (meta.get("namespace", ""), ref.get("kind", ""), ref.get("name", "")), meta["name"]


def _object_scale(obj: dict[str, Any]) -> ScaleView:
    """A Deployment's or StatefulSet's scale, as its scale subresource would show it."""
    spec = obj.get("spec") or {}
    selector = spec.get("selector") or {}
    replicas = spec.get("replicas")
    return ScaleView(
        replicas=replicas if replicas is not None else 1,
        selector=selector_string(
            selector.get("matchLabels") or {}, selector.get("matchExpressions") or ()
        ),
        resource_version=obj["metadata"].get("resourceVersion") or "",
    )


def _pod_state(pod: dict[str, Any]) -> PodState:
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    ready_since = scheduled_since = None
    created = _seconds(meta.get("creationTimestamp"))
    for condition in status.get("conditions") or ():
        if condition.get("status") != "True":
            continue
        since = _seconds(condition.get("lastTransitionTime")) or created
        if condition.get("type") == "Ready":
            ready_since = since
        elif condition.get("type") == "PodScheduled":
            scheduled_since = since
    node = spec.get("nodeName") or ""
    if not node:
        scheduled_since = None  # not bound, whatever a condition says
    elif scheduled_since is None:
        scheduled_since = created  # bound by a scheduler that set no condition
    cost = (meta.get("annotations") or {}).get(DELETION_COST)
    return PodState(
        namespace=meta.get("namespace") or "",
        name=meta["name"],
        labels=dict(meta.get("labels") or {}),
        node=node,
        created=created or 0.0,
        ready_since=ready_since,
        scheduled_since=scheduled_since,
        deleting_since=_seconds(meta.get("deletionTimestamp")),
        deletion_cost=_cost(cost),
        gpus=pod_gpus(spec),
        finished=status.get("phase") in ("Succeeded", "Failed"),
    )
