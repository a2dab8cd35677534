"""Every constant of the simulated world, with defaults for an 8B model on one H100 each.

The defaults approximate vLLM serving a Llama-3-8B-class model on one H100 80GB per
replica; README's "Simulator" section documents them. They are plain dataclasses so a
sweep or a test can replace one field with `dataclasses.replace`.
"""

from dataclasses import dataclass, field
from typing import Literal, get_args

# How the router in front of the replicas picks one for a request (`ServiceModel.routing`):
# - least-in-flight: the fewest requests in flight, as a proxy's least-request balancing
#   (Envoy's LEAST_REQUEST without its random choice);
# - least-tokens: the fewest prompt tokens in flight, as an inference gateway's endpoint
#   picker scores replicas by the KV cache their requests fill (the Gateway API Inference
#   Extension's KV-cache-utilization scorer), so a short prompt avoids a replica busy
#   with a long one.
# Ties go to the fewest in flight, then to the oldest replica.
Routing = Literal["least-in-flight", "least-tokens"]
ROUTINGS: tuple[Routing, ...] = get_args(Routing)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceModel:
    """One replica: a prefill stage shared by all its requests, then batch-slot decode.

    A request takes a batch slot, waits for the replica's prefill stage (compute-bound),
    gets its first token when its prefill ends, then decodes its output tokens while holding
    the slot. Time per output token grows with the replica's batch occupancy, as
    memory-bound decode does.

    Without chunked prefill the stage serves one prompt at a time, FIFO. With it (vLLM V1's
    scheduler, its default) every engine step has a budget of `max_num_batched_tokens`:
    each decoding sequence takes one token of it, then the prompts being prefilled take
    chunks in arrival order, each at most `long_prefill_token_threshold` tokens (0: no
    cap), so short prompts share a step with a long one's chunk instead of waiting for all
    of it. A step costs its tokens at `prefill_tokens_per_second`.
    """

    batch_slots: int = 64  # concurrent sequences per replica (vLLM max_num_seqs-like)
    prefill_tokens_per_second: float = 15_000.0  # compute-bound prefill throughput
    decode_seconds_per_token: float = 0.008  # time per output token with one sequence
    decode_seconds_per_token_per_sequence: float = 0.0002  # added per other sequence in batch
    chunked_prefill: bool = True  # vLLM V1 always chunks prefills
    # vLLM V1's default for its OpenAI server on a GPU with >= 70 GiB (EngineArgs).
    max_num_batched_tokens: int = 8192
    long_prefill_token_threshold: int = 0  # vLLM's default: a running prefill takes the rest
    routing: Routing = "least-in-flight"  # `ROUTINGS`: how the router picks a replica


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterModel:
    cold_start_seconds: float = 60.0  # replica scheduled -> serving: image, weights, warm-up
    node_provision_seconds: float = 180.0  # node requested -> schedulable (Karpenter/CA)
    gpus_per_node: int = 8
    node_idle_seconds: float = 300.0  # an empty node is removed after this long
    max_nodes: int = 64
    gpus_per_replica: int = 1

    @property
    def lead_seconds(self) -> float:
        """A new node requested -> a replica on it serving: the lead time no policy beats."""
        return self.node_provision_seconds + self.cold_start_seconds


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineModel:
    """How late the signals are: scrape, then rule evaluation and query."""

    scrape_interval_seconds: float = 5.0  # serving metrics and exporter scrape
    evaluation_seconds: float = 1.0  # Prometheus ingest + recording-rule evaluation
    query_seconds: float = 0.5  # the policy's (or adapter's) query
    # How much history an observation carries: as much as the policies' longest window
    # (gpufleet's 30-minute peak memory), as a live controller's query would fetch.
    history_seconds: float = 1800.0

    @property
    def delay_seconds(self) -> float:
        """How old the newest sample is when the policy reads it, past its scrape."""
        return self.evaluation_seconds + self.query_seconds


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayConfig:
    """The world; the SLO is the workload's (`WorkloadConfig.slo_ttft_seconds`)."""

    service: ServiceModel = field(default_factory=ServiceModel)
    cluster: ClusterModel = field(default_factory=ClusterModel)
    pipeline: PipelineModel = field(default_factory=PipelineModel)
    initial_replicas: int = 1  # ready (on ready nodes) at time 0
