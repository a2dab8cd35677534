"""Simulated nodes, replicas and placeholder pods: who holds which GPU, and when.

Pure and clockless: every method takes `now`, and timers go out through the `post`
callback the engine hands in (time, kind, payload), so the engine's event heap is the only
clock. Replica states follow `_TRANSITIONS`; an illegal move raises at once. GPUs are
counted per node (a replica needs `gpus_per_replica` on one node); `check` verifies that no
node ever holds more than it has.

Placement bin-packs (the fitting up node with the fewest free GPUs, ties by launch order) the
way a cluster tuned for consolidation (Karpenter, MostAllocated scoring) does, so emptied
nodes can go. Pending pods (replicas, then placeholders) make the cluster launch enough new
nodes for all of them at once, as Karpenter does, up to `max_nodes`; how many is the capacity
planner's own packing (`core.planner.pack_nodes`), so the live planner and the replay count
nodes alike.

Placeholders are the live controller's (`core.placeholders`): one replica's GPUs each, at a
priority below every replica, so a replica that fits nowhere preempts one (the newest on
the first node that has one, as the scheduler picks the lowest-priority, newest victim);
when the policy asks for fewer, the newest go first, as their Deployment's ReplicaSet
deletes them (unscheduled ones first, which here are the ones not placed yet).
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import cast

from gpufleet.autoscaler.core.observation import Replica, ReplicaState
from gpufleet.autoscaler.core.planner import pack_nodes
from gpufleet.autoscaler.replay.core.model import ClusterModel


class Timer(IntEnum):
    """Cluster timers the engine schedules for us; the value orders same-time events."""

    NODE_READY = 2
    REPLICA_READY = 3
    NODE_IDLE = 4


_GONE = "gone"  # removed from the workload (internal; not a ReplicaState)

# Allowed replica moves, each with its cause.
_TRANSITIONS: dict[object, frozenset[object]] = {
    # cold start ends (READY); scaled down before serving (gone, newest starting first)
    ReplicaState.STARTING: frozenset({ReplicaState.READY, _GONE}),
    # scaled down: drains its in-flight requests
    ReplicaState.READY: frozenset({ReplicaState.TERMINATING}),
    # its last request finished: the GPU is released
    ReplicaState.TERMINATING: frozenset({_GONE}),
    _GONE: frozenset(),
}


class StagePrompt:
    """A prompt in a replica's chunked-prefill stage (engine-internal)."""

    __slots__ = ("first_chunk_at", "left", "rate", "request")

    def __init__(self, request: int, tokens: float) -> None:
        self.request = request
        self.left = tokens  # tokens still to prefill, as of the stage's chunk_at
        self.rate = 0.0  # tokens/s until the stage next changes; 0: no share of the step
        self.first_chunk_at = math.nan


class ReplayReplica:
    """One replica's mutable serving and placement state (engine-internal)."""

    __slots__ = (
        "busy_seconds",
        "busy_since",
        "chunk_active",
        "chunk_at",
        "chunk_version",
        "chunks",
        "created",
        "decoding",
        "gpu_since",
        "in_flight",
        "index",
        "name",
        "node",
        "observed_as",
        "prefill_free_at",
        "prefilling",
        "prompt_tokens",
        "route",
        "since",
        "state",
    )

    def __init__(self, *, index: int, name: str, now: float) -> None:
        self.index = index
        self.name = name
        self.state: object = ReplicaState.STARTING
        self.created = now
        self.since = now
        self.node: ReplayNode | None = None
        self.gpu_since = 0.0
        self.in_flight = 0  # requests holding a batch slot (prefill queue, prefill or decode)
        self.prefilling = 0  # of which waiting for or in the prefill stage
        self.decoding = 0  # of which decoding
        self.prompt_tokens = 0  # the prompts of the requests in flight, in tokens
        self.prefill_free_at = 0.0  # when the prefill stage finishes the prompts it has
        # Chunked prefill: the prompts in the stage, arrival order; their rates hold from
        # chunk_at until the stage next changes.
        self.chunks: list[StagePrompt] = []
        # Only the first chunk_active prompts have a rate (the step's budget runs out in
        # arrival order): the rest are 0 and need no advancing.
        self.chunk_active = 0
        self.chunk_at = 0.0
        self.chunk_version = 0  # a PREFILL_DONE posted for an older version is stale
        self.busy_seconds = 0.0  # time with in_flight >= 1, up to busy_since when busy
        self.busy_since = 0.0
        self.route = -1  # its place in the engine's routing table while READY there
        self.observed_as: Replica | None = None  # `observed()` until the next move

    def move(self, state: object, now: float) -> None:
        if state not in _TRANSITIONS[self.state]:
            raise RuntimeError(f"replica {self.name}: illegal move {self.state} -> {state}")
        self.state = state
        self.since = now
        self.observed_as = None

    def observed(self) -> Replica:
        """What a policy sees of it: built once per state, as every tick reads every one."""
        if self.observed_as is None:
            self.observed_as = Replica(
                name=self.name,
                state=self.state,  # type: ignore[arg-type]
                since=self.since,
                created=self.created,
                scheduled_since=None if self.node is None else self.gpu_since,
            )
        return self.observed_as

    def busy_total(self, now: float) -> float:
        """Seconds this replica has had at least one request, up to `now`."""
        return self.busy_seconds + (now - self.busy_since if self.in_flight else 0.0)


