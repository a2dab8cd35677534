"""The simulator engine: service times, delays, GPU accounting, clamping and determinism."""

import dataclasses
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest
from helpers import TRACES
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.autoscaler.core.observation import Observation, ReplicaState
from gpufleet.autoscaler.core.policy import Decision, Reason
from gpufleet.autoscaler.core.workload import WorkloadConfig
from gpufleet.autoscaler.replay.core.cluster import Cluster, Timer
from gpufleet.autoscaler.replay.core.engine import SimulationError, simulate
from gpufleet.autoscaler.replay.core.model import ClusterModel, ReplayConfig, ServiceModel
from gpufleet.autoscaler.replay.core.oracle import run_oracle
from gpufleet.autoscaler.replay.core.result import RunResult
from gpufleet.autoscaler.replay.core.trace import Trace, trace_from_arrays
from gpufleet.autoscaler.replay.trace_file import load_trace

WORKLOAD = WorkloadConfig(name="w", min_replicas=0, max_replicas=100)


@dataclass
class Script:
    """A policy whose desired count (and headroom) is a function of time; records what it saw."""

    plan: Callable[[float], int | tuple[int, int]]
    name: str = "script"
    interval_seconds: float = 5.0
    seen: list[Observation] = field(default_factory=list)

    def decide(self, obs: Observation) -> Decision:
        self.seen.append(obs)
        planned = self.plan(obs.now)
        desired, headroom = planned if isinstance(planned, tuple) else (planned, 0)
        return Decision(
            desired=desired, reason=Reason.STEADY, message="scripted", headroom=headroom
        )


def fixed(n: int) -> Script:
    return Script(lambda _: n, name=f"fixed-{n}")


def poisson_trace(*, rate: float, seconds: float, seed: int = 1, name: str = "poisson") -> Trace:
    rng = np.random.default_rng(seed)
    count = rng.poisson(rate * seconds)
    return trace_from_arrays(
        np.sort(rng.uniform(0, seconds, count)),
        rng.integers(100, 3000, count),
        rng.integers(1, 300, count),
        name=name,
    )


def run(trace: Trace, policy: Script, **config: object) -> RunResult:
    workload = config.pop("workload", WORKLOAD)
    return simulate(
        trace, policy, workload=workload, config=ReplayConfig(**config), check_invariants=True
    )


def ready_since(policy: Script, name: str) -> float:
    last = policy.seen[-1]
    (replica,) = [r for r in last.replicas if r.name == name]
    assert replica.state is ReplicaState.READY
    return replica.since


