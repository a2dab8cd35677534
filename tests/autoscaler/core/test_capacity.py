"""Online service-rate learner on synthetic telemetry: saturated samples, the duty hint."""

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.autoscaler.core.capacity import (
    CapacityEstimate,
    CapacitySettings,
    CapacityState,
    estimate,
    learn,
    serving_during,
    tokens_per_request,
)
from gpufleet.autoscaler.core.observation import (
    Observation,
    PodTelemetry,
    Replica,
    ReplicaState,
    Series,
)

S = CapacitySettings()
STEP = 5.0
TRUE_RPS = 7.3  # per replica, e.g. 15k prompt tokens/s at 2048 tokens/request
TOKENS = 2048.0


def ready(n: int, *, since: float = -1e9) -> tuple[Replica, ...]:
    return tuple(
        Replica(name=f"r{i}", state=ReplicaState.READY, since=since, created=since)
        for i in range(n)
    )


def observe(
    times: np.ndarray,
    *,
    done: np.ndarray,
    queue: np.ndarray,
    replicas: tuple[Replica, ...],
    duty_percent: float | None = None,
    in_flight: float = 0.0,
) -> Observation:
    t = tuple(float(x) for x in times)
    pods = ()
    if duty_percent is not None:
        pods = tuple(PodTelemetry(pod=r.name, gpu_util_percent=duty_percent) for r in replicas)
    return Observation(
        now=t[-1] + 1.5,
        completion_rate=Series(t, tuple(float(x) for x in done)),
        prompt_tokens_rate=Series(t, tuple(float(x * TOKENS) for x in done)),
        queue_depth=Series(t, tuple(float(x) for x in queue)),
        in_flight=Series(t, (in_flight,) * len(t)),
        pods=pods,
        replicas=replicas,
    )


def saturated_run(
    state: CapacityState,
    *,
    n_replicas: int,
    samples: int,
    t0: float = 0.0,
    settings: CapacitySettings = S,
    batch_slots: int = 0,
    in_flight_per_replica: float = 0.0,
):
    """Feed `samples` saturated samples one observation at a time; return the final state."""
    rng = np.random.default_rng(7)
    times = t0 + STEP * np.arange(samples + 1)
    done = n_replicas * TRUE_RPS * (1 + 0.05 * rng.standard_normal(samples + 1))
    queue = np.full(samples + 1, 10.0 * n_replicas)
    for k in range(2, samples + 2):
        obs = observe(
            times[:k],
            done=done[:k],
            queue=queue[:k],
            replicas=ready(n_replicas),
            in_flight=in_flight_per_replica * n_replicas,
        )
        state = learn(state, obs, settings, batch_slots=batch_slots)
    return state


@pytest.mark.parametrize("n_replicas", [1, 4, 30], ids=["one", "four", "thirty"])
def test_converges_to_the_true_rate_on_saturated_samples(n_replicas: int) -> None:
    # Prefill-bound samples (prefilling at the token rate they teach): the token rate is
    # learned, and it alone sizes the replica for the mix.
    est = estimate(saturated_run(CapacityState(), n_replicas=n_replicas, samples=200), S)
    assert est.learned
    assert est.samples == 200
    assert est.prompt_tokens_per_second == pytest.approx(TRUE_RPS * TOKENS, rel=0.03)
    assert est.per_replica_rps(TOKENS) == pytest.approx(TRUE_RPS, rel=0.03)


def test_slot_bound_samples_teach_the_request_rate() -> None:
    # Prefill is known to run at 100k tokens/s (a floor), yet saturated replicas prefill
    # only 15k: the batch slots were full, so completions/s is the request rate.
    fast_prefill = CapacitySettings(prior_prompt_tokens_per_second=100_000.0)
    state = saturated_run(CapacityState(), n_replicas=4, samples=200, settings=fast_prefill)
    est = estimate(state, fast_prefill)
    assert est.requests_per_second == pytest.approx(TRUE_RPS, rel=0.03)
    assert est.per_replica_rps(TOKENS) == pytest.approx(TRUE_RPS, rel=0.03)


