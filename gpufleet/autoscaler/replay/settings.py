"""`gpufleet simulate`'s settings: flags, GPUFLEET_SIM_* env vars, defaults, and the command line.

Defaults are read from the simulator's own dataclasses (ServiceModel, ClusterModel, ...)
so the flags can never disagree with what a test or a sweep gets by constructing them
directly. The settings object stays here: the engine and policies receive the plain
dataclasses `workload()`, `sim_config()` and `tuning()` build. Not pure (pydantic).
"""

import shlex
from typing import Literal

from pydantic import ValidationInfo, field_validator

from gpufleet.autoscaler.core import factory as policies
from gpufleet.autoscaler.core import knob
from gpufleet.autoscaler.core.factory import Tuning
from gpufleet.autoscaler.core.workload import WorkloadConfig
from gpufleet.autoscaler.replay.core.model import (
    ClusterModel,
    PipelineModel,
    ReplayConfig,
    Routing,
    ServiceModel,
)
from gpufleet.settings import CommandSettings, setting

RUN = "what to run"
WORKLOAD = "workload"
SERVICE = "service model (one replica)"
CLUSTER = "cluster"
PIPELINE = "metrics pipeline"
POLICIES = "policies"

_SERVICE = ServiceModel()
_CLUSTER = ClusterModel()
_PIPELINE = PipelineModel()
_TUNING = Tuning()


