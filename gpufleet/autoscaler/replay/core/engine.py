"""The discrete-event engine: replays a trace through replicas driven by a real policy.

Pure and deterministic: no clock, no I/O, no randomness (the model has none; the only
seeded randomness is the jitter of `trace.scale_trace`'s copies). One heap of
(time, kind, seq) events; arrivals are read straight from the trace arrays instead. Ties at
one instant resolve in the kinds' order, so completions free slots before arrivals take them
and a policy tick sees the state after everything else at that instant.

Service model (per replica; `ServiceModel`): requests wait in one central FIFO queue at the
router and go to a READY replica with a free batch slot: by default the one with the fewest
in flight (ties: lowest index); with `routing="least-tokens"` the one whose requests in
flight hold the fewest prompt tokens (ties: fewest in flight, then lowest index). The
replica's prefill stage runs at `prefill_tokens_per_second`; the first token comes when a
request's prefill ends (TTFT = prefill end - arrival). Without chunked prefill it serves
prompts FIFO, one at a time. With it (the default, as vLLM V1) each engine
step's token budget goes first to the decoding sequences (one token each), then to prompt
chunks in arrival order (each capped at `long_prefill_token_threshold` when set), and a step
takes its tokens' worth of prefill time: a prompt's rate is its chunk's share of the step's
tokens times `prefill_tokens_per_second`. The stage is re-timed (a fluid approximation of
the steps, exact for prompts that fit one step) whenever its prompts or the replica's
decoding count change, and only then: once per replica per event, after the event's
handler, however many prompts it started there. Decoding then takes output_tokens x
(decode_seconds_per_token + decode_seconds_per_token_per_sequence x (occupancy - 1)), where
occupancy is the number of sequences decoding on the replica when this one starts decoding,
itself included. Fixing the per-token time at decode start is the other approximation: a
sequence that starts in a quiet batch keeps its fast pace when the batch later fills (and
the reverse). It keeps one event per phase instead of re-timing every sequence on every
batch change, and is exact in steady state. The slot frees when decoding ends (e2e = decode
end - arrival).

Requests are never dropped: with no replica they wait, and the run continues past the end
of the trace (the policy still ticking) until every request has completed.

This module, `cluster` and `pipeline` are the ones `GPUFLEET_COMPILE=1` compiles with mypyc
(setup.py): their annotations are checked at run time there, so a payload is unpacked with
`cast`, not an ignore, and a variable keeps one type.
"""

import heapq
import math
from collections.abc import Callable
from typing import Final, cast

import numpy as np

from gpufleet.autoscaler.core.observation import ReplicaState
from gpufleet.autoscaler.core.policy import Policy
from gpufleet.autoscaler.core.workload import WorkloadConfig
from gpufleet.autoscaler.replay.core.cluster import Cluster, ReplayReplica, StagePrompt, Timer
from gpufleet.autoscaler.replay.core.model import ROUTINGS, ReplayConfig
from gpufleet.autoscaler.replay.core.pipeline import Pipeline
from gpufleet.autoscaler.replay.core.result import DecisionRecord, RunResult
from gpufleet.autoscaler.replay.core.stats import TimelineBuilder, build_result
from gpufleet.autoscaler.replay.core.trace import Trace

TIMELINE_STEP_SECONDS = 10.0
# A policy that leaves requests queued with no replica for this long after the trace ends
# would hang the run; it is a policy bug, reported as SimulationError.
MAX_OVERRUN_SECONDS = 86_400.0
# A prompt whose tokens left are within this of zero when its PREFILL_DONE fires is done:
# float rounding of (left - rate * (left / rate)), far below one token.
_CHUNK_EPSILON_TOKENS = 1e-6


class SimulationError(Exception):  # not RuntimeError: mypyc compiles no other builtin base
    """The run cannot finish (a policy that never serves the queue)."""