def test_prefill_bound_samples_leave_the_request_rate_alone() -> None:
    # Completions in a prefill-bound sample lag (decode) and follow the prompt mix, so they
    # do not move the request rate; it stays at its guess: the prefill limit for the mix.
    state = saturated_run(CapacityState(), n_replicas=4, samples=3)
    assert state.slot_weight == 0.0
    est = estimate(state, S, tokens_per_request=TOKENS / 2)
    assert est.requests_per_second == pytest.approx(2 * est.prompt_tokens_per_second / TOKENS)


@pytest.mark.parametrize(
    ("in_flight", "slot_bound"),
    [
        pytest.param(64.0, True, id="slots-full-teach-the-request-rate"),
        pytest.param(20.0, False, id="queued-for-prefill-does-not"),
    ],
)
def test_with_the_batch_size_known_only_full_slots_are_slot_bound(
    in_flight: float, slot_bound: bool
) -> None:
    # The prefill floor is high (100k tokens/s), so by the token test alone every one of
    # these samples would read as slot-bound; with 64 slots known, only full ones are.
    fast_prefill = CapacitySettings(prior_prompt_tokens_per_second=100_000.0)
    state = saturated_run(
        CapacityState(),
        n_replicas=4,
        samples=200,
        settings=fast_prefill,
        batch_slots=64,
        in_flight_per_replica=in_flight,
    )
    assert (state.slot_weight > 0.0) is slot_bound
    est = estimate(state, fast_prefill, tokens_per_request=TOKENS)
    if slot_bound:
        assert est.requests_per_second == pytest.approx(TRUE_RPS, rel=0.05)
    else:  # the request rate stays the prefill limit of the mix
        assert est.requests_per_second == pytest.approx(100_000.0 / TOKENS)


def test_batch_size_without_an_in_flight_count_falls_back_to_the_token_test() -> None:
    # No in-flight series: the slots cannot be seen, so the token test decides, as when
    # the batch size is unknown (every sample here prefills far below 100k tokens/s).
    fast_prefill = CapacitySettings(prior_prompt_tokens_per_second=100_000.0)
    rng = np.random.default_rng(7)
    times = STEP * np.arange(11)
    done = 4 * TRUE_RPS * (1 + 0.05 * rng.standard_normal(11))
    state = CapacityState()
    for k in range(2, 12):
        obs = observe(times[:k], done=done[:k], queue=np.full(k, 40.0), replicas=ready(4))
        obs = replace(obs, in_flight=Series())
        state = learn(state, obs, fast_prefill, batch_slots=64)
    assert state.slot_weight > 0.0


def test_first_saturated_sample_does_not_halve_the_estimate() -> None:
    # The request prior (2/s) is a deliberately low guess: blending one noisy sample with
    # it would drag the rate toward it. With the mix known, the guess is the prefill limit.
    fast_prefill = CapacitySettings(prior_prompt_tokens_per_second=100_000.0)
    state = saturated_run(CapacityState(), n_replicas=4, samples=1, settings=fast_prefill)
    est = estimate(state, fast_prefill, tokens_per_request=TOKENS)
    assert est.requests_per_second > TRUE_RPS
    assert estimate(state, fast_prefill).requests_per_second < TRUE_RPS


def test_prior_speaks_before_any_sample() -> None:
    est = estimate(CapacityState(), S)
    assert est == CapacityEstimate(
        requests_per_second=S.prior_requests_per_second,
        prompt_tokens_per_second=S.prior_prompt_tokens_per_second,
        samples=0,
        learned=False,
    )


@pytest.mark.parametrize(
    ("settings", "rate", "doubled"),
    [
        pytest.param(S, "prompt_tokens_per_second", 2 * TRUE_RPS * TOKENS, id="prefill-bound"),
        # Only slot-bound samples teach the request rate (prefill known to be far faster).
        pytest.param(
            CapacitySettings(prior_prompt_tokens_per_second=100_000.0),
            "requests_per_second",
            2 * TRUE_RPS,
            id="slot-bound",
        ),
    ],
)
def test_forgets_an_old_rate_when_the_service_changes(
    settings: CapacitySettings, rate: str, doubled: float
) -> None:
    state = saturated_run(CapacityState(), n_replicas=2, samples=100, settings=settings)
    # The model got faster: new saturated samples at twice the rate.
    times = 1000.0 + STEP * np.arange(400)
    done = np.full(400, 2 * 2 * TRUE_RPS)
    queue = np.full(400, 20.0)
    for k in range(2, 401):
        obs = observe(times[:k], done=done[:k], queue=queue[:k], replicas=ready(2))
        state = learn(state, obs, settings)
    est = estimate(state, settings)
    assert getattr(est, rate) == pytest.approx(doubled, rel=0.1)
    assert est.per_replica_rps(TOKENS) == pytest.approx(2 * TRUE_RPS, rel=0.1)


