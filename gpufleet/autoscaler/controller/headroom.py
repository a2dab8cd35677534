"""The loop's act step for node capacity: headroom kept ahead of each target.

A decision's headroom (replicas' worth of GPUs to keep ahead) is first cut to what each
Karpenter NodePool's limits leave (`fit_to_nodepools`), then kept as a CapacityBuffer where
its CRD is installed, else as low-priority placeholder pods (`HeadroomKeeper`). A failure
costs only the headroom, counted and logged, never the scale write or another workload.
"""

import logging
from collections.abc import Callable

from gpufleet.autoscaler.controller.leading import NotLeading, as_leader
from gpufleet.autoscaler.controller.stats import Stats
from gpufleet.autoscaler.controller.workload import Key, Tick
from gpufleet.autoscaler.core.buffers import BUFFER_KIND, capacity_buffer, pod_template
from gpufleet.autoscaler.core.nodepools import PoolDemand, on_nodepool, pool_headroom, pool_use
from gpufleet.autoscaler.core.placeholders import (
    OWNER_LABEL,
    placeholder_deployment,
    placeholder_name,
    priority_class,
)
from gpufleet.autoscaler.core.spec import TargetRef
from gpufleet.autoscaler.kube.cluster import Cluster, ClusterView
from gpufleet.kube.errors import KubeError
from gpufleet.logs import OutageLog

log = logging.getLogger(__name__)


def fit_to_nodepools(
    ticks: list[Tick], view: ClusterView, queued: list[PoolDemand], *, undecided: list[Tick]
) -> None:
    """Cut each workload's headroom to what its Karpenter NodePool's limits leave,
    planning every workload's replicas and headroom together with Kueue's pending
    Workloads (`queued`), after what other pods' nodes use of the limits (see
    `core.nodepools`, `core.kueue`). The `undecided` workloads (busy, or a step of theirs
    raised this tick) are planned with the replicas and headroom they last asked for, and
    left as they are: their placeholders hold part of the limits all the same."""
    nodepools = view.nodepools or []
    planned = ticks + undecided
    demands = [
        PoolDemand(
            workload=t.workload.name,
            node_pool=t.workload.spec.node_pool,
            shape=t.workload.spec.workload.shape,
            replicas=t.workload.decided or 0,
            headroom=t.workload.headroom,
            gpus_per_node=t.workload.spec.workload.gpus_per_node,
        )
        for t in planned
    ]
    ours = {
        (p.namespace, p.name)
        for t, d in zip(planned, demands, strict=True)
        if on_nodepool(d, nodepools)
        for p in t.pods
    }
    ours |= {(p.namespace, p.name) for p in view.pods if OWNER_LABEL in p.labels}
    used = pool_use(view.pool_nodes, view.pods, ours)
    fitted = pool_headroom(nodepools, demands + queued, used)
    for t, d in zip(ticks, demands[: len(ticks)], strict=True):
        if not on_nodepool(d, nodepools):
            continue
        held = fitted[d.workload]
        t.headroom = held.granted
        t.note(
            node_pool=held.node_pool or d.node_pool or "by weight",
            node_pool_limit=held.message,
        )