# Event kinds; the value is the tie-break order at one instant. Plain ints, compared per
# event: constants in the compiled build, where an enum's members are lookups.
_DECODE_DONE: Final = 0
_PREFILL_DONE: Final = 1
# 2, 3, 4: the cluster's timers (`Timer`: node ready, replica ready, node idle)
_ARRIVAL: Final = 5  # not on the heap: read from the trace arrays
_SCRAPE: Final = 6
_TICK: Final = 7
_TIMELINE: Final = 8
assert _PREFILL_DONE < min(Timer) <= max(Timer) < _ARRIVAL


def simulate(
    trace: Trace,
    policy: Policy,
    *,
    workload: WorkloadConfig,
    config: ReplayConfig = ReplayConfig(),  # noqa: B008 - frozen, so a shared default is safe
    progress: Callable[[float], None] | None = None,
    check_invariants: bool = False,
) -> RunResult:
    """Replay `trace` against `policy`; every request is served exactly once.

    `progress` gets the fraction of the trace's simulated time done, at most ~101 times.
    `check_invariants` verifies GPU accounting and slot counts after every event (slow; tests).
    Raises ValueError for an empty trace, SimulationError if the queue is never served.
    """
    if len(trace) == 0:
        raise ValueError(f"trace {trace.name} has no requests")
    if policy.interval_seconds <= 0:
        raise ValueError(f"policy {policy.name}: interval_seconds must be > 0")
    run = _Run(trace, policy, workload=workload, config=config, check=check_invariants)
    run.loop(progress)
    return run.result()