@pytest.mark.parametrize(
    ("queue", "why"),
    [
        pytest.param([0.0, 0.0], "no queue", id="no-queue"),
        pytest.param([0.0, 50.0], "queue only at the end", id="queue-formed-mid-interval"),
        pytest.param([50.0, 0.0], "queue only at the start", id="queue-drained-mid-interval"),
        pytest.param([3.0, 3.0], "fewer than one per replica", id="queue-below-one-per-replica"),
    ],
)
def test_unsaturated_samples_do_not_count(queue: list[float], why: str) -> None:
    obs = observe(
        np.array([0.0, 5.0]), done=np.array([1.0, 1.0]), queue=np.array(queue), replicas=ready(4)
    )
    state = learn(CapacityState(), obs, S)
    assert state.samples == 0, why
    assert state.last_sample_time == 5.0


def test_same_samples_twice_count_once() -> None:
    obs = observe(
        np.array([0.0, 5.0]),
        done=np.array([7.0, 7.0]),
        queue=np.array([9.0, 9.0]),
        replicas=ready(1),
    )
    once = learn(CapacityState(), obs, S)
    assert learn(once, obs, S) == once
    assert once.samples == 1


def test_duty_cycle_hint_lifts_the_prior_but_never_lowers() -> None:
    # 2 replicas each doing 3 req/s at 50% duty: the rate is at least 6 req/s per replica.
    times = STEP * np.arange(20)
    state = CapacityState()
    for k in range(2, 21):
        obs = observe(
            times[:k],
            done=np.full(k, 6.0),
            queue=np.zeros(k),
            replicas=ready(2),
            duty_percent=50.0,
        )
        state = learn(state, obs, S)
    est = estimate(state, S)
    assert est.samples == 0
    assert est.requests_per_second == pytest.approx(S.hint_discount * 6.0)
    idle = observe(
        times[:2], done=np.zeros(2), queue=np.zeros(2), replicas=ready(2), duty_percent=5
    )
    assert learn(CapacityState(), idle, S).hint_busy == 0.0  # too idle to say anything


def test_ttft_bound_lifts_the_prefill_rate_of_an_idle_looking_fleet() -> None:
    # 2048-token prompts answered in 0.2 s at p90: prefill runs at >= 10k tokens/s.
    times = STEP * np.arange(30)
    state = CapacityState()
    for k in range(2, 31):
        t = tuple(float(x) for x in times[:k])
        obs = Observation(
            now=t[-1] + 1.5,
            completion_rate=Series(t, (1.0,) * k),
            prompt_tokens_rate=Series(t, (TOKENS,) * k),
            queue_depth=Series(t, (0.0,) * k),
            ttft_p90_seconds=Series(t, (0.2,) * k),
            replicas=ready(3),
        )
        state = learn(state, obs, S, tokens_per_request=mean_prompt(obs))
    est = estimate(state, S)
    assert est.samples == 0
    assert est.prompt_tokens_per_second == pytest.approx(S.hint_discount * TOKENS / 0.2)
    assert est.per_replica_rps(TOKENS) == pytest.approx(S.hint_discount / 0.2)