class SimulateSettings(CommandSettings):
    """All `gpufleet simulate` settings. Field descriptions are the --help text."""

    trace: str = setting(
        "",
        "GPUFLEET_SIM_TRACE",
        "--trace",
        group=RUN,
        help="Request trace CSV(s) (TIMESTAMP,ContextTokens,GeneratedTokens, as the Azure LLM "
        "inference traces): repeat the flag or give a comma list. The 2023 Azure code and "
        "conversation traces are in the shared traces folder. --trace or --workload is "
        "required.",
    )
    workload_spec: str = setting(
        "",
        "GPUFLEET_SIM_WORKLOAD",
        "--workload",
        group=RUN,
        help="A generated trace, FAMILY[:key=value,...], seeded by --seed: flash (a crowd: "
        "height, length, at, ramp), diurnal (peak, period, phase), onoff (MMPP: height, on, "
        "off), quiet (busy, idle: scale to zero), longctx (heavy-tailed long prompts), or "
        "mix:of=A+B (A.key=value for one part). Every family takes duration, rate, prompt, "
        "prompt_sigma, output, output_sigma, tail, tail_min, tail_alpha, max_prompt, "
        "max_output. Repeat the flag for several (or separate them with ';').",
    )
    policy: str = setting(
        ",".join(policies.NAMES),
        "GPUFLEET_SIM_POLICY",
        "--policy",
        group=RUN,
        help="Policies to compare, comma separated: hpa, keda, gpufleet, oracle (a "
        "clairvoyant schedule the others are compared with; its lower bound is reported "
        "beside it).",
    )
    report: str = setting(
        "",
        "GPUFLEET_SIM_REPORT",
        "--report",
        group=RUN,
        help="Write report.md and PNG plots into this directory; empty prints the table.",
    )
    scale: int = setting(
        1,
        "GPUFLEET_SIM_SCALE",
        "--scale",
        group=RUN,
        help="Replay K shifted copies of each trace at once (K times the load), up to 1000.",
        ge=1,
        le=1000,
    )
    seed: int = setting(
        0,
        "GPUFLEET_SIM_SEED",
        "--seed",
        group=RUN,
        help="Seed of the --scale copies' jitter and of the --workload generator; the same "
        "seed gives the same numbers, byte for byte.",
        ge=0,
    )
    sweep: bool = setting(
        False,
        "GPUFLEET_SIM_SWEEP",
        "--sweep",
        group=RUN,
        help="Vary each policy's main knob (HPA target, KEDA queue target, our target "
        "attainment) and report SLO attainment against billed GPU-hours as Pareto fronts.",
    )
    jobs: int = setting(
        0,
        "GPUFLEET_SIM_JOBS",
        "--jobs",
        group=RUN,
        help="Sweep runs in parallel, one process each; 0 means one per CPU.",
        ge=0,
    )
    progress: bool = setting(
        True,
        "GPUFLEET_SIM_PROGRESS",
        "--progress",
        group=RUN,
        help="Progress bar on stderr while a run goes (only on a terminal).",
    )
    warm_start: bool = setting(
        True,
        "GPUFLEET_SIM_WARM_START",
        "--warm-start",
        group=WORKLOAD,
        help="Start every run with the replicas the trace's first minutes need instead of "
        "--min-replicas: the fewest that, held from the start, serve 99% of the feasible "
        "requests arriving before a cold start plus node provisioning. No policy can add "
        "capacity sooner, so a cold start only loses the same early requests under every "
        "policy.",
    )
    slo_ttft_seconds: float = setting(
        2.0,
        "GPUFLEET_SIM_SLO_TTFT_SECONDS",
        "--slo-ttft-seconds",
        group=WORKLOAD,
        help="Time-to-first-token SLO; attainment is the fraction of requests within it.",
        gt=0,
    )
    min_replicas: int = setting(
        1,
        "GPUFLEET_SIM_MIN_REPLICAS",
        "--min-replicas",
        group=WORKLOAD,
        help="Fewest replicas any policy may keep; 0 allows scale to zero.",
        ge=0,
    )
    max_replicas: int = setting(
        200,
        "GPUFLEET_SIM_MAX_REPLICAS",
        "--max-replicas",
        group=WORKLOAD,
        help="Most replicas any policy may ask for; far above what the Azure traces need, so "
        "it never caps a policy.",
        ge=1,
    )
    cold_start_seconds: float = setting(
        _CLUSTER.cold_start_seconds,
        "GPUFLEET_SIM_COLD_START_SECONDS",
        "--cold-start-seconds",
        group=CLUSTER,
        help="Replica scheduled to serving: image pull, weights, warm-up. 60 s assumes a cached "
        "image and fast weight loading; real pods take 1-7 min.",
        ge=0,
    )
    node_provision_seconds: float = setting(
        _CLUSTER.node_provision_seconds,
        "GPUFLEET_SIM_NODE_PROVISION_SECONDS",
        "--node-provision-seconds",
        group=CLUSTER,
        help="Node requested to schedulable (Karpenter or Cluster Autoscaler): 80-120 s of boot "
        "plus GPU driver and device plugin start.",
        ge=0,
    )
    gpus_per_node: int = setting(
        _CLUSTER.gpus_per_node,
        "GPUFLEET_SIM_GPUS_PER_NODE",
        "--gpus-per-node",
        group=CLUSTER,
        help="GPUs per node; a node bills all of them from launch to removal. gpufleet "
        "knows it as its pool's node size: which GPUs are idle on nodes paid for.",
        ge=1,
    )
    node_idle_seconds: float = setting(
        _CLUSTER.node_idle_seconds,
        "GPUFLEET_SIM_NODE_IDLE_SECONDS",
        "--node-idle-seconds",
        group=CLUSTER,
        help="An empty node is removed after this long, as Karpenter's consolidateAfter or Cluster "
        "Autoscaler's scale-down-unneeded-time do. Until then it is billed, and gpufleet sees its "
        "free GPUs as it sees a NodePool's nodes live.",
        ge=0,
    )
    batch_slots: int = setting(
        _SERVICE.batch_slots,
        "GPUFLEET_SIM_BATCH_SLOTS",
        "--batch-slots",
        group=SERVICE,
        help="Concurrent sequences per replica (vLLM max_num_seqs); gpufleet is told it as "
        "the workload's batch size, as an operator would configure it.",
        ge=1,
    )
    prefill_tokens_per_second: float = setting(
        _SERVICE.prefill_tokens_per_second,
        "GPUFLEET_SIM_PREFILL_TOKENS_PER_SECOND",
        "--prefill-tokens-per-second",
        group=SERVICE,
        help="Prompt tokens one replica prefills per second (compute-bound; an 8B model on an "
        "H100).",
        ge=1,
    )
    decode_seconds_per_token: float = setting(
        _SERVICE.decode_seconds_per_token,
        "GPUFLEET_SIM_DECODE_SECONDS_PER_TOKEN",
        "--decode-seconds-per-token",
        group=SERVICE,
        help="Seconds per output token with one sequence in the batch; it grows with the "
        "batch, as memory-bound decode does.",
        gt=0,
        le=60,
    )
    chunked_prefill: bool = setting(
        _SERVICE.chunked_prefill,
        "GPUFLEET_SIM_CHUNKED_PREFILL",
        "--chunked-prefill",
        group=SERVICE,
        help="Split prefills into chunks under a per-step token budget shared with the "
        "decodes, as vLLM V1 does; off: one prompt at a time, FIFO.",
    )
    max_num_batched_tokens: int = setting(
        _SERVICE.max_num_batched_tokens,
        "GPUFLEET_SIM_MAX_NUM_BATCHED_TOKENS",
        "--max-num-batched-tokens",
        group=SERVICE,
        help="Tokens per engine step with chunked prefill (vLLM max_num_batched_tokens; its "
        "V1 default for the OpenAI server on an 80 GB GPU); must exceed --batch-slots.",
        ge=2,
    )
    long_prefill_token_threshold: int = setting(
        _SERVICE.long_prefill_token_threshold,
        "GPUFLEET_SIM_LONG_PREFILL_TOKEN_THRESHOLD",
        "--long-prefill-token-threshold",
        group=SERVICE,
        help="Most tokens one prompt's chunk takes per step (vLLM long_prefill_token_threshold), "
        "leaving the rest to the prompts behind it; 0: no cap.",
        ge=0,
    )
    routing: Routing = setting(
        _SERVICE.routing,
        "GPUFLEET_SIM_ROUTING",
        "--routing",
        group=SERVICE,
        help="How the router picks a ready replica for a request: least-in-flight (the "
        "fewest requests in flight, a proxy's least-request balancing) or least-tokens (the "
        "fewest prompt tokens in flight, as an inference gateway's KV-cache-aware endpoint "
        "picker does: a short prompt avoids a replica busy with a long one).",
    )
    scrape_interval_seconds: float = setting(
        _PIPELINE.scrape_interval_seconds,
        "GPUFLEET_SIM_SCRAPE_INTERVAL_SECONDS",
        "--scrape-interval-seconds",
        group=PIPELINE,
        help="Serving metrics and GPU exporter scrape interval (the gpufleet exporter collects "
        "every 5 s).",
        gt=0,
    )
    hpa_target_util: float = setting(
        _TUNING.hpa_target_util,
        "GPUFLEET_SIM_HPA_TARGET_UTIL",
        "--hpa-target-util",
        group=POLICIES,
        help="HPA target average GPU utilization, percent.",
        gt=0,
        le=100,
    )
    keda_queue_target: float = setting(
        _TUNING.keda_queue_target,
        "GPUFLEET_SIM_KEDA_QUEUE_TARGET",
        "--keda-queue-target",
        group=POLICIES,
        help="KEDA target queued requests per replica (AverageValue).",
        gt=0,
    )
    keda_polling_interval_seconds: float = setting(
        _TUNING.keda_polling_interval_seconds,
        "GPUFLEET_SIM_KEDA_POLLING_INTERVAL_SECONDS",
        "--keda-polling-interval-seconds",
        group=POLICIES,
        help="KEDA pollingInterval.",
        gt=0,
    )
    keda_min_replica_count: int | None = setting(
        None,
        "GPUFLEET_SIM_KEDA_MIN_REPLICA_COUNT",
        "--keda-min-replica-count",
        group=POLICIES,
        help="KEDA minReplicaCount; 0 scales to zero after cooldownPeriod (300 s) without "
        "work. Unset: --min-replicas, as for every policy.",
        ge=0,
    )
    keda_metric_type: Literal["AverageValue", "Value"] = setting(
        "AverageValue",
        "GPUFLEET_SIM_KEDA_METRIC_TYPE",
        "--keda-metric-type",
        group=POLICIES,
        help="KEDA trigger metricType: AverageValue (queue per replica, KEDA's default) or "
        "Value (the whole queue against the target, scaling the ready replicas).",
    )

    gpufleet_fill_nodes: bool = setting(
        _TUNING.gpufleet_fill_nodes,
        "GPUFLEET_SIM_GPUFLEET_FILL_NODES",
        "--gpufleet-fill-nodes",
        group=POLICIES,
        help="Let gpufleet fill the idle GPUs of the nodes its replicas need anyway with warm "
        "replicas (the simulated workload owns its nodes, and a node bills all its GPUs).",
    )
    gpufleet_placeholders: bool = setting(
        _TUNING.gpufleet_placeholders,
        "GPUFLEET_SIM_GPUFLEET_PLACEHOLDERS",
        "--gpufleet-placeholders",
        group=POLICIES,
        help="Let gpufleet keep node headroom as placeholder pods (the live controller's "
        "nodePool.placeholders): low-priority pods holding one replica's GPUs each, so nodes "
        "launch before the replicas need them and replicas preempt them; off: purely "
        "reactive nodes.",
    )
    gpufleet_headroom: float | None = setting(
        None,
        "GPUFLEET_SIM_GPUFLEET_HEADROOM",
        "--gpufleet-headroom",
        group=POLICIES,
        help="gpufleet's spare capacity over predicted demand (0.25: replicas run at 80% of "
        "their learned rate); unset keeps the policy's default (0.4).",
        ge=0,
    )
    gpufleet_target_attainment: float | None = setting(
        None,
        "GPUFLEET_SIM_GPUFLEET_TARGET_ATTAINMENT",
        "--gpufleet-target-attainment",
        group=POLICIES,
        help="gpufleet's one knob: the share of requests that must meet the TTFT SLO "
        "(0.5-0.99999; 0.99: its default settings; 0.999 stands capacity for crowds it has "
        "not seen; below 0.9 it buys no node for a crowd it cannot serve in time). "
        "It sets the headroom too, so not with --gpufleet-headroom.",
        ge=knob.MIN_TARGET,
        le=knob.MAX_TARGET,
    )

    @field_validator("policy")
    @classmethod
    def _known_policies(cls, value: str) -> str:
        names = _split(value)
        if not names:
            raise ValueError("no policy given")
        policies.check_names(names)
        return ",".join(names)

    @field_validator("max_replicas")
    @classmethod
    def _max_at_least_min(cls, value: int, info: ValidationInfo) -> int:
        low = info.data.get("min_replicas")
        if low is not None and value < low:
            raise ValueError(f"is below --min-replicas ({low})")
        return value

    @field_validator("gpufleet_target_attainment")
    @classmethod
    def _one_gpufleet_knob(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is not None and info.data.get("gpufleet_headroom") is not None:
            raise ValueError("sets the headroom itself: give it or --gpufleet-headroom")
        return value

    @field_validator("max_num_batched_tokens")
    @classmethod
    def _budget_above_slots(cls, value: int, info: ValidationInfo) -> int:
        # vLLM refuses the same: the decodes alone would fill every step.
        slots = info.data.get("batch_slots", _SERVICE.batch_slots)
        if info.data.get("chunked_prefill", True) and value <= slots:
            raise ValueError(f"must exceed --batch-slots ({slots}) with chunked prefill")
        return value

    @property
    def trace_paths(self) -> tuple[str, ...]:
        return _split(self.trace)

    @property
    def workload_specs(self) -> tuple[str, ...]:
        return tuple(spec.strip() for spec in self.workload_spec.split(";") if spec.strip())

    @property
    def policy_names(self) -> tuple[str, ...]:
        return _split(self.policy)

    def workload(self) -> WorkloadConfig:
        return WorkloadConfig(
            name="llm",
            min_replicas=self.min_replicas,
            max_replicas=self.max_replicas,
            slo_ttft_seconds=self.slo_ttft_seconds,
            cold_start_seconds=self.cold_start_seconds,
            node_provision_seconds=self.node_provision_seconds,
            gpus_per_node=self.gpus_per_node,
            batch_slots=self.batch_slots,
        )

    def sim_config(self) -> ReplayConfig:
        return ReplayConfig(
            service=ServiceModel(
                batch_slots=self.batch_slots,
                prefill_tokens_per_second=self.prefill_tokens_per_second,
                decode_seconds_per_token=self.decode_seconds_per_token,
                chunked_prefill=self.chunked_prefill,
                max_num_batched_tokens=self.max_num_batched_tokens,
                long_prefill_token_threshold=self.long_prefill_token_threshold,
                routing=self.routing,
            ),
            cluster=ClusterModel(
                cold_start_seconds=self.cold_start_seconds,
                node_provision_seconds=self.node_provision_seconds,
                gpus_per_node=self.gpus_per_node,
                node_idle_seconds=self.node_idle_seconds,
            ),
            pipeline=PipelineModel(scrape_interval_seconds=self.scrape_interval_seconds),
            # The workload's floor is up and serving when the trace starts.
            initial_replicas=max(ReplayConfig().initial_replicas, self.min_replicas),
        )

    def tuning(self) -> Tuning:
        return Tuning(
            hpa_target_util=self.hpa_target_util,
            keda_queue_target=self.keda_queue_target,
            keda_polling_interval_seconds=self.keda_polling_interval_seconds,
            keda_min_replica_count=self.keda_min_replica_count,
            keda_metric_type=self.keda_metric_type,
            gpufleet_headroom=self.gpufleet_headroom,
            gpufleet_target_attainment=self.gpufleet_target_attainment,
            gpufleet_fill_nodes=self.gpufleet_fill_nodes,
            gpufleet_placeholders=self.gpufleet_placeholders,
        )


def _split(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


# Output-only settings: they do not change the numbers, so the reproduce line leaves them out.
_NOT_REPRODUCED = frozenset({"report", "progress", "jobs"})


def command_line(settings: SimulateSettings) -> str:
    """The `gpufleet simulate` command that reproduces these numbers, wherever they came from.

    Every setting that differs from its default is spelled as its flag, so values taken from
    env vars are reproduced too; output-only settings (report directory, progress, jobs) are
    left out.
    """
    words = ["gpufleet", "simulate"]
    for name, info in SimulateSettings.model_fields.items():
        value = getattr(settings, name)
        if name in _NOT_REPRODUCED or value == info.default:
            continue
        flag = info.json_schema_extra["flags"][0]  # type: ignore[index]
        if isinstance(value, bool):
            words.append(flag if value else f"--no-{flag[2:]}")
        else:
            words += [flag, str(value)]
    return shlex.join(words)


def merge_repeated(argv: list[str], flag: str, *, sep: str = ",") -> list[str]:
    """`argv` with every `FLAG X` / `FLAG=X` joined into one `FLAG X<sep>Y` where the first
    was.

    argparse keeps only the last value of a repeated option; a repeatable flag is easier to
    script (`--trace a.csv --trace b.csv`) than a comma list.
    """
    values: list[str] = []
    out: list[str] = []
    first = -1
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            out += argv[i:]
            break
        if word == flag and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            values.append(argv[i + 1])
            i += 2
        elif word.startswith(flag + "="):
            values.append(word[len(flag) + 1 :])
            i += 1
        else:
            out.append(word)
            i += 1
            continue
        if first < 0:
            first = len(out)
    if first >= 0:
        out[first:first] = [flag, sep.join(values)]
    return out
