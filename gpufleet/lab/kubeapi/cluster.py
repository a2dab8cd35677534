"""The small controllers that make the fake API server a cluster.

- Deployments: `spec.replicas` becomes Pods (labelled from the template, owned by the
  Deployment), at most BURST_REPLICAS a pass as the ReplicaSet controller's burst; surplus
  pods are deleted lowest `controller.kubernetes.io/pod-deletion-cost`
  first, then newest, as the ReplicaSet controller does; `status.replicas` and
  `readyReplicas` follow. A Deployment named past 242 characters gets no pod, as its
  ReplicaSet's name would be refused.
- A scheduler: pending pods bind highest priority first (spec.priority, else their
  PriorityClass's value), fullest node first; a pod that fits nowhere preempts the fewest
  lower-priority pods on one node (unless its preemptionPolicy is Never) and waits there
  while they terminate (their terminationGracePeriodSeconds, else `termination_seconds`).
- A node provisioner, like Karpenter or Cluster Autoscaler: a pod that fits on no node
  (each pod takes the `nvidia.com/gpu` its container limits ask, 1 by default) makes new
  nodes of `gpus_per_node` GPUs appear after `node_provision_seconds`; a node empty for
  `node_idle_seconds` goes, down to `min_nodes`.
- Cluster Autoscaler's CapacityBuffers (autoscaling.x-k8s.io/v1beta1, where served): each
  holds `spec.replicas` chunks shaped like its PodTemplate as free GPUs. Like CA's virtual
  buffer pods they are never bound; they only make nodes appear (what fits nowhere counts
  as pending) and keep the nodes they fill from going idle. The buffer controller's
  status (replicas, podTemplateRef, ReadyForProvisioning) follows.
- A kubelet: a pod bound to a ready node turns Ready `cold_start_seconds` later; a deleted
  pod terminates for `termination_seconds` (with a deletionTimestamp) before it goes.

One `reconcile(now)` does all of it on the server's loop, every `period_seconds`; the
clock is injectable, so a run can go faster than real time.
"""

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpufleet.autoscaler.core.buffers import ACTIVE_CAPACITY  # the default strategy
from gpufleet.core.selectors import selector_string
from gpufleet.lab.kubeapi.objects import ApiError
from gpufleet.lab.kubeapi.resources import RESOURCES
from gpufleet.lab.kubeapi.store import ObjectStore, timestamp
from gpufleet.logs import OutageLog, ThrottledLog

log = logging.getLogger(__name__)
# The Deployment controller names its ReplicaSet `<name>-<pod-template-hash>`, the hash up
# to 10 characters, and an object name may be 253: a longer Deployment never gets a pod.
DEPLOYMENT_NAME_MAX = 253 - 11
BURST_REPLICAS = 500  # the ReplicaSet controller's BurstReplicas: pods created per sync
_RES = {(r.group, r.plural): r for r in RESOURCES}
DEPLOYMENTS, PODS, NODES = _RES[("apps", "deployments")], _RES[("", "pods")], _RES[("", "nodes")]
PRIORITY_CLASSES = _RES[("scheduling.k8s.io", "priorityclasses")]
POD_TEMPLATES = _RES[("", "podtemplates")]
BUFFERS = _RES[("autoscaling.x-k8s.io", "capacitybuffers")]
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
GPU = "nvidia.com/gpu"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterTiming:
    cold_start_seconds: float = 5.0
    node_provision_seconds: float = 10.0
    node_idle_seconds: float = 30.0
    termination_seconds: float = 1.0
    gpus_per_node: int = 8
    initial_nodes: int = 1
    # Nodes the provisioner never removes when idle: a cluster keeps its system pool. 0: every
    # GPU node can go, as a GPU NodePool does at night once its workloads are at zero.
    min_nodes: int = 1
    max_nodes: int = 16