@dataclass(slots=True, kw_only=True)
class ReplayNode:
    index: int
    launched: float
    ready_at: float
    removed: float | None = None
    used_gpus: int = 0  # by replicas and placeholders
    placeholders: int = 0
    idle_generation: int = 0  # bumps whenever emptiness changes; stale idle timers no-op
    empty_since: float | None = None

    def up(self, now: float) -> bool:
        return self.removed is None and self.ready_at <= now


Post = Callable[[float, Timer, object], None]


class Cluster:
    """Nodes and one workload's replicas; the engine drives it and reads its counts."""

    def __init__(self, model: ClusterModel, *, prefix: str, post: Post) -> None:
        if not 1 <= model.gpus_per_replica <= model.gpus_per_node:
            raise ValueError("gpus_per_replica must be between 1 and gpus_per_node")
        self.model = model
        self.prefix = prefix
        self.post = post
        self.nodes: list[ReplayNode] = []
        self.replicas: list[ReplayReplica] = []  # not gone, in creation order
        self.ready: list[ReplayReplica] = []  # READY, in creation order
        self.headroom = 0  # placeholder pods wanted
        self._placeholders: list[ReplayNode] = []  # each bound placeholder's node, oldest first
        self.next_index = 0
        self.replica_gpu_seconds = 0.0
        self.node_gpu_seconds = 0.0
        self.node_events = 0

    # --- counts the engine and the timeline read ---

    def holding_gpu(self) -> int:
        return sum(1 for r in self.replicas if r.node is not None)

    def billed_nodes(self) -> int:
        return sum(1 for n in self.nodes if n.removed is None)

    def free_gpus(self, now: float) -> tuple[int, ...]:
        """Each up node's GPUs that no replica or placeholder holds."""
        return tuple(self.model.gpus_per_node - n.used_gpus for n in self.nodes if n.up(now))

    # --- driving ---

    def bootstrap(self, replicas: int) -> None:
        """`replicas` READY replicas on nodes up at time 0 (no launch event, no cold start)."""
        for _ in range(replicas):
            node = self._best_fit(0.0) or self._launch(0.0, ready_at=0.0, count=False)
            r = self._new_replica(0.0)
            self._bind(r, node, 0.0)
            r.move(ReplicaState.READY, 0.0)
            self.ready.append(r)
        self.place(0.0)

    def set_headroom(self, placeholders: int) -> None:
        """Keep this many placeholder pods (the policy's `Decision.headroom`) from the next
        `place`."""
        self.headroom = placeholders

    def set_desired(self, desired: int, now: float) -> None:
        """Create or remove replicas so that starting + ready == `desired`."""
        active = [r for r in self.replicas if r.state is not ReplicaState.TERMINATING]
        for _ in range(desired - len(active)):
            self._new_replica(now)
        excess = len(active) - desired
        if excess <= 0:
            return
        # Starting replicas go first: they serve nothing yet. Unbound ones, then those on
        # the emptiest node, newest first on ties.
        starting = [r for r in active if r.state is ReplicaState.STARTING]
        while excess > 0 and starting:
            r = min(starting, key=lambda r: (self._node_load(r), -r.index))
            starting.remove(r)
            self._drop(r, now)
            excess -= 1
        # Then ready ones on the emptiest node (so whole nodes can go), fewest in flight
        # (least to drain), newest first. One at a time, counting the ones this call has
        # already sent draining:
        # nodes that tie at the start (all full) must not each give up one, which empties
        # none. The live actuator gets the same order from
        # `controller.kubernetes.io/pod-deletion-cost`; every policy is simulated with it.
        leaving: dict[int, int] = {}
        while excess > 0 and self.ready:
            r = min(
                self.ready,
                key=lambda r: (
                    self._node_load(r) - leaving.get(id(r.node), 0),
                    r.in_flight,
                    -r.index,
                ),
            )
            r.move(ReplicaState.TERMINATING, now)
            self.ready.remove(r)
            excess -= 1
            if r.in_flight == 0:
                self._drop(r, now)  # its GPU is free now: the node's load shows it
            else:  # it drains first, holding its GPU
                leaving[id(r.node)] = leaving.get(id(r.node), 0) + self.model.gpus_per_replica

    def drained(self, replica: ReplayReplica, now: float) -> None:
        """A terminating replica finished its last request: release its GPU."""
        self._drop(replica, now)

    def place(self, now: float) -> None:
        """Bind pending replicas and placeholders to free GPUs; launch nodes for the rest."""
        g = self.model.gpus_per_replica
        pending = 0
        for r in self.replicas:
            if r.node is not None:
                continue
            node = self._best_fit(now) or self._preempt_placeholder(now)
            if node is None:
                pending += 1
            else:
                self._bind(r, node, now)
        bound = sum(n.placeholders for n in self.nodes if n.removed is None)
        self._evict_placeholders(bound - self.headroom, now)
        for _ in range(self.headroom - bound):
            node = self._best_fit(now)
            if node is None:
                pending += self.headroom - bound
                break
            node.placeholders += 1
            node.used_gpus += g
            self._placeholders.append(node)
            bound += 1
        self._launch_for(pending, now)
        for node in self.nodes:
            self._refresh_empty(node, now)

    def on_timer(self, kind: Timer, payload: object, now: float) -> None:
        if kind is Timer.NODE_READY:
            self.place(now)
        elif kind is Timer.REPLICA_READY:
            r = payload
            assert isinstance(r, ReplayReplica)
            if r.state is ReplicaState.STARTING and r.node is not None:
                r.move(ReplicaState.READY, now)
                self.ready.append(r)
                self.ready.sort(key=lambda x: x.index)
        elif kind is Timer.NODE_IDLE:
            node, generation = cast(tuple[ReplayNode, int], payload)
            if node.idle_generation == generation and node.removed is None:
                node.removed = now
                self.node_events += 1
                self.node_gpu_seconds += (now - node.launched) * self.model.gpus_per_node
                self.place(now)

    def finish(self, now: float) -> None:
        """Bill everything still held up to `now` (the end of the run)."""
        for r in self.replicas:
            if r.node is not None:
                self.replica_gpu_seconds += (now - r.gpu_since) * self.model.gpus_per_replica
        for n in self.nodes:
            if n.removed is None:
                self.node_gpu_seconds += (now - n.launched) * self.model.gpus_per_node

    def check(self, now: float) -> None:
        """Raise AssertionError if any GPU is double-booked or state is inconsistent."""
        g = self.model.gpus_per_replica
        held = {id(n): 0 for n in self.nodes}
        for r in self.replicas:
            assert r.in_flight == r.prefilling + r.decoding >= 0, r.name
            if r.node is not None:
                assert r.node.up(now), f"{r.name} on a node that is not up"
                held[id(r.node)] += g
            else:
                assert r.state is ReplicaState.STARTING, f"{r.name} serving without a GPU"
        for n in self.nodes:
            used = held[id(n)] + n.placeholders * g
            assert used == n.used_gpus, f"node {n.index}: used {n.used_gpus} != {used}"
            assert used <= self.model.gpus_per_node, f"node {n.index} double-booked: {used}"
            assert n.removed is None or used == 0, f"removed node {n.index} holds GPUs"
        assert self.billed_nodes() <= self.model.max_nodes

    # --- internals ---

    @staticmethod
    def _node_load(r: ReplayReplica) -> int:
        """GPUs in use on `r`'s node; -1 for a replica not bound to one yet."""
        return -1 if r.node is None else r.node.used_gpus

    def _new_replica(self, now: float) -> ReplayReplica:
        r = ReplayReplica(index=self.next_index, name=f"{self.prefix}-{self.next_index}", now=now)
        self.next_index += 1
        self.replicas.append(r)
        return r

    def _bind(self, r: ReplayReplica, node: ReplayNode, now: float) -> None:
        r.node = node
        r.gpu_since = now
        r.observed_as = None  # now on a node
        node.used_gpus += self.model.gpus_per_replica
        self._refresh_empty(node, now)
        self.post(now + self.model.cold_start_seconds, Timer.REPLICA_READY, r)

    def _drop(self, r: ReplayReplica, now: float) -> None:
        r.move(_GONE, now)
        self.replicas.remove(r)
        node = r.node
        if node is not None:
            self.replica_gpu_seconds += (now - r.gpu_since) * self.model.gpus_per_replica
            node.used_gpus -= self.model.gpus_per_replica
            r.node = None
            self._refresh_empty(node, now)

    def _best_fit(self, now: float) -> ReplayNode | None:
        g = self.model.gpus_per_replica
        fits = [n for n in self.nodes if n.up(now) and self.model.gpus_per_node - n.used_gpus >= g]
        return min(
            fits, key=lambda n: (self.model.gpus_per_node - n.used_gpus, n.index), default=None
        )

    def _preempt_placeholder(self, now: float) -> ReplayNode | None:
        """Free a placeholder's GPU for a replica (pause pods have the lowest priority)."""
        for node in self.nodes:
            if node.up(now) and node.placeholders:
                self._unbind_placeholder(node)
                return node
        return None

    def _evict_placeholders(self, count: int, now: float) -> None:
        """The `count` newest placeholders go (the ReplicaSet's order for pods alike)."""
        for _ in range(max(0, count)):
            node = self._placeholders[-1]
            self._unbind_placeholder(node)
            self._refresh_empty(node, now)

    def _unbind_placeholder(self, node: ReplayNode) -> None:
        """Free the GPUs of the newest placeholder on `node`."""
        i = len(self._placeholders) - 1 - self._placeholders[::-1].index(node)
        del self._placeholders[i]
        node.placeholders -= 1
        node.used_gpus -= self.model.gpus_per_replica

    def _launch_for(self, pending: int, now: float) -> None:
        """Launch the nodes `pending` pods need beyond the nodes already coming."""
        if not pending:
            return
        units = [self.model.gpus_per_replica] * pending
        needed = len(pack_nodes(units, gpus_per_node=self.model.gpus_per_node))
        coming = sum(1 for n in self.nodes if n.removed is None and n.ready_at > now)
        for _ in range(needed - coming):
            if self.billed_nodes() >= self.model.max_nodes:
                break
            self._launch(now, ready_at=now + self.model.node_provision_seconds, count=True)

    def _launch(self, now: float, *, ready_at: float, count: bool) -> ReplayNode:
        node = ReplayNode(index=len(self.nodes), launched=now, ready_at=ready_at)
        self.nodes.append(node)
        if count:
            self.node_events += 1
            self.post(ready_at, Timer.NODE_READY, node)
        return node

    def _refresh_empty(self, node: ReplayNode, now: float) -> None:
        if node.removed is not None or not node.up(now):
            return
        empty = node.used_gpus == 0
        if empty and node.empty_since is None:
            node.empty_since = now
            node.idle_generation += 1
            self.post(
                now + self.model.node_idle_seconds, Timer.NODE_IDLE, (node, node.idle_generation)
            )
        elif not empty and node.empty_since is not None:
            node.empty_since = None
            node.idle_generation += 1