@pytest.mark.parametrize(
    ("policy", "initial"),
    [
        pytest.param(fixed(1), 1, id="one-replica-overloaded"),
        pytest.param(fixed(4), 4, id="four-replicas"),
        pytest.param(Script(lambda t: 1 + int(t // 60) % 5), 1, id="sawtooth-scaling"),
        pytest.param(Script(lambda t: (int(t // 90) % 3, 2)), 0, id="to-zero-and-back"),
    ],
)
def test_every_request_served_exactly_once(policy: Script, initial: int) -> None:
    trace = poisson_trace(rate=20, seconds=600)
    result = run(trace, policy, initial_replicas=initial)
    assert result.requests == len(trace)
    assert np.isfinite(result.ttft_seconds).all() and np.isfinite(result.e2e_seconds).all()
    assert (result.ttft_seconds > 0).all()
    assert (result.e2e_seconds >= result.ttft_seconds).all()
    # Prefill alone bounds TTFT from below.
    assert (result.ttft_seconds >= trace.prompt_tokens / 15_000.0 - 1e-9).all()


def test_lone_request_ttft_is_prompt_over_prefill_rate() -> None:
    trace = trace_from_arrays([0.0], [1500], [100])
    result = run(trace, fixed(1))
    assert result.ttft_seconds[0] == pytest.approx(1500 / 15_000.0)
    assert result.e2e_seconds[0] == pytest.approx(0.1 + 100 * 0.008)
    assert result.slo_attainment == 1.0


def test_prefill_is_fifo_and_decode_slows_with_occupancy() -> None:
    service = ServiceModel(
        chunked_prefill=False,
        prefill_tokens_per_second=1000.0,
        decode_seconds_per_token=0.01,
        decode_seconds_per_token_per_sequence=0.005,
    )
    trace = trace_from_arrays([0.0, 0.0], [1000, 1000], [200, 100])
    result = run(trace, fixed(1), service=service)
    assert result.ttft_seconds.tolist() == pytest.approx([1.0, 2.0])
    # The second starts decoding while the first still decodes: occupancy 2.
    assert result.e2e_seconds.tolist() == pytest.approx([1.0 + 2.0, 2.0 + 100 * 0.015])


def test_prefill_seconds_exclude_the_wait_that_ttft_includes() -> None:
    # Two 1000-token prompts at once, 1000 tokens/s: TTFTs 1 s and 2 s (3 s summed), yet
    # each prefilled for 1 s (2 s summed), as vllm:request_prefill_time_seconds counts.
    service = ServiceModel(chunked_prefill=False, prefill_tokens_per_second=1000.0)
    policy = fixed(1)
    run(trace_from_arrays([0.0, 0.0, 30.0], [1000, 1000, 1], [1, 1, 1]), policy, service=service)
    obs = policy.seen[-1]
    interval = obs.prompt_tokens_rate.times[1] - obs.prompt_tokens_rate.times[0]
    assert sum(obs.ttft_sum_rate.values) * interval == pytest.approx(3.0, abs=0.01)
    assert sum(obs.prefill_sum_rate.values) * interval == pytest.approx(2.0, abs=0.01)
    assert obs.prefill_sum_rate.times == obs.prompt_tokens_rate.times


def test_the_prompt_histogram_counts_each_prompt_once_in_vllms_buckets() -> None:
    # vllm:request_prompt_tokens: le is inclusive (1000 tokens fall in le="1000.0").
    policy = fixed(1)
    run(trace_from_arrays([0.0, 0.0, 1.0, 30.0], [1000, 1001, 60000, 1], [1, 1, 1, 1]), policy)
    obs = policy.seen[-1]
    samples = obs.prompt_tokens_buckets
    assert samples.times == obs.prompt_tokens_rate.times
    interval = samples.times[1] - samples.times[0]
    totals: dict[float, float] = {}
    for sample in samples.values:
        for bound, rate in sample:
            totals[bound] = totals.get(bound, 0.0) + rate * interval
    # Less the 1-token prompt at 30 s (le="1.0"), which the last observation may not show.
    bounds = (500.0, 1000.0, 2000.0, 50000.0, 100000.0, math.inf)
    assert [totals[b] - totals[1.0] for b in bounds] == pytest.approx([0, 1, 2, 2, 3, 3])


def test_chunked_prefill_batches_prompts_that_fit_one_step() -> None:
    # vLLM V1: both 1000-token prompts fit one 8192-token step of 2000 tokens at 1000
    # tokens/s, so both get their first token at 2 s (FIFO gives 1 s and 2 s).
    service = ServiceModel(prefill_tokens_per_second=1000.0)
    result = run(trace_from_arrays([0.0, 0.0], [1000, 1000], [1, 1]), fixed(1), service=service)
    assert result.ttft_seconds.tolist() == pytest.approx([2.0, 2.0])


@pytest.mark.parametrize(
    ("threshold", "ttfts"),
    [
        # No cap (vLLM's default): the running long prompt takes every step's budget; the
        # short one waits for it, as without chunking.
        pytest.param(0, [20.0, 20.0], id="no-threshold"),
        # Capped at 1000 tokens a step, the long prompt leaves room: the short one's 100
        # tokens share a 1100-token step (1.1 s); the long one loses 100 tokens of pace
        # meanwhile and still ends at 20.1 s.
        pytest.param(1000, [20.1, 1.1], id="threshold-1000"),
    ],
)
def test_chunked_prefill_lets_a_short_prompt_pass_a_long_one_only_under_a_threshold(
    threshold: int, ttfts: list[float]
) -> None:
    service = ServiceModel(prefill_tokens_per_second=1000.0, long_prefill_token_threshold=threshold)
    trace = trace_from_arrays([0.0, 0.1], [20_000, 100], [1, 1])
    result = run(trace, fixed(1), service=service)
    # Within 1 ms: the long one's single decode token shares the short one's last step.
    assert result.ttft_seconds.tolist() == pytest.approx(ttfts, abs=1e-3)


@pytest.mark.parametrize(
    ("routing", "third_ttft"),
    [
        # Both replicas hold one request: the tie goes to the first, where the third waits
        # for the long prompt's steps (20,000 tokens at 1000 tokens/s, no threshold).
        pytest.param("least-in-flight", pytest.approx(19.9, abs=0.01), id="least-in-flight"),
        # The second holds 100 prompt tokens to the first's 20,000: the third shares a step
        # with its one decoding sequence, 101 tokens at 1000 tokens/s.
        pytest.param("least-tokens", pytest.approx(0.101, abs=1e-6), id="least-tokens"),
    ],
)
def test_routing_by_prompt_tokens_keeps_a_short_prompt_off_a_long_prefill(
    routing: str, third_ttft: object
) -> None:
    service = ServiceModel(prefill_tokens_per_second=1000.0, routing=routing)  # type: ignore[arg-type]
    trace = trace_from_arrays([0.0, 0.1, 0.2], [20_000, 100, 100], [1, 1000, 1])
    result = run(trace, fixed(2), service=service, initial_replicas=2)
    assert result.ttft_seconds[1] == pytest.approx(0.1)  # the idle second replica either way
    assert result.ttft_seconds[2] == third_ttft


def test_an_unknown_routing_is_an_error() -> None:
    service = ServiceModel(routing="random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="routing must be one of least-in-flight, least-tokens"):
        run(trace_from_arrays([0.0], [1], [1]), fixed(1), service=service)


def test_chunked_prefill_shares_the_step_budget_with_decodes() -> None:
    # A budget of 3 tokens a step: the decoding sequence takes one, the prompt two, so the
    # prompt runs at 2/3 of 1000 tokens/s: 1.5 s for 1000 tokens.
    service = ServiceModel(
        batch_slots=2, max_num_batched_tokens=3, prefill_tokens_per_second=1000.0
    )
    trace = trace_from_arrays([0.0, 1.0], [1, 1000], [10_000, 1])
    result = run(trace, fixed(1), service=service)
    assert result.ttft_seconds[1] == pytest.approx(1.5)
    off = run(trace, fixed(1), service=dataclasses.replace(service, chunked_prefill=False))
    assert off.ttft_seconds[1] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("rate", "prompt"),
    [
        # Each once stopped the run (found on mix x10 at 0.996, tuning seed 1): the decode
        # sorts first at the instant, leaves the prompt at 0 or -1e-10 tokens, and the
        # prompt's own event goes stale; timed on its share, the stage then divided by a
        # zero step (1024) or waited forever (15000).
        pytest.param(1024.0, 1024, id="zero-step"),
        pytest.param(15_000.0, 1024, id="hung"),
        pytest.param(15_000.0, 2047, id="hung-2047"),
        pytest.param(1000.0, 999, id="zero-step-999"),
    ],
)
def test_chunked_prefill_finishes_a_prompt_due_as_a_decode_ends(rate: float, prompt: int) -> None:
    # The first request's 4 output tokens end at 1/rate + 2 s; the second arrives while it
    # decodes and shares each step with it, (1 + prompt) tokens at `rate`, so its prompt is
    # due at that same instant.
    service = ServiceModel(
        prefill_tokens_per_second=rate,
        decode_seconds_per_token=0.5,
        decode_seconds_per_token_per_sequence=0.0,
    )
    second = 1 / rate + 2.0 - (1 + prompt) / rate
    result = run(trace_from_arrays([0.0, second], [1, prompt], [4, 1]), fixed(1), service=service)
    assert result.ttft_seconds.tolist() == pytest.approx([1 / rate, (1 + prompt) / rate])


@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(1, 4), st.integers(1, 4)), min_size=2, max_size=6
    ),
    st.integers(1, 2),
)
@settings(max_examples=200, deadline=None)
def test_chunked_prefill_serves_every_request_when_events_coincide(
    requests: list[tuple[int, int, int]], replicas: int
) -> None:
    """On whole seconds (1 prompt token a second, 1 s per output token, arrivals on the
    second) decodes end at the instant prompts are due all the time: every request is
    served (the run would raise otherwise), none faster than its prompt alone takes."""
    service = ServiceModel(
        prefill_tokens_per_second=1.0,
        decode_seconds_per_token=1.0,
        decode_seconds_per_token_per_sequence=0.0,
        batch_slots=8,
        max_num_batched_tokens=64,
    )
    arrivals, prompts, outputs = zip(*sorted(requests), strict=True)
    trace = trace_from_arrays([float(a) for a in arrivals], list(prompts), list(outputs))
    result = run(trace, fixed(replicas), service=service, initial_replicas=replicas)
    assert (result.ttft_seconds >= np.array(prompts) - 1e-9).all()


def test_chunked_prefill_needs_a_budget_above_the_batch_slots() -> None:
    service = ServiceModel(batch_slots=8, max_num_batched_tokens=8)
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        run(trace_from_arrays([0.0], [1], [1]), fixed(1), service=service)


def test_attainment_is_also_reported_over_the_feasible_requests() -> None:
    # 45,000 tokens take 3 s on an idle replica at 15,000 tokens/s: past the 2 s SLO under
    # any schedule, so it counts against attainment but not against feasible attainment.
    trace = trace_from_arrays([0.0, 10.0, 20.0], [45_000, 100, 100], [1, 1, 1])
    result = run(trace, fixed(1))
    assert result.feasible_requests == 2
    assert result.slo_attainment == pytest.approx(2 / 3)
    assert result.feasible_attainment == 1.0


def test_batch_slots_bound_concurrency() -> None:
    service = ServiceModel(batch_slots=2, prefill_tokens_per_second=1e9)
    trace = trace_from_arrays([0.0, 0.0, 0.0], [1, 1, 1], [100, 100, 100])
    result = run(trace, fixed(1), service=service)
    # The third waits for the first slot to free: the first decodes alone (occupancy 1 at
    # its decode start), the second with occupancy 2.
    assert result.e2e_seconds[:2].tolist() == pytest.approx([0.8, 0.82], abs=1e-6)
    assert result.ttft_seconds[2] == pytest.approx(0.8, abs=1e-6)


def test_scale_up_beyond_a_node_waits_for_provisioning_and_cold_start() -> None:
    trace = trace_from_arrays([0.0, 400.0], [100, 100], [1, 1])
    policy = fixed(9)
    result = run(trace, policy)
    # Seven fit on the first node (cold start only); the ninth needs a new node.
    assert ready_since(policy, "w-1") == 60.0
    assert ready_since(policy, "w-7") == 60.0
    assert ready_since(policy, "w-8") == 180.0 + 60.0
    assert result.node_events == 1
    assert result.timeline.ready[result.timeline.t == 230.0] == 8
    assert result.timeline.ready[result.timeline.t == 240.0] == 9
    assert result.timeline.nodes.max() == 2


def test_a_starting_replica_shows_when_it_got_its_node() -> None:
    """What the policy sees of a replica still starting: bound to a node up (it serves a
    cold start later), or waiting for a node being provisioned (bound when it is up)."""
    trace = trace_from_arrays([0.0, 400.0], [100, 100], [1, 1])
    policy = fixed(9)
    run(trace, policy)

    def starting(at: float) -> dict[str, float | None]:
        (obs,) = [o for o in policy.seen if o.now == at]
        return {r.name: r.scheduled_since for r in obs.replicas if r.state is ReplicaState.STARTING}

    early = starting(30.0)
    assert early["w-1"] == 0.0 and early["w-8"] is None
    assert starting(200.0) == {"w-8": 180.0}


def test_idle_node_is_removed_and_billing_follows() -> None:
    trace = trace_from_arrays([0.0, 1000.0], [150, 150], [0, 0])
    result = run(trace, Script(lambda t: 9 if t < 400 else 1))
    assert result.node_events == 2  # one launch, one removal
    end = 1000.01
    assert result.node_gpu_hours == pytest.approx(8 * (end + 400 + 300) / 3600)
    assert result.replica_gpu_hours == pytest.approx((end + 7 * 400 + (400 - 180)) / 3600)
    assert result.timeline.nodes[result.timeline.t == 690.0] == 2
    assert result.timeline.nodes[result.timeline.t == 700.0] == 1


def test_the_policy_sees_an_emptied_node_free_until_it_is_removed() -> None:
    """The API server's view: each up node's free GPUs. The node launched for the ninth
    replica is up at 180 s; emptied at 400 s, it is billed and free until 700 s."""
    trace = trace_from_arrays([0.0, 1000.0], [150, 150], [0, 0])
    policy = Script(lambda t: 9 if t < 400 else 1)
    run(trace, policy)
    free = {o.now: o.node_free_gpus for o in policy.seen}
    assert free[0.0] == (7,)  # the one replica the run starts with
    assert free[150.0] == (0,)
    assert free[300.0] == (0, 7)
    assert free[600.0] == (7, 8)
    assert free[720.0] == (7,)


def test_placeholder_gpu_is_taken_at_once_by_a_real_replica() -> None:
    trace = trace_from_arrays([0.0, 600.0], [100, 100], [1, 1])
    policy = Script(lambda t: (1, 7) if t < 300 else (8, 7))
    result = run(trace, policy)
    assert ready_since(policy, "w-7") == 300.0 + 60.0  # no provisioning wait
    # The preempted placeholders went pending and made the cluster launch a node.
    assert result.node_events == 1
    assert result.timeline.nodes[result.timeline.t == 310.0] == 2


@pytest.mark.parametrize(
    ("desired", "bounds", "expected"),
    [
        pytest.param(1000, (1, 3), 3, id="above-max"),
        pytest.param(-5, (2, 3), 2, id="below-min"),
        pytest.param(0, (0, 3), 0, id="zero-allowed"),
    ],
)
def test_desired_is_clamped_to_min_max(
    desired: int, bounds: tuple[int, int], expected: int
) -> None:
    low, high = bounds
    workload = WorkloadConfig(name="w", min_replicas=low, max_replicas=high)
    policy = Script(lambda t: desired if t < 100 else max(low, 1))
    result = run(trace_from_arrays([0.0, 200.0], [100, 100], [1, 1]), policy, workload=workload)
    assert result.decisions[0].desired == expected
    assert max(result.timeline.replicas) <= high
    assert result.scale_events == (expected != 1) + (expected != max(low, 1))


def test_queued_requests_wait_for_activation_from_zero() -> None:
    trace = trace_from_arrays([0.0, 0.5], [150, 150], [1, 1])
    policy = Script(lambda t: 0)

    def activate(obs: Observation) -> Decision:
        waiting = obs.queue_depth.latest() or 0
        return Decision(desired=1 if waiting else 0, reason=Reason.ACTIVATE, message="")

    policy.decide = activate  # type: ignore[method-assign]
    result = run(trace, policy, initial_replicas=0)
    # Scraped at 5 s, visible at 6.5, acted on at the 10 s tick; node 180 s, cold start 60 s;
    # then both prompts share one 300-token step.
    assert result.ttft_seconds[0] == pytest.approx(10 + 180 + 60 + 0.02)
    assert result.node_events == 1


def test_a_policy_that_never_serves_is_an_error() -> None:
    never = Script(lambda _: 0, interval_seconds=600.0)  # few ticks: the run gives up after a day
    with pytest.raises(SimulationError, match="unserved"):
        simulate(
            trace_from_arrays([0.0], [1], [1]),
            never,
            workload=WORKLOAD,
            config=ReplayConfig(initial_replicas=0),
        )


def test_scale_down_drains_before_releasing_the_gpu() -> None:
    # A long request keeps replica w-1 busy; scaling to 1 removes the idle w-0 at once? No:
    # fewest in flight goes first, so w-0 (idle) goes and w-1 keeps serving.
    trace = trace_from_arrays([0.0, 0.1], [100, 100], [5000, 1])
    result = run(trace, Script(lambda t: 2 if t < 10 else 1), initial_replicas=2)
    assert result.e2e_seconds[0] == pytest.approx(100 / 15000 + 5000 * 0.008)
    assert result.replica_gpu_hours == pytest.approx((10 + result.e2e_seconds[0]) / 3600)


def test_observation_pipeline_delay_and_rates() -> None:
    trace = trace_from_arrays(np.arange(0, 100, 0.5), np.full(200, 150), np.full(200, 1))
    policy = fixed(1)
    run(trace, policy)
    obs = next(o for o in policy.seen if o.now == 50.0)
    # Scrapes every 5 s, visible 1.5 s later: the newest sample at t=50 is the one from 45.
    assert obs.arrival_rate.times[-1] == 45.0
    assert obs.arrival_rate.latest() == pytest.approx(2.0)
    assert obs.prompt_tokens_rate.latest() == pytest.approx(300.0)
    (pod,) = obs.pods
    assert pod.pod == "w-0" and pod.fb_used_mib == 73728.0
    busy_ratio = (150 / 15000 + 0.008) * 2  # two requests a second, each busy this long
    assert pod.gpu_util_percent == pytest.approx(100 * busy_ratio)
    assert pod.gr_engine_active_ratio == pytest.approx(busy_ratio)


def test_same_seed_same_result() -> None:
    trace = poisson_trace(rate=30, seconds=300)
    a = run(trace, Script(lambda t: 1 + int(t // 50) % 4))
    b = run(trace, Script(lambda t: 1 + int(t // 50) % 4))
    for f in dataclasses.fields(RunResult):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, y), f.name
        elif f.name == "timeline":
            for g in dataclasses.fields(x):
                assert np.array_equal(getattr(x, g.name), getattr(y, g.name)), g.name
        else:
            assert x == y, f.name


@pytest.mark.parametrize(
    ("service", "digest"),
    [
        pytest.param(ServiceModel(), "84264e16fe355a1f", id="chunked"),
        pytest.param(
            ServiceModel(long_prefill_token_threshold=512), "c6b066a2f38f5925", id="chunk-cap"
        ),
        pytest.param(ServiceModel(chunked_prefill=False), "82409fa8fba0800e", id="fifo-prefill"),
        # Routing by prompt tokens, from the engine that passed over the fleet per request;
        # at 4 slots replicas fill, so a full one's place in the ranking counts too.
        pytest.param(ServiceModel(routing="least-tokens"), "b94ab98f43526cff", id="least-tokens"),
        pytest.param(
            ServiceModel(routing="least-tokens", batch_slots=4),
            "003b116b87f2b78e",
            id="least-tokens-full",
        ),
    ],
)
def test_every_number_is_what_it_was_before_the_hot_paths_were_rewritten(
    service: ServiceModel, digest: str
) -> None:
    """Issue 17 §4: the engine's speed-ups (routing table, prefill budget's active prefix,
    scrape totals, the least-tokens ranking in C) change no bit of any result. The digests
    are of the engine before each, on a run that fills the step budget and moves replicas
    in and out of READY while busy. The chunked runs' digests moved once since, with the
    queue depth alone (prompts with a share of a step count as running, as in vLLM: the
    same digests without the queue depth, before and after)."""
    trace = poisson_trace(rate=12, seconds=600, seed=7)
    result = run(trace, Script(lambda t: 2 + int(t // 45) % 6), service=service)
    h = hashlib.sha256()
    for values in (
        result.ttft_seconds,
        result.e2e_seconds,
        result.timeline.ready,
        result.timeline.queue_depth,
    ):
        h.update(np.ascontiguousarray(values).tobytes())
    totals = (result.replica_gpu_hours, result.node_gpu_hours)
    h.update(repr((*totals, result.scale_events, result.node_events)).encode())
    assert h.hexdigest()[:16] == digest


def test_progress_is_reported_monotonically_to_one() -> None:
    seen: list[float] = []
    trace = poisson_trace(rate=5, seconds=1000)
    simulate(trace, fixed(2), workload=WORKLOAD, progress=seen.append)
    assert seen[-1] == 1.0
    assert seen == sorted(seen)
    assert 50 <= len(seen) <= 102


def test_invariant_check_catches_a_double_booked_gpu() -> None:
    posted: list[tuple[float, Timer, object]] = []
    cluster = Cluster(ClusterModel(), prefix="w", post=lambda *a: posted.append(a))
    cluster.bootstrap(8)
    cluster.check(0.0)
    cluster.nodes[0].placeholders += 1  # a ninth pod on an 8-GPU node
    cluster.nodes[0].used_gpus += 1
    with pytest.raises(AssertionError, match="double-booked"):
        cluster.check(0.0)


def test_smoke_on_the_real_conversation_trace() -> None:
    path = TRACES / "azure-llm-2023-conv.csv"
    if not path.exists():
        pytest.skip("shared traces not present")
    trace = load_trace(path)
    workload = WorkloadConfig(name="conv")
    result = simulate(trace, fixed(3), workload=workload, config=ReplayConfig(initial_replicas=3))
    assert result.requests == 19_366 and np.isfinite(result.ttft_seconds).all()
    assert result.slo_attainment > 0.99
    oracle = run_oracle(trace, workload=workload)
    assert oracle.policy == "oracle"
    # Both need the one initial node throughout; runs end at their last completion, which
    # differs by a fraction of a second.
    assert oracle.node_gpu_hours == pytest.approx(result.node_gpu_hours, abs=0.01)
    assert oracle.replica_gpu_hours < result.replica_gpu_hours / 2


@pytest.mark.parametrize(
    ("max_nodes", "ready", "nodes"),
    [
        pytest.param(4, 3, 2, id="tensor-parallel-replicas-fill-two-nodes"),
        pytest.param(1, 2, 1, id="max-nodes-leaves-one-pending"),
    ],
)
def test_multi_gpu_replicas_and_the_node_cap(max_nodes: int, ready: int, nodes: int) -> None:
    cluster = ClusterModel(gpus_per_replica=4, max_nodes=max_nodes)
    trace = trace_from_arrays([0.0, 600.0], [100, 100], [1, 1])
    policy = fixed(3)
    result = run(trace, policy, cluster=cluster)
    assert result.timeline.ready[-1] == ready
    assert result.timeline.nodes.max() == nodes
    pending = [r for r in policy.seen[-1].replicas if r.state is ReplicaState.STARTING]
    assert len(pending) == 3 - ready


def test_scale_down_takes_replicas_from_the_emptiest_node_so_it_can_go() -> None:
    cluster = Cluster(ClusterModel(), prefix="w", post=lambda *a: None)
    cluster.bootstrap(10)  # 8 on node 0, 2 on node 1
    assert [n.used_gpus for n in cluster.nodes] == [8, 2]
    cluster.set_desired(8, 1.0)  # idle replicas drop at once
    assert [n.used_gpus for n in cluster.nodes] == [8, 0]


def test_scale_down_from_full_nodes_empties_one_rather_than_thinning_all() -> None:
    cluster = Cluster(ClusterModel(), prefix="w", post=lambda *a: None)
    cluster.bootstrap(32)  # four full nodes: every node ties as "emptiest"
    for r in cluster.ready:  # one idle replica per node, the rest serving a request each
        r.in_flight = r.prefilling = int(r.index % 8 != 0)
    cluster.set_desired(24, 1.0)
    for r in list(cluster.replicas):  # the ones leaving finish their requests
        if r.state is ReplicaState.TERMINATING:
            r.in_flight = r.prefilling = 0
            cluster.drained(r, 2.0)
    assert sorted(n.used_gpus for n in cluster.nodes) == [0, 8, 8, 8]


def test_pending_replicas_that_do_not_divide_a_node_launch_every_node_at_once() -> None:
    """3-GPU replicas on 8-GPU nodes fit two a node: five need three nodes, all launched
    together (GPU arithmetic alone would launch two and find the fifth a node late)."""
    posted: list[tuple[float, Timer, object]] = []
    cluster = Cluster(
        ClusterModel(gpus_per_replica=3), prefix="w", post=lambda *a: posted.append(a)
    )
    cluster.set_desired(5, 0.0)
    cluster.place(0.0)
    assert len(cluster.nodes) == 3
    assert [kind for _, kind, _ in posted].count(Timer.NODE_READY) == 3


def test_fewer_placeholders_evict_the_newest_as_their_replicaset_does() -> None:
    """Issue 18 §5: the replay keeps placeholders as the live controller's Deployment does.
    Asked for fewer, its ReplicaSet deletes the newest pod (the lab's deployment controller
    alike), not the one on the emptiest node, which the replay used to pick."""
    posted: list[tuple[float, Timer, object]] = []
    model = ClusterModel(gpus_per_node=2, node_provision_seconds=10.0)
    cluster = Cluster(model, prefix="w", post=lambda *a: posted.append(a))
    cluster.bootstrap(1)  # node 0: one replica
    cluster.set_headroom(1)
    cluster.place(0.0)  # the oldest placeholder fills node 0
    cluster.set_headroom(3)
    cluster.place(1.0)  # two more: none fit, a node launches for them
    (node_ready,) = [p for p in posted if p[1] is Timer.NODE_READY]
    cluster.on_timer(Timer.NODE_READY, node_ready[2], 11.0)
    assert [n.placeholders for n in cluster.nodes] == [1, 2]
    cluster.set_desired(0, 12.0)  # node 0 keeps only its old placeholder: the emptiest
    cluster.set_headroom(2)
    cluster.place(12.0)
    assert [n.placeholders for n in cluster.nodes] == [1, 1]
    cluster.check(12.0)


@pytest.mark.parametrize(
    ("service", "waiting"),
    [
        # Four prompts share the step (2,048 tokens each of 8,192) for 8 s: running, as in
        # vLLM; the fifth has had no share. Counted 4 before (all prefilling but one).
        pytest.param(ServiceModel(long_prefill_token_threshold=2048), 1, id="chunked"),
        # One at a time, 2 s each: at 5 s two are done, one prefills, two wait.
        pytest.param(ServiceModel(chunked_prefill=False), 2, id="fifo-prefill"),
    ],
)
def test_queue_depth_counts_what_vllm_counts_as_waiting(
    service: ServiceModel, waiting: int
) -> None:
    """`vllm:num_requests_waiting`: requests not yet scheduled. A prompt that has had a
    share of a step is running, however much of it is left."""
    trace = trace_from_arrays([0.0] * 5, [30_000] * 5, [1] * 5)
    policy = fixed(1)
    run(trace, policy, service=service)
    scraped = [obs.queue_depth.latest() for obs in policy.seen if obs.now == 10.0]
    assert scraped == [waiting]  # the scrape at 5 s, seen at the tick at 10 s
