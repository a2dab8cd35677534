"""What a policy sees on one tick: recent signal samples, per-pod GPU telemetry, replicas.

Plain data only. Every signal is what the metrics pipeline returned at `now`, so it is
already late by the scrape interval plus rule evaluation and query time; a policy must not
assume fresher data. An empty `Series` means the metric is missing (a failed query, no
series yet), which is different from a value of 0.
"""

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple


class Series(NamedTuple):
    """Recent samples of one signal, oldest first; `times` are seconds on the `now` clock."""

    times: tuple[float, ...] = ()
    values: tuple[float, ...] = ()

    def latest(self) -> float | None:
        """The newest value, or None when the signal is missing."""
        return self.values[-1] if self.values else None


MISSING = Series()  # a signal the pipeline did not return (immutable, so safe to share)


class Buckets(NamedTuple):
    """Recent samples of one histogram signal, oldest first: each sample's cumulative
    (upper bound, per second) buckets sorted by bound, +inf last, as PromQL's `rate` of
    a histogram's `_bucket` series summed by `le` gives them."""

    times: tuple[float, ...] = ()
    values: tuple[tuple[tuple[float, float], ...], ...] = ()


NO_BUCKETS = Buckets()


class ReplicaState(StrEnum):
    STARTING = "starting"  # scheduled or waiting for a node; not serving yet (cold start)
    READY = "ready"  # serving requests
    TERMINATING = "terminating"  # draining its in-flight requests; takes no new ones


@dataclass(frozen=True, slots=True, kw_only=True)
class Replica:
    name: str
    state: ReplicaState
    since: float  # when it entered `state`, on the `now` clock
    created: float  # when the replica was requested, on the `now` clock
    # When it was bound to a node (PodScheduled), on the `now` clock; None while it waits
    # for one, or where unknown. A starting replica on a node serves a cold start after.
    scheduled_since: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PodTelemetry:
    """One replica's GPU telemetry as the exporter reports it; None where not reported."""

    pod: str
    gpu_util_percent: float | None = None  # DCGM_FI_DEV_GPU_UTIL: a duty cycle, not work done
    fb_used_mib: float | None = None  # DCGM_FI_DEV_FB_USED: flat for vLLM/TGI (preallocated)
    gr_engine_active_ratio: float | None = None  # DCGM_FI_PROF_GR_ENGINE_ACTIVE, where present


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """One workload's signals at `now`. Totals are over all its replicas."""

    now: float
    arrival_rate: Series = MISSING  # requests/s arriving at the workload
    queue_depth: Series = MISSING  # requests waiting for a batch slot or for prefill
    in_flight: Series = MISSING  # requests holding a batch slot (prefill or decode)
    completion_rate: Series = MISSING  # requests/s finished
    prompt_tokens_rate: Series = MISSING  # prompt tokens/s prefilled
    ttft_p90_seconds: Series = MISSING  # time to first token, p90 over each sample's window
    # TTFT seconds summed over the first tokens of each sample's window, per second (the TTFT
    # histogram's `_sum` rate), aligned with `prompt_tokens_rate`: the same requests' prompts.
    ttft_sum_rate: Series = MISSING
    # Prefill seconds summed over the same first tokens, per second (vLLM's
    # `vllm:request_prefill_time_seconds` histogram's `_sum` rate): TTFT without the wait
    # for the prefill stage, aligned with `prompt_tokens_rate`.
    prefill_sum_rate: Series = MISSING
    # Requests/s per prompt length, cumulative by upper bound in tokens (vLLM's
    # `vllm:request_prompt_tokens` histogram, observed as each request finishes): the
    # distribution of prefill work per request, which a mean hides.
    prompt_tokens_buckets: Buckets = NO_BUCKETS
    pods: tuple[PodTelemetry, ...] = ()
    replicas: tuple[Replica, ...] = ()
    # Each ready node of the workload's pool: its GPUs that no pod holds, as the API server
    # shows them now; None where unknown. A node stays billed for a while after it empties,
    # and a replica placed there starts without waiting for a node.
    node_free_gpus: tuple[int, ...] | None = None
    # Replicas per state, counted once: a policy asks several times a tick, and a pass
    # over every replica per question was a tenth of a simulated x10 run.
    _counts: dict[ReplicaState, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        counts = dict.fromkeys(ReplicaState, 0)
        for r in self.replicas:
            counts[r.state] += 1
        object.__setattr__(self, "_counts", counts)

    def count(self, state: ReplicaState) -> int:
        return self._counts[state]

    @property
    def current_replicas(self) -> int:
        """Replicas the workload has asked for and not yet given up: starting + ready."""
        return self.count(ReplicaState.STARTING) + self.count(ReplicaState.READY)