class LabCluster:
    """Runs the controllers against `store`; `start()` on the server's loop."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        timing: ClusterTiming | None = None,
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self.timing = timing or ClusterTiming()
        self._clock = clock
        self._ready_at: dict[tuple[str, str], float] = {}  # pod -> when it turns Ready
        self._node_ready_at: dict[str, float] = {}
        self._node_empty_since: dict[str, float] = {}
        self._nominated: dict[tuple[str, str], str] = {}  # preemptor -> node being freed
        self._buffered: set[str] = set()  # nodes whose free GPUs hold buffer chunks
        self._next_node = 0
        self._task: asyncio.Task | None = None
        # What a pass cannot act on, logged a few times, not every 0.1 s.
        self._refused = ThrottledLog(log, clock=time.monotonic)
        now = clock()
        for _ in range(self.timing.initial_nodes):
            self._add_node(now, ready_at=now)

    def start(self, period_seconds: float = 0.1) -> None:
        outage = OutageLog(log, "the lab cluster's reconcile fails; the next is tried")

        async def loop() -> None:
            while True:
                try:
                    self.reconcile(self._clock())
                    outage.recovered()
                except Exception as err:  # a bug, or an object nothing checked: not its end
                    outage.raised(err)
                await asyncio.sleep(period_seconds)

        self._task = asyncio.get_running_loop().create_task(loop(), name="lab-cluster")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def reconcile(self, now: float) -> None:
        for deployment in self.store.list(DEPLOYMENTS, None):
            try:
                self._deployment(deployment, now)
            except ApiError as err:  # a template the API refuses: this Deployment only
                name = deployment["metadata"]["name"]
                self._refused.log(logging.WARNING, "deployment %s: %s", name, err.message)
        self._schedule(now)
        self._kubelet(now)
        self._scale_nodes(now)

    # --- deployments ---

    def _deployment(self, d: dict[str, Any], now: float) -> None:
        meta, spec = d["metadata"], d.get("spec") or {}
        ns, name = meta["namespace"], meta["name"]
        if len(name) > DEPLOYMENT_NAME_MAX:
            self._no_replica_set(d)
            return
        match = (spec.get("selector") or {}).get("matchLabels") or {}
        pods = self.store.list(PODS, ns, label_selector=selector_string(match))
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        want = int(spec.get("replicas", 1))
        for _ in range(min(want - len(live), BURST_REPLICAS)):
            self._create_pod(d, now)
        if len(live) > want:
            live.sort(key=_deletion_order)
            for pod in live[: len(live) - want]:
                self._terminate(pod)
        ready = sum(1 for p in live if is_ready(p))
        status = {
            "replicas": min(want, len(live)),
            "readyReplicas": ready,
            "observedGeneration": meta.get("generation", 1),
        }
        self._write_status(d, status)

    def _no_replica_set(self, d: dict[str, Any]) -> None:
        """The Deployment controller's answer when its ReplicaSet's name is refused: no pod,
        and Progressing False for ReplicaSetCreateError."""
        meta = d["metadata"]
        message = (
            f'Failed to create new replica set "{meta["name"]}-<hash>": '
            "metadata.name: must be no more than 253 characters"
        )
        condition = {
            "type": "Progressing",
            "status": "False",
            "reason": "ReplicaSetCreateError",
            "message": message,
        }
        status = {
            "replicas": 0,
            "readyReplicas": 0,
            "observedGeneration": meta.get("generation", 1),
            "conditions": [condition],
        }
        self._write_status(d, status)

    def _write_status(self, d: dict[str, Any], status: dict[str, Any]) -> None:
        meta = d["metadata"]
        if (d.get("status") or {}) != status:
            self.store.patch(
                DEPLOYMENTS,
                meta["namespace"],
                meta["name"],
                {"status": status},
                content_type="application/merge-patch+json",
                subresource="status",
            )

    def _create_pod(self, d: dict[str, Any], now: float) -> None:
        template = (d.get("spec") or {}).get("template") or {}
        meta = d["metadata"]
        body = {
            "metadata": {
                "generateName": f"{meta['name']}-",
                "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": meta["name"],
                        "uid": meta["uid"],
                    }
                ],
            },
            "spec": dict(template.get("spec") or {}),
            "status": {"phase": "Pending"},
        }
        self.store.create(PODS, meta["namespace"], body)

    def _terminate(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        self.store.mark_deleting(PODS, meta["namespace"], meta["name"])

    # --- scheduling and nodes ---

    def _nodes(self, now: float) -> dict[str, int]:
        """Ready node -> free GPUs."""
        free = {
            n["metadata"]["name"]: self.timing.gpus_per_node
            for n in self.store.list(NODES, None)
            if self._node_ready_at.get(n["metadata"]["name"], math.inf) <= now
        }
        for pod in self.store.list(PODS, None):
            node = (pod.get("spec") or {}).get("nodeName")
            if node in free:
                free[node] -= _gpus(pod)
        return free

    def _schedule(self, now: float) -> None:
        """Bind pending pods, highest priority first, fullest node first; a pod that fits
        nowhere preempts lower-priority pods (placeholders) where that frees enough, as the
        scheduler does, and waits on that node while they terminate; the rest ask for
        nodes."""
        free = self._nodes(now)
        classes = {c["metadata"]["name"]: c for c in self.store.list(PRIORITY_CLASSES, None)}
        pods = self.store.list(PODS, None)
        pending = [
            p
            for p in pods
            if not (p.get("spec") or {}).get("nodeName")
            and not p["metadata"].get("deletionTimestamp")
        ]
        pending.sort(key=lambda p: -_priority(p, classes))  # stable: creation order within
        pending_gpus = 0
        for pod in pending:
            meta = pod["metadata"]
            key = (meta["namespace"], meta["name"])
            need = _gpus(pod)
            nominated = self._nominated.get(key)
            fits = [n for n, f in free.items() if f >= need]
            if nominated in fits:
                fits = [nominated]
            if fits:
                node = min(fits, key=lambda n: (free[n], n))  # fullest first: nodes can empty
                free[node] -= need
                self._bind(pod, node, now)
                continue
            if nominated in free and self._terminating_on(nominated, pods):
                continue  # its victims are still going
            self._nominated.pop(key, None)
            node = self._preempt(pod, need, free, pods, classes)
            if node is not None:
                self._nominated[key] = node
                continue
            pending_gpus += need
        # A nominated pod deleted while pending is never bound: forget its nomination.
        waiting = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pending}
        self._nominated = {k: n for k, n in self._nominated.items() if k in waiting}
        pending_gpus += self._hold_buffers(free, now)
        coming = sum(1 for at in self._node_ready_at.values() if at > now)
        needed = math.ceil(pending_gpus / self.timing.gpus_per_node) - coming
        for _ in range(max(0, needed)):
            if len(self._node_ready_at) >= self.timing.max_nodes:
                break
            self._add_node(now, ready_at=now + self.timing.node_provision_seconds)

    def _hold_buffers(self, free: dict[str, int], now: float) -> int:
        """Place every active CapacityBuffer's chunks on the GPUs left free (fullest node
        first, as pods bind); returns the GPUs of the chunks that fit nowhere."""
        self._buffered = set()
        unplaced = 0
        for buffer in self.store.list(BUFFERS, None):
            spec, meta = buffer.get("spec") or {}, buffer["metadata"]
            ref = (spec.get("podTemplateRef") or {}) if isinstance(spec, dict) else None
            if not isinstance(ref, dict):  # its CRD's schema looser than CA's
                self._refused.log(
                    logging.WARNING, "capacitybuffer %s: no podTemplateRef to read", meta["name"]
                )
                continue
            strategy = spec.get("provisioningStrategy") or ACTIVE_CAPACITY
            template_name = ref.get("name", "")
            try:
                template = self.store.get(POD_TEMPLATES, meta["namespace"], template_name)
            except ApiError:
                template = None
            if strategy != ACTIVE_CAPACITY or template is None:
                self._buffer_status(buffer, None, now)
                continue
            need = _gpus(template.get("template") or {})
            chunks = max(0, int(spec.get("replicas") or 0))
            for placed in range(chunks):
                fits = [n for n, f in free.items() if f >= need]
                if not fits:  # nor will the rest
                    unplaced += need * (chunks - placed)
                    break
                node = min(fits, key=lambda n: (free[n], n))
                free[node] -= need
                self._buffered.add(node)
            self._buffer_status(buffer, chunks, now)
        return unplaced

    def _buffer_status(self, buffer: dict[str, Any], chunks: int | None, now: float) -> None:
        """What CA's buffer controller reports: the chunks it provisions for, or why none."""
        spec, meta = buffer.get("spec") or {}, buffer["metadata"]
        ready = chunks is not None
        status: dict[str, Any] = {
            "provisioningStrategy": spec.get("provisioningStrategy") or ACTIVE_CAPACITY,
            "conditions": [
                {
                    "type": "ReadyForProvisioning",
                    "status": "True" if ready else "False",
                    "reason": "AttributesSetSuccessfully" if ready else "PodTemplateNotFound",
                    "message": "" if ready else "no PodTemplate of that name, or another strategy",
                    "lastTransitionTime": timestamp(now),
                }
            ],
        }
        # null removes a field in a merge patch: a buffer that is no longer ready has none
        status["replicas"] = chunks
        status["podTemplateRef"] = dict(spec["podTemplateRef"]) if ready else None
        old = buffer.get("status") or {}

        def fields(s: dict[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in s.items() if k != "conditions" and v is not None}

        was = [c.get("status") for c in old.get("conditions") or ()]
        if fields(old) != fields(status) or was != [c["status"] for c in status["conditions"]]:
            self.store.patch(
                BUFFERS,
                meta["namespace"],
                meta["name"],
                {"status": status},
                content_type="application/merge-patch+json",
                subresource="status",
            )

    def _bind(self, pod: dict[str, Any], node: str, now: float) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        self.store.patch(
            PODS, *key, {"spec": {"nodeName": node}}, content_type="application/merge-patch+json"
        )
        # As the scheduler's binding does: the PodScheduled condition, which a controller
        # reads to tell a replica loading on its node from one waiting for a node.
        self.store.patch(
            PODS,
            *key,
            {"status": {"conditions": [_condition("PodScheduled", now)]}},
            content_type="application/merge-patch+json",
            subresource="status",
        )
        self._nominated.pop(key, None)
        self._ready_at[key] = now + self.timing.cold_start_seconds

    def _preempt(
        self,
        pod: dict[str, Any],
        need: int,
        free: dict[str, int],
        pods: list[dict[str, Any]],
        classes: dict[str, dict[str, Any]],
    ) -> str | None:
        """Evict the fewest lower-priority pods from one node so that `pod` fits there;
        the node, or None where no node can be freed (or the pod may not preempt)."""
        priority = _priority(pod, classes)
        if _preemption_policy(pod, classes) == "Never":
            return None
        best: tuple[int, str, list[dict[str, Any]]] | None = None
        for node, spare in free.items():
            victims = sorted(
                (
                    p
                    for p in pods
                    if (p.get("spec") or {}).get("nodeName") == node
                    and not p["metadata"].get("deletionTimestamp")
                    and _priority(p, classes) < priority
                ),
                key=lambda p: (
                    _priority(p, classes),
                    -int(p["metadata"].get("resourceVersion", "0")),
                ),
            )
            chosen, freed = [], spare
            for victim in victims:
                if freed >= need:
                    break
                chosen.append(victim)
                freed += _gpus(victim)
            if freed >= need and (best is None or (len(chosen), node) < best[:2]):
                best = (len(chosen), node, chosen)
        if best is None:
            return None
        for victim in best[2]:
            self._terminate(victim)
        return best[1]

    def _terminating_on(self, node: str, pods: list[dict[str, Any]]) -> bool:
        return any(
            (p.get("spec") or {}).get("nodeName") == node and p["metadata"].get("deletionTimestamp")
            for p in pods
        )

    def _add_node(self, now: float, *, ready_at: float) -> None:
        name = f"gpu-node-{self._next_node}"
        self._next_node += 1
        self.store.create(
            NODES,
            "",
            {
                "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}},
                "status": {
                    "capacity": {GPU: str(self.timing.gpus_per_node)},
                    "allocatable": {GPU: str(self.timing.gpus_per_node)},
                },
            },
        )
        self._node_ready_at[name] = ready_at

    def _scale_nodes(self, now: float) -> None:
        used = {(p.get("spec") or {}).get("nodeName") for p in self.store.list(PODS, None)}
        used |= self._buffered
        for name, ready_at in list(self._node_ready_at.items()):
            if ready_at > now or name in used or len(self._node_ready_at) <= self.timing.min_nodes:
                self._node_empty_since.pop(name, None)
                continue
            since = self._node_empty_since.setdefault(name, now)
            if now - since >= self.timing.node_idle_seconds:
                with contextlib.suppress(ApiError):
                    self.store.delete(NODES, "", name)
                del self._node_ready_at[name]
                self._node_empty_since.pop(name, None)

    # --- the kubelet ---

    def _kubelet(self, now: float) -> None:
        for pod in self.store.list(PODS, None):
            meta = pod["metadata"]
            key = (meta["namespace"], meta["name"])
            deleting = meta.get("deletionTimestamp")
            if deleting:
                grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
                if grace is None:
                    grace = self.timing.termination_seconds
                if now >= _parse(deleting) + grace:
                    with contextlib.suppress(ApiError):
                        self.store.delete(PODS, *key)
                    self._ready_at.pop(key, None)
                continue
            at = self._ready_at.get(key)
            if at is not None and at <= now and not is_ready(pod):
                kept = [
                    c
                    for c in (pod.get("status") or {}).get("conditions") or ()
                    if c.get("type") != "Ready"
                ]
                status = {"phase": "Running", "conditions": [*kept, _condition("Ready", now)]}
                self.store.patch(
                    PODS,
                    *key,
                    {"status": status},
                    content_type="application/merge-patch+json",
                    subresource="status",
                )


def _condition(kind: str, now: float) -> dict[str, str]:
    return {"type": kind, "status": "True", "lastTransitionTime": timestamp(now)}


def is_ready(pod: dict[str, Any]) -> bool:
    """Whether the pod's Ready condition is True."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def _gpus(pod: dict[str, Any]) -> int:
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or ():
        limit = ((c.get("resources") or {}).get("limits") or {}).get(GPU)
        total += int(limit) if limit is not None else 0
    return total or 1


def _priority(pod: dict[str, Any], classes: dict[str, dict[str, Any]]) -> int:
    """The pod's priority: spec.priority, else its PriorityClass's value (what admission
    would have set), else 0."""
    spec = pod.get("spec") or {}
    if isinstance(spec.get("priority"), int):
        return spec["priority"]
    return int((classes.get(spec.get("priorityClassName", "")) or {}).get("value", 0))


def _preemption_policy(pod: dict[str, Any], classes: dict[str, dict[str, Any]]) -> str:
    spec = pod.get("spec") or {}
    policy = spec.get("preemptionPolicy")
    if policy is None:
        policy = (classes.get(spec.get("priorityClassName", "")) or {}).get("preemptionPolicy")
    return policy or "PreemptLowerPriority"


def _deletion_order(pod: dict[str, Any]) -> tuple:
    """ReplicaSet's: unscheduled, then not ready, then lower deletion cost, then newer."""
    meta = pod["metadata"]
    cost = (meta.get("annotations") or {}).get(DELETION_COST, "0")
    return (
        bool((pod.get("spec") or {}).get("nodeName")),
        is_ready(pod),
        int(cost) if cost.lstrip("-").isdigit() else 0,
        -int(meta.get("resourceVersion", "0")),
    )


def _parse(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