def test_prefill_seconds_give_the_prefill_rate_of_a_fleet_that_never_saturates() -> None:
    # 2048-token prompts, each prefilled in 0.1365 s (15k tokens/s), a few per second and
    # no queue: the summed prefill seconds (vllm:request_prefill_time_seconds) give the rate.
    times = STEP * np.arange(30)
    state = CapacityState()
    for k in range(2, 31):
        t = tuple(float(x) for x in times[:k])
        obs = Observation(
            now=t[-1] + 1.5,
            completion_rate=Series(t, (3.0,) * k),
            prompt_tokens_rate=Series(t, (3.0 * TOKENS,) * k),
            queue_depth=Series(t, (0.0,) * k),
            prefill_sum_rate=Series(t, (3.0 * TOKENS / 15_000.0,) * k),
            replicas=ready(3),
        )
        state = learn(state, obs, S)
    est = estimate(state, S)
    assert est.samples == 0
    assert est.prompt_tokens_per_second == pytest.approx(15_000.0)
    assert est.per_replica_rps(TOKENS) == pytest.approx(15_000.0 / TOKENS)


def test_serving_weights_replicas_by_time_served() -> None:
    replicas = (
        Replica(name="old", state=ReplicaState.READY, since=0.0, created=0.0),
        Replica(name="new", state=ReplicaState.READY, since=102.0, created=40.0),
        Replica(name="cold", state=ReplicaState.STARTING, since=90.0, created=90.0),
        Replica(name="drain", state=ReplicaState.TERMINATING, since=101.0, created=0.0),
    )
    obs = Observation(now=110.0, replicas=replicas)
    assert serving_during(obs, 100.0, 105.0) == pytest.approx(1 + 0.6 + 0 + 1)


@pytest.mark.parametrize(
    ("samples", "tokens", "want"),
    [
        pytest.param(9, 2048.0, 15000 / 2048, id="long-prompts-prefill-binds"),
        pytest.param(9, 500.0, 10.0, id="short-prompts-slots-bind"),
        pytest.param(9, None, 10.0, id="unknown-mix-requests-only"),
        pytest.param(0, 500.0, 30.0, id="no-slot-bound-sample-yet-tokens-only"),
    ],
)
def test_per_replica_rate_is_the_tighter_limit(
    samples: int, tokens: float | None, want: float
) -> None:
    est = CapacityEstimate(
        requests_per_second=10.0,
        prompt_tokens_per_second=15000.0,
        samples=samples,
        learned=samples > 0,
        slot_weight=float(samples),
    )
    assert est.per_replica_rps(tokens) == pytest.approx(want)


MEMORY = 1800.0


def mean_prompt(obs: Observation) -> float | None:
    return tokens_per_request(obs, memory_seconds=MEMORY, scrape_seconds=STEP)


def test_tokens_per_request_over_history() -> None:
    obs = observe(np.array([0.0, 5.0]), done=np.array([2.0, 6.0]), queue=np.zeros(2), replicas=())
    assert mean_prompt(obs) == pytest.approx(TOKENS)
    assert mean_prompt(Observation(now=0.0)) is None


def startup(
    samples: int,
    *,
    idle: int = 0,
    rate: float = 20.0,
    decode_seconds: float = 4.0,
) -> Observation:
    """A workload scraped every STEP from 0, idle for its first `idle` scrapes, whose
    traffic (`rate` requests/s of TOKENS-token prompts) then starts, `samples` scrapes in
    all: each request is prefilled on arrival and finishes `decode_seconds` after, so the
    completions trail the prefills while the requests in flight fill up."""
    t = STEP * np.arange(1, idle + samples + 1)
    since = np.clip(t - STEP * idle, 0.0, None)
    finished = rate * np.clip(since - decode_seconds, 0.0, None)
    done = np.diff(np.concatenate(([0.0], finished))) / STEP
    times = tuple(t.tolist())
    return Observation(
        now=float(t[-1]) + 1.5,
        completion_rate=Series(times, tuple(done.tolist())),
        prompt_tokens_rate=Series(times, tuple(np.where(since > 0, rate * TOKENS, 0.0))),
        in_flight=Series(times, tuple((rate * since - finished).tolist())),
        queue_depth=Series(times, (0.0,) * len(times)),
    )