class HeadroomKeeper:
    """Writes each workload's CapacityBuffer or placeholder Deployment when its size changes."""

    def __init__(self, cluster: Cluster, stats: Stats, *, is_leader: Callable[[], bool]) -> None:
        self._cluster = cluster
        self._stats = stats
        self._is_leader = is_leader
        self._priority_class_ready = False  # the placeholders' PriorityClass exists
        # The release failures of GPUAutoscalers with an invalid spec, which have no
        # `Workload` to keep them: ((namespace, name), what) -> its log.
        self._invalid: dict[tuple[Key, str], OutageLog] = {}

    async def keep(self, t: Tick) -> None:
        """Keep `t.headroom` replicas' worth of GPU capacity ahead of the target: as a
        CapacityBuffer where its CRD is installed (see `core.buffers`; placeholder pods
        left from before go to zero), else as placeholder pods (see `core.placeholders`).
        None when the spec says so, another autoscaler owns the target (`t.headroom` is 0
        then), or its pod template is unknown (kinds other than Deployment and
        StatefulSet)."""
        want = t.headroom
        if t.buffers:
            await self._keep_buffer(t, want)
            want = 0
        await self._keep_placeholders(t, want)

    async def _keep_buffer(self, t: Tick, want: int) -> None:
        spec = t.workload.spec
        owner = {"namespace": spec.namespace, "autoscaler": spec.name, "autoscaler_uid": spec.uid}

        def write() -> None:
            self._cluster.write_buffer(
                pod_template(**owner, template_spec=t.template),
                capacity_buffer(**owner, replicas=want),
                exists=t.buffer is not None,
            )

        await self._keep(
            t,
            want,
            current=t.buffer,
            kept=self._stats.buffers,
            what="its CapacityBuffer",
            write=write,
        )

    async def _keep_placeholders(self, t: Tick, want: int) -> None:
        spec = t.workload.spec

        def write() -> None:
            if not self._priority_class_ready:
                self._cluster.ensure_priority_class(priority_class())
                self._priority_class_ready = True
            body = placeholder_deployment(
                namespace=spec.namespace,
                autoscaler=spec.name,
                autoscaler_uid=spec.uid,
                replicas=want,
                template_spec=t.template,
            )
            self._cluster.write_placeholders(body, exists=t.placeholders is not None)

        await self._keep(
            t,
            want,
            current=t.placeholders,
            kept=self._stats.placeholders,
            what="its placeholder pods",
            write=write,
        )

    async def release(self, t: Tick) -> None:
        """Scale `t`'s placeholder pods and CapacityBuffer to 0 where its target cannot be
        read (deleted, or renamed in the spec): they held GPUs, and kept nodes billed, for
        nothing. Through their replicas alone, as the target's pod template is gone with it."""
        w = t.workload
        await self._release(
            w.key,
            placeholders=t.placeholders,
            buffer=t.buffer,
            outage=lambda what: w.outage(what, log),
            kept_as=w.name,
        )

    async def release_invalid(self, key: Key, view: ClusterView) -> None:
        """The same for a GPUAutoscaler whose spec is invalid: nothing sizes its headroom
        while it is, and it held GPUs at its last size for as long as the spec stayed bad.
        A failure is one outage line per GPUAutoscaler, as for a valid one."""

        def outage(what: str) -> OutageLog:
            found = self._invalid.get((key, what))
            if found is None:
                found = self._invalid[(key, what)] = OutageLog(log, f"{key[0]}/{key[1]}: {what}")
            return found

        await self._release(
            key,
            placeholders=view.placeholders.get(key),
            buffer=(view.buffers or {}).get(key),
            outage=outage,
            kept_as=None,
        )

    def forget_invalid_all_but(self, keys: set[Key]) -> None:
        """Drop the failure logs of GPUAutoscalers no longer invalid (or gone)."""
        self._invalid = {k: v for k, v in self._invalid.items() if k[0] in keys}

    async def _release(
        self,
        key: Key,
        *,
        placeholders: int | None,
        buffer: int | None,
        outage: Callable[[str], OutageLog],
        kept_as: str | None,
    ) -> None:
        namespace, name = key
        if placeholders:
            own = TargetRef(
                api_version="apps/v1",
                kind="Deployment",
                name=placeholder_name(name, kind="Deployment"),
            )
            await self._write(
                outage("cannot release its placeholder pods"),
                0,
                kept=self._stats.placeholders,
                kept_as=kept_as,
                write=lambda: self._cluster.write_scale(namespace, own, 0),
            )
        if buffer:
            await self._write(
                outage("cannot release its CapacityBuffer"),
                0,
                kept=self._stats.buffers,
                kept_as=kept_as,
                write=lambda: self._cluster.release_buffer(
                    namespace, placeholder_name(name, kind=BUFFER_KIND)
                ),
            )

    async def _keep(
        self,
        t: Tick,
        want: int,
        *,
        current: int | None,
        kept: dict[str, int],
        what: str,
        write: Callable[[], None],
    ) -> None:
        """What both forms of headroom share: `write` (in a thread) only when `want`
        differs from what the cluster holds (`current`; None: no object yet) and the
        target's pod template is known; a failure is counted and logged (as an outage: not
        once per tick while it lasts), never raised."""
        if t.template is None or current == want or (current is None and not want):
            kept[t.workload.name] = current or 0
            return
        w = t.workload
        await self._write(
            w.outage(f"cannot keep {what}", log), want, kept=kept, kept_as=w.name, write=write
        )

    async def _write(
        self,
        outage: OutageLog,
        want: int,
        *,
        kept: dict[str, int],
        kept_as: str | None,
        write: Callable[[], object],
    ) -> None:
        """`write` in a thread, while this replica leads; `want` kept (under `kept_as`,
        where it is a workload's) once it is written. A failure is counted and logged as an
        outage (`outage`), never raised."""
        try:
            await as_leader(self._is_leader, write)
        except NotLeading:
            return
        except KubeError as err:
            self._stats.errors[f"kube_{err.kind}"] += 1
            outage.failed(f"{want} wanted: {err}", kind=str(err.kind))
            return
        outage.recovered()
        if kept_as is not None:
            kept[kept_as] = want