class _Run:
    """One run's mutable state; `loop` drives it, `result` summarises it."""

    def __init__(
        self,
        trace: Trace,
        policy: Policy,
        *,
        workload: WorkloadConfig,
        config: ReplayConfig,
        check: bool,
    ) -> None:
        self.trace = trace
        self.policy = policy
        self.workload = workload
        self.config = config
        self.check = check
        self.n = len(trace)
        self.arrivals = trace.arrival_seconds.tolist()
        self.prompts = trace.prompt_tokens.tolist()
        self.outputs = trace.output_tokens.tolist()
        self.ttft = [math.nan] * self.n
        self.e2e = [math.nan] * self.n
        self.arrived = 0  # requests that have arrived: the queue is [head, arrived)
        self.head = 0
        self.completed = 0
        self.heap: list[tuple[float, int, int, object]] = []
        self.seq = 0  # ties at one instant and kind go in posting order
        self.cluster = Cluster(config.cluster, prefix=workload.name, post=self._post_timer)
        self.pipeline = Pipeline(config.pipeline)
        self.timeline = TimelineBuilder()
        self.decisions: list[DecisionRecord] = []
        self.desired = config.initial_replicas
        # The routing table (`_reroute`): cluster.ready as last seen, its in-flight counts.
        self._routed: list[ReplayReplica] = []
        self._loads: list[int] = []
        self._at = [0] * (config.service.batch_slots + 1)  # [n]: how many of _loads are n
        self._keys: list[float] = []  # least-tokens only: `_key` of each, in step with _loads
        # Replicas whose prefill stage changed during this event, in the order they last
        # changed: re-timed once each after the handler (`_retime_changed`).
        self._changed: dict[ReplayReplica, None] = {}
        self.scale_events = 0
        self.now = 0.0
        svc = config.service
        self.slots = svc.batch_slots
        self.prefill_rate = svc.prefill_tokens_per_second
        self.decode_base = svc.decode_seconds_per_token
        self.decode_per_seq = svc.decode_seconds_per_token_per_sequence
        self.chunked = svc.chunked_prefill
        self.budget = svc.max_num_batched_tokens
        self.chunk_cap = svc.long_prefill_token_threshold or math.inf
        if svc.routing not in ROUTINGS:
            raise ValueError(f"routing must be one of {', '.join(ROUTINGS)}")
        self.by_tokens = svc.routing == "least-tokens"
        if self.slots < 1 or self.prefill_rate <= 0:
            raise ValueError("batch_slots must be >= 1 and prefill_tokens_per_second > 0")
        if self.chunked and self.budget <= self.slots:
            # vLLM refuses the same: decodes alone would fill every step.
            raise ValueError("max_num_batched_tokens must be > batch_slots with chunked prefill")

    # --- event plumbing ---

    def _post(self, t: float, kind: int, payload: object = None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, payload))

    def _post_timer(self, t: float, kind: Timer, payload: object) -> None:
        self._post(t, int(kind), payload)

    def loop(self, progress: Callable[[float], None] | None) -> None:
        self.cluster.bootstrap(self.config.initial_replicas)
        self._post(self.config.pipeline.scrape_interval_seconds, _SCRAPE)
        self._post(0.0, _TICK)
        self._post(0.0, _TIMELINE)
        duration = self.trace.duration_seconds
        give_up_at = duration + MAX_OVERRUN_SECONDS
        next_progress = 0
        heap, arrivals, n, check = self.heap, self.arrivals, self.n, self.check
        changed, chunked = self._changed, self.chunked
        # The next arrival goes first unless an event sorts before it (the heap is never
        # empty: scrapes, ticks and timeline samples post their successors).
        arrival = arrivals[0]
        while self.completed < n:
            top = heap[0]
            if arrival < top[0] or (arrival == top[0] and top[1] > _ARRIVAL):
                self.now = arrival
                self.arrived += 1
                arrival = arrivals[self.arrived] if self.arrived < n else math.inf
                self._dispatch()
            else:
                t, kind, _, payload = heapq.heappop(heap)
                self.now = t
                # The commonest first: a chain of compares, direct calls when compiled.
                if kind == _DECODE_DONE:
                    self._decode_done(payload)
                elif kind == _PREFILL_DONE:
                    if chunked:
                        self._chunks_done(payload)
                    else:
                        self._prefill_done(payload)
                elif kind == _SCRAPE:
                    self._scrape()
                elif kind == _TICK:
                    self._tick()
                elif kind == _TIMELINE:
                    self._timeline()
                else:
                    self.cluster.on_timer(Timer(kind), payload, t)
                    self._dispatch()
            if changed:
                self._retime_changed()
            if check:
                self._check()
            if progress is not None and self.now >= next_progress * duration / 100:
                progress(min(1.0, self.now / duration) if duration > 0 else 1.0)
                next_progress = math.floor(100 * self.now / duration) + 1 if duration > 0 else 101
            if self.now > give_up_at:
                raise SimulationError(
                    f"policy {self.policy.name}: {self.n - self.completed} requests still "
                    f"unserved {MAX_OVERRUN_SECONDS:.0f} s after the trace ended"
                )
        if progress is not None:
            progress(1.0)
        self.cluster.finish(self.now)
        self.timeline.sample(self._timeline_point())

    # --- requests ---

    def _dispatch(self) -> None:
        """Send queued requests, oldest first, to the least-loaded ready replica with a slot."""
        if self.head == self.arrived:
            return
        ready = self.cluster.ready
        if ready != self._routed:
            self._reroute(ready)
        if self.by_tokens:
            self._dispatch_by_tokens(ready)
            return
        loads, at = self._loads, self._at
        while self.head < self.arrived and loads:
            # The least load from the counts per load, not min() over the fleet: with
            # hundreds of replicas that pass was a third of a compiled run. index() finds the
            # first of equals: the lowest index, `ready` being in creation order.
            least = 0
            while not at[least]:
                least += 1
            if least >= self.slots:
                return
            self._start(self.head, ready[loads.index(least)])
            self.head += 1

    def _dispatch_by_tokens(self, ready: list[ReplayReplica]) -> None:
        """`_dispatch` for `routing="least-tokens"`: the least `_key` by min() and its first
        replica by index(), both in C (the counts per load that `_dispatch` reads need small
        integers, and token counts are not; a pass over the replicas in Python per request
        was 40% of a profiled mix x10 run at a 0.999 target)."""
        keys = self._keys
        while self.head < self.arrived and keys:
            least = min(keys)
            if least == math.inf:
                return
            self._start(self.head, ready[keys.index(least)])
            self.head += 1

    def _key(self, r: ReplayReplica) -> float:
        """Where least-tokens routing ranks `r`: fewer prompt tokens in flight first, then
        fewer requests (ties to the oldest are index()'s); inf when it has no free slot."""
        if r.in_flight >= self.slots:
            return math.inf
        return r.prompt_tokens * (self.slots + 1) + r.in_flight

    def _reroute(self, ready: list[ReplayReplica]) -> None:
        """Rebuild the routing table for the READY replicas as they are now: their in-flight
        counts in a list of ints, and how many replicas are at each count, kept in step by
        `_start` and `_decode_done` (`_load`): the least load is read from the counts and its
        first replica found by index() in C (an attribute read per replica per request was a
        sixth of a run at 50 replicas)."""
        for r in self._routed:
            r.route = -1
        self._routed = list(ready)
        for k, r in enumerate(ready):
            r.route = k
        self._loads = [r.in_flight for r in ready]
        self._at = [self._loads.count(n) for n in range(self.slots + 1)]
        if self.by_tokens:
            self._keys = [self._key(r) for r in ready]

    def _load(self, r: ReplayReplica, change: int) -> None:
        """Add `change` to `r`'s in-flight count in the routing table (`r` itself already
        changed)."""
        k = r.route
        self._at[self._loads[k]] -= 1
        self._loads[k] += change
        self._at[self._loads[k]] += 1
        if self.by_tokens:
            self._keys[k] = self._key(r)

    def _start(self, i: int, r: ReplayReplica) -> None:
        now = self.now
        if r.in_flight == 0:
            r.busy_since = now
        r.in_flight += 1
        r.prompt_tokens += self.prompts[i]
        self._load(r, 1)
        r.prefilling += 1
        if self.chunked:
            self._advance_chunks(r)
            r.chunks.append(StagePrompt(i, float(self.prompts[i])))
            self._changed_stage(r)
            return
        start = r.prefill_free_at if r.prefill_free_at > now else now
        end = start + self.prompts[i] / self.prefill_rate
        r.prefill_free_at = end
        self._post(end, _PREFILL_DONE, (i, r))

    def _prefill_done(self, payload: object) -> None:
        """Without chunked prefill: the stage's one prompt finished."""
        i, r = cast(tuple[int, ReplayReplica], payload)
        self._first_token(i, r, self.prompts[i] / self.prefill_rate)

    def _first_token(self, i: int, r: ReplayReplica, prefill_seconds: float) -> None:
        now = self.now
        assert math.isnan(self.ttft[i]), f"request {i} prefilled twice"
        ttft = now - self.arrivals[i]
        self.ttft[i] = ttft
        self.pipeline.first_token(
            ttft, prompt_tokens=self.prompts[i], prefill_seconds=prefill_seconds
        )
        r.prefilling -= 1
        r.decoding += 1
        per_token = self.decode_base + self.decode_per_seq * (r.decoding - 1)
        self._post(now + self.outputs[i] * per_token, _DECODE_DONE, (i, r))

    # --- chunked prefill ---

    def _advance_chunks(self, r: ReplayReplica) -> None:
        """Bring the stage's tokens-left up to now at the rates set at `chunk_at`."""
        elapsed = self.now - r.chunk_at
        r.chunk_at = self.now
        if elapsed > 0:
            for chunk in r.chunks[: r.chunk_active]:  # the rest have no rate
                chunk.left -= chunk.rate * elapsed

    def _changed_stage(self, r: ReplayReplica) -> None:
        """Note that `r`'s prefill stage changed now; it is re-timed after this event."""
        self._changed.pop(r, None)  # to the end: the posts keep the order they had
        self._changed[r] = None

    def _retime_changed(self) -> None:
        """Re-time, once each, the stages changed during this event. One event often
        changes a stage several times at one instant (a decode that ends frees budget and
        a slot the queue refills; a replica that becomes ready with a queue takes many
        prompts), and re-timing at each change gave the same result as at the last: within
        one event a replica's decoding count only falls before its stage grows, so earlier
        prompts keep their shares as later ones join, and what the earlier re-times posted
        went stale."""
        for r in self._changed:
            self._retime_chunks(r)
        self._changed.clear()

    def _retime_chunks(self, r: ReplayReplica) -> None:
        """Share one step's budget as vLLM V1 does and post the next prompt to finish."""
        r.chunk_version += 1
        chunks = r.chunks
        if not chunks:
            return
        left = float(self.budget - r.decoding)  # a float from the start: one type (compiled)
        cap = self.chunk_cap
        active, shared = 0, 0.0
        for chunk in chunks:
            if left <= 0:
                break  # the budget is spent: the prompts after get no share
            share = chunk.left  # min(tokens left, cap, left) without a call per prompt
            if cap < share:
                share = cap
            if left < share:
                share = left
            if share < 0.0:
                share = 0.0  # done already, a rounding error past zero (below): no share
            left -= share
            shared += share
            chunk.rate = share  # tokens of the step, until the rate below replaces it
            active += 1
        for chunk in chunks[active : r.chunk_active]:
            chunk.rate = 0.0  # had a share at the last retime, has none now
        r.chunk_active = active
        step_tokens = r.decoding + shared
        now, rate = self.now, self.prefill_rate
        end = math.inf
        for chunk in chunks[:active]:
            if chunk.first_chunk_at != chunk.first_chunk_at:  # NaN: its first is now
                chunk.first_chunk_at = now
            share = chunk.rate
            if share > 0:
                tokens_per_second = chunk.rate = rate * share / step_tokens
                due = now + chunk.left / tokens_per_second
            else:
                # Nothing left: an event at the instant it was due, sorted before its
                # PREFILL_DONE (a decode that ended then), advanced it to ~0 and made that
                # event stale. Done now; timed on its share, it was never done (the run
                # hung, or divided by a zero step).
                due = now
            if due < end:
                end = due
        self._post(end, _PREFILL_DONE, (r.chunk_version, r))

    def _chunks_done(self, payload: object) -> None:
        """With chunked prefill: the stage's first prompt(s) finished, unless the stage
        changed since (stale: most are)."""
        version, r = cast(tuple[int, ReplayReplica], payload)
        if version != r.chunk_version:
            return
        self._advance_chunks(r)
        # The prompt the event was timed for is at ~0 left (rounding); others due at the
        # same instant finish with it. Only prompts with a share of the step can be done.
        done: list[StagePrompt] = []
        kept: list[StagePrompt] = []
        for c in r.chunks[: r.chunk_active]:
            (done if c.left <= _CHUNK_EPSILON_TOKENS else kept).append(c)
        if done:
            r.chunks = kept + r.chunks[r.chunk_active :]
            r.chunk_active = len(kept)
        for chunk in done:
            self._first_token(chunk.request, r, self.now - chunk.first_chunk_at)
        self._changed_stage(r)

    def _decode_done(self, payload: object) -> None:
        i, r = cast(tuple[int, ReplayReplica], payload)
        now = self.now
        self.e2e[i] = now - self.arrivals[i]
        self.completed += 1
        if r.chunks:
            self._advance_chunks(r)
            r.decoding -= 1
            self._changed_stage(r)
        else:
            r.decoding -= 1
        r.in_flight -= 1
        r.prompt_tokens -= self.prompts[i]
        if r.route >= 0:  # READY when last routed (else no longer, or not yet, in the table)
            self._load(r, -1)
        if r.in_flight == 0:
            r.busy_seconds += now - r.busy_since
            if r.state is ReplicaState.TERMINATING:
                self.cluster.drained(r, now)
                self.cluster.place(now)
        self._dispatch()

    # --- periodic ---

    def _queue_depth(self) -> int:
        """Requests waiting as vLLM counts them (`num_requests_waiting`): at the router,
        and on a replica those not begun. With chunked prefill a prompt that has had a
        share of a step is running, however much is left; without, all but the one
        prefilling wait."""
        if self.chunked:
            waiting = 0
            for r in self.cluster.replicas:
                for chunk in r.chunks:
                    if chunk.first_chunk_at != chunk.first_chunk_at:  # NaN: no share yet
                        waiting += 1
        else:
            waiting = sum(r.prefilling - 1 for r in self.cluster.replicas if r.prefilling > 1)
        return self.arrived - self.head + waiting

    def _scrape(self) -> None:
        now = self.now
        started = [(r.name, r.busy_total(now)) for r in self.cluster.replicas if r.node is not None]
        self.pipeline.scrape(
            now,
            arrived=self.arrived,
            completed=self.completed,
            queue_depth=self._queue_depth(),
            in_flight=sum(r.in_flight for r in self.cluster.replicas),
            busy_seconds=started,
        )
        self._post(now + self.config.pipeline.scrape_interval_seconds, _SCRAPE)

    def _tick(self) -> None:
        now = self.now
        replicas = tuple(r.observed() for r in self.cluster.replicas)
        free = self.cluster.free_gpus(now)
        obs = self.pipeline.history.observe(now, replicas, node_free_gpus=free)
        decision = self.policy.decide(obs)
        desired = self.workload.clamp(decision.desired)
        if desired != self.desired:
            self.scale_events += 1
        self.desired = desired
        self.decisions.append(
            DecisionRecord(
                t=now, desired=desired, reason=str(decision.reason), message=decision.message
            )
        )
        self.cluster.set_desired(desired, now)
        self.cluster.set_headroom(max(0, decision.headroom))
        self.cluster.place(now)
        self._dispatch()
        self._post(now + self.policy.interval_seconds, _TICK)

    def _timeline(self) -> None:
        self.timeline.sample(self._timeline_point())
        self._post(self.now + TIMELINE_STEP_SECONDS, _TIMELINE)

    def _timeline_point(self) -> tuple[float, int, int, int, int, int]:
        c = self.cluster
        return (
            self.now,
            self.desired,
            len(c.ready),
            c.holding_gpu(),
            c.billed_nodes(),
            self._queue_depth(),
        )

    def _check(self) -> None:
        self.cluster.check(self.now)
        assert 0 <= self.head <= self.arrived <= self.n
        for r in self.cluster.replicas:
            assert 0 <= r.in_flight <= self.slots, f"{r.name}: {r.in_flight} in flight"
            assert r.prompt_tokens >= 0 and (r.in_flight or not r.prompt_tokens), r.name
            if self.chunked:
                assert r.prefilling == len(r.chunks), f"{r.name}: prefill stage out of step"
                assert all(c.rate == 0 for c in r.chunks[r.chunk_active :]), f"{r.name}: rate"
        if self._routed == self.cluster.ready:
            assert self._loads == [r.in_flight for r in self._routed], "routing table stale"
            assert self._at == [self._loads.count(n) for n in range(self.slots + 1)], "counts"
            if self.by_tokens:
                assert self._keys == [self._key(r) for r in self._routed], "token keys stale"

    def result(self) -> RunResult:
        return build_result(
            policy=self.policy.name,
            trace=self.trace,
            workload=self.workload,
            prefill_tokens_per_second=self.prefill_rate,
            ttft=np.array(self.ttft),
            e2e=np.array(self.e2e),
            replica_gpu_seconds=self.cluster.replica_gpu_seconds,
            node_gpu_seconds=self.cluster.node_gpu_seconds,
            scale_events=self.scale_events,
            node_events=self.cluster.node_events,
            timeline=self.timeline.build(self.trace.arrival_seconds, TIMELINE_STEP_SECONDS),
            decisions=tuple(self.decisions),
        )