@pytest.mark.parametrize("samples", [1, 2, 3, 12])
@pytest.mark.parametrize(
    "idle",
    [
        pytest.param(0, id="traffic-from-the-first-scrape"),
        pytest.param(6, id="scraped-idle-first"),
        pytest.param(400, id="up-from-zero-after-a-long-idle"),
    ],
)
def test_traffic_that_begins_inside_the_history_counts_its_first_requests_in_flight(
    samples: int, idle: int
) -> None:
    # Tokens per completion read the mean prompt 5x over after one scrape (20 requests
    # prefilled, 4 finished each second), still 7% over after a minute; the requests in
    # flight are the difference. After a long idle the history is older than the memory,
    # but its idle samples say nothing was in flight when the traffic began.
    obs = startup(samples, idle=idle)
    assert sum(obs.prompt_tokens_rate.values) / sum(obs.completion_rate.values) > 1.05 * TOKENS
    assert mean_prompt(obs) == pytest.approx(TOKENS)


def test_requests_waiting_in_flight_are_not_taken_for_prompts_prefilled() -> None:
    # One scrape into the traffic, 80 requests in flight, 50 of them waiting for prefill
    # (the simulator counts them in both): only the 30 prefilled hold prompt tokens.
    obs = startup(1)
    assert obs.in_flight.values == (80.0,)
    burst = replace(obs, queue_depth=Series(obs.queue_depth.times, (50.0,)))
    prefilled = 20.0 * TOKENS / (4.0 + 30.0 / STEP)
    assert mean_prompt(burst) == pytest.approx(prefilled)
    assert mean_prompt(replace(obs, queue_depth=Series(obs.queue_depth.times, (200.0,)))) == (
        pytest.approx(20.0 * TOKENS / 4.0)  # a queue longer than the flight: none counted
    )


def test_an_old_history_does_not_count_the_requests_in_flight() -> None:
    # A history older than the memory began mid-traffic: its first sample's requests in
    # flight were prefilled before it, and counting them would understate the prompts.
    t = STEP * np.arange(1, 400)
    obs = Observation(
        now=float(t[-1]) + 1.5,
        completion_rate=Series(tuple(t.tolist()), (20.0,) * len(t)),
        prompt_tokens_rate=Series(tuple(t.tolist()), (20.0 * TOKENS,) * len(t)),
        in_flight=Series(tuple(t.tolist()), (120.0,) * len(t)),
        queue_depth=Series(tuple(t.tolist()), (0.0,) * len(t)),
    )
    assert obs.now - t[0] > MEMORY
    assert mean_prompt(obs) == TOKENS
    young = tokens_per_request(obs, memory_seconds=math.inf, scrape_seconds=STEP)
    assert young == pytest.approx(TOKENS * 20.0 * len(t) / (20.0 * len(t) + 120.0 / STEP))


@settings(max_examples=200, deadline=None)
@given(
    rates=st.lists(
        st.tuples(
            st.floats(0.0, 1e3), st.floats(0.0, 1e7), st.floats(0.0, 1e4), st.floats(0.0, 1e4)
        ),
        min_size=1,
        max_size=12,
    ),
    start=st.floats(0.0, 4000.0),
    memory=st.floats(1.0, 120.0),
)
def test_the_mean_prompt_is_positive_and_never_above_tokens_per_completion(
    rates: list[tuple[float, float, float, float]], start: float, memory: float
) -> None:
    # Counting requests in flight as prefilled only adds requests: whatever the signals
    # (a history younger or older than the memory, a queue longer than the flight, rates
    # at float's limits), the mean prompt is a finite positive number no larger than
    # tokens per completion, or None.
    t = tuple(start + STEP * i for i in range(len(rates)))
    done, tokens, flight, queue = (tuple(r[k] for r in rates) for k in range(4))
    obs = Observation(
        now=t[-1] + 1.5,
        completion_rate=Series(t, done),
        prompt_tokens_rate=Series(t, tokens),
        in_flight=Series(t, flight),
        queue_depth=Series(t, queue),
    )
    got = tokens_per_request(obs, memory_seconds=memory, scrape_seconds=STEP)
    if sum(done) > 1e-6 and sum(tokens) > 1e-6:
        assert got is not None
    if got is None:
        return
    assert 0.0 < got < math.inf
    if sum(done) > 0.0:
        assert got <= sum(tokens) / sum(done) * (1.0 + 1e-12)
