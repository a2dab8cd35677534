"""The clairvoyant oracle: a lower bound on GPU-hours and a near-minimal schedule to replay.

It knows every arrival in advance and pays the same delays as any policy: a replica serves
`cold_start_seconds` after it gets a GPU, a new node is usable `node_provision_seconds` after
launch and is billed from launch until `node_idle_seconds` after it empties. The schedule is
then replayed through the same engine (`SchedulePolicy`), so its attainment and latencies are
measured exactly like every other policy's.

Construction, on a grid of `STEP_SECONDS` buckets:
1. Serving replicas per bucket, from two necessary conditions for every request to meet its
   TTFT SLO S: (a) prefill work: the prompts arriving in any window of buckets [i, i+L) must
   be prefilled between the window's start and its last deadline, within L + ceil(S/step)
   buckets, at `prefill_tokens_per_second` per replica, so the replicas serving there must
   average at least work / (rate x that span); every bucket gets the highest such average
   over the windows (lengths 1 s to the whole trace) that contain it; (b) batch slots: a
   request must hold a slot at least from its latest possible dispatch (arrival + S - its
   prefill time) to its earliest possible decode end (arrival + its prefill time + output x
   decode_seconds_per_token), so the requests that must hold one at an instant need that
   many slots. Prompts too long to prefill within S on any replica are left out: nothing
   can serve them within the SLO.
2. Each replica level (the k-th replica is serving where the count is >= k) is kept through
   gaps shorter than `cold_start_seconds`, since restarting would hold the GPU that long
   anyway; each serving run is preceded by its cold start. Levels up to `initial_replicas`
   start warm at time 0. These give the GPUs held per bucket.
3. Nodes: the GPUs held at each instant need ceil(GPUs / gpus_per_node) nodes (perfect
   packing), and a node in use at time u is billed over [u - node_provision, u + node_idle]
   (it had to be launched that early, and the model removes it only that long after it
   empties). So the billed nodes at t are at least the most nodes in use anywhere in
   [t - node_idle, t + node_provision]; the oracle asks for exactly that by keeping warm
   placeholders (`Decision.headroom`) for the GPUs needed within the provisioning time.
   A run bills until its last request completes, so the hours count the steps before the
   earliest instant every request can have completed (arrival + prefill + decode, at once).

4. Repair (`solve_oracle`): the schedule of steps 1-3 is replayed; while fewer than
   `target_attainment` of the judged requests (arriving after cold start + provisioning,
   prompt feasible) meet the SLO, one serving replica is added over [arrival, arrival + S]
   of every late request, steps 2-3 are redone and it is replayed again.

Why the hours of steps 1-3 (`OracleSolution.bound`) are a lower bound, and where they are
not. Conditions (a) and (b) are necessary for any schedule that meets the SLO for every
request, and the cold-start and node billing follow from the model's own delays, so no
such schedule serves fewer replicas over a window's span or bills a node for less. What is
not modelled makes the bound optimistic: (a) pools the prefill capacity of all replicas
(a real prompt is prefilled by one replica, behind that replica's FIFO queue), (b) ignores
that decode slows with occupancy, and node packing is assumed perfect. Two things keep it
from being a strict minimum: per-bucket maxima over windows are a feasible covering of the
constraints, not an exact optimum (capacity placed later within a window could cover more
windows at once), and steps 1-2 are optimised one after the other, not jointly (fewer,
longer-serving replicas can need fewer cold starts). It insists on every request, so a
policy content with 99% may go below it by skipping the worst burst. The repaired schedule
(`OracleSolution.schedule`, replayed in `.result`, what `run_oracle` returns) is the
cheapest clairvoyant schedule found that meets the target in the engine itself; it is no
longer a bound. Report the bound, the replay's hours and its attainment together.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from gpufleet.autoscaler.core.observation import Observation, ReplicaState
from gpufleet.autoscaler.core.policy import Decision, Reason
from gpufleet.autoscaler.core.workload import WorkloadConfig
from gpufleet.autoscaler.replay.core.engine import simulate
from gpufleet.autoscaler.replay.core.model import ReplayConfig
from gpufleet.autoscaler.replay.core.result import OracleBound, RunResult
from gpufleet.autoscaler.replay.core.stats import feasible
from gpufleet.autoscaler.replay.core.trace import Trace

# The share of judged requests the oracle's replay is repaired to meet; below it (repairs
# exhausted) the replay is no yardstick and reports say so.
TARGET_ATTAINMENT = 0.99

STEP_SECONDS = 1.0  # finer than any SLO worth having, so rounding the SLO up costs little
_SHORT_WINDOWS = 120  # every window length up to this many steps, then geometric
_WINDOW_GROWTH = 1.15


@dataclass(frozen=True, slots=True, kw_only=True)
class OracleSchedule:
    """Per-step counts of the oracle's schedule and the GPU-hours they bill."""

    step_seconds: float
    serving: np.ndarray  # replicas that must be ready in each step (int64)
    holding: np.ndarray  # replicas holding a GPU (cold start included) in each step
    nodes: np.ndarray  # nodes billed in each step (launch lead and idle tail included)
    replica_gpu_hours: float
    node_gpu_hours: float
    infeasible_requests: int  # prompts no replica can prefill within the SLO


@dataclass(frozen=True, slots=True, kw_only=True)
class OracleSolution:
    """The oracle's replayed run, the schedule it replayed and the bound it started from."""

    result: RunResult  # the replay of `schedule`, policy "oracle"
    schedule: OracleSchedule  # `bound` plus the replicas added by repairs
    bound: OracleSchedule  # from the necessary conditions alone
    judged_attainment: float  # of `result`, over requests after the warm-up, feasible ones


def oracle_schedule(
    trace: Trace,
    *,
    workload: WorkloadConfig,
    config: ReplayConfig = ReplayConfig(),  # noqa: B008 - frozen, so a shared default is safe
) -> OracleSchedule:
    """The schedule from the necessary conditions alone, and its GPU-hours: the bound."""
    serving, infeasible = _serving(trace, workload=workload, config=config)
    return _schedule(
        serving, infeasible=infeasible, end=_earliest_end(trace, config), config=config
    )


def solve_oracle(
    trace: Trace,
    *,
    workload: WorkloadConfig,
    config: ReplayConfig = ReplayConfig(),  # noqa: B008 - frozen, so a shared default is safe
    target_attainment: float = TARGET_ATTAINMENT,
    max_repairs: int = 12,
    progress: Callable[[float], None] | None = None,
) -> OracleSolution:
    """Replay the bound's schedule; while it misses the target, add replicas where it missed.

    The target is judged on requests arriving after the warm-up (cold start plus node
    provisioning: no schedule can add capacity before then) whose prompt can be prefilled
    within the SLO at all. Each repair adds one serving replica over [arrival, arrival + SLO]
    of every late request's step and replays again; after `max_repairs` it stops and returns
    the last replay whatever its attainment (`judged_attainment` says).
    """
    slo = workload.slo_ttft_seconds
    serving, infeasible = _serving(trace, workload=workload, config=config)
    end = _earliest_end(trace, config)
    bound = schedule = _schedule(serving, infeasible=infeasible, end=end, config=config)
    can, after_warmup = judged_requests(trace, slo_seconds=slo, config=config)
    judged = after_warmup & can
    slo_steps = math.ceil(slo / STEP_SECONDS)
    repair = 0
    while True:
        result = _replay(trace, schedule, workload, config, progress=_stage(progress, repair))
        late = judged & (result.ttft_seconds > slo)
        attained = 1.0 - late.sum() / judged.sum() if judged.any() else 1.0
        if attained >= target_attainment or repair >= max_repairs:
            break
        first = (trace.arrival_seconds[late] / STEP_SECONDS).astype(np.int64)
        bump = np.zeros(len(serving) + 1, dtype=np.int64)
        np.add.at(bump, np.minimum(first, len(serving)), 1)
        np.add.at(bump, np.minimum(first + slo_steps + 1, len(serving)), -1)
        repaired = np.minimum(serving + (np.cumsum(bump)[:-1] > 0), workload.max_replicas)
        if np.array_equal(repaired, serving):
            break  # at max_replicas wherever it is late: more replays cannot help
        serving = repaired
        schedule = _schedule(serving, infeasible=infeasible, end=end, config=config)
        repair += 1
    if progress is not None:
        progress(1.0)
    return OracleSolution(
        result=result,
        schedule=schedule,
        bound=bound,
        judged_attainment=float(attained),
    )


def judged_requests(
    trace: Trace, *, slo_seconds: float, config: ReplayConfig
) -> tuple[np.ndarray, np.ndarray]:
    """Per request: whether one replica can prefill its prompt within the SLO (`feasible`),
    and whether it arrives after the warm-up (node provisioning plus a cold start, before
    which no schedule adds capacity). The oracle is judged on the requests that are both."""
    can = feasible(
        trace.prompt_tokens,
        prefill_tokens_per_second=config.service.prefill_tokens_per_second,
        slo_seconds=slo_seconds,
    )
    return can, trace.arrival_seconds >= config.cluster.lead_seconds


def run_oracle(
    trace: Trace,
    *,
    workload: WorkloadConfig,
    config: ReplayConfig = ReplayConfig(),  # noqa: B008 - frozen, so a shared default is safe
    progress: Callable[[float], None] | None = None,
) -> RunResult:
    """The oracle's replayed run (see `solve_oracle`), its policy named "oracle", carrying
    the bound and the judged attainment for the report."""
    solution = solve_oracle(trace, workload=workload, config=config, progress=progress)
    bound = OracleBound(
        replica_gpu_hours=solution.bound.replica_gpu_hours,
        node_gpu_hours=solution.bound.node_gpu_hours,
        judged_attainment=solution.judged_attainment,
        target_attainment=TARGET_ATTAINMENT,
    )
    return replace(solution.result, oracle=bound)


def warm_start_replicas(
    trace: Trace,
    *,
    workload: WorkloadConfig,
    config: ReplayConfig = ReplayConfig(),  # noqa: B008 - frozen, so a shared default is safe
    target_attainment: float = TARGET_ATTAINMENT,
) -> int:
    """Replicas the trace's first minutes need: a fair `ReplayConfig.initial_replicas`.

    No policy can add capacity before cold start plus node provisioning (the warm-up), so a
    run started with too few replicas loses the same early requests under every policy.
    This is the fewest replicas that, held from time 0, serve `target_attainment` of the
    feasible requests arriving within the warm-up, measured in the engine. The necessary
    conditions alone pool prefill across replicas, so under a heavy prompt tail they start
    the fleet short: in the engine each replica prefills its own queue, and one long prompt
    delays the prompts behind it. The search starts at the conditions' count; if no count
    up to `max_replicas` reaches the target, the first with the highest attainment.
    """
    serving, _ = _serving(trace, workload=workload, config=config)
    warmup = math.ceil(config.cluster.lead_seconds / STEP_SECONDS)
    least = int(serving[: warmup + 1].max(initial=workload.min_replicas))
    can, after_warmup = judged_requests(trace, slo_seconds=workload.slo_ttft_seconds, config=config)
    early = ~after_warmup
    judged = can[early]
    if not judged.any() or least >= workload.max_replicas:
        return least
    window = Trace(
        name=trace.name,
        arrival_seconds=trace.arrival_seconds[early],
        prompt_tokens=trace.prompt_tokens[early],
        output_tokens=trace.output_tokens[early],
    )
    best, best_attained = least, -1.0
    for replicas in range(max(least, 1), workload.max_replicas + 1):
        held = simulate(
            window,
            _Hold(replicas),
            workload=workload,
            config=replace(config, initial_replicas=replicas),
        )
        attained = float(np.mean(held.ttft_seconds[judged] <= workload.slo_ttft_seconds))
        if attained >= target_attainment:
            return replicas
        if attained > best_attained:
            best, best_attained = replicas, attained
    return best


class _Hold:
    """Holds a fixed count of replicas: the warm start's yardstick."""

    name = "hold"
    interval_seconds = 15.0

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas

    def decide(self, obs: Observation) -> Decision:
        return Decision(
            desired=self.replicas, reason=Reason.STEADY, message=f"holding {self.replicas}"
        )


def _replay(
    trace: Trace,
    schedule: OracleSchedule,
    workload: WorkloadConfig,
    config: ReplayConfig,
    *,
    progress: Callable[[float], None] | None,
) -> RunResult:
    policy = SchedulePolicy(schedule, provision_seconds=config.cluster.node_provision_seconds)
    return simulate(trace, policy, workload=workload, config=config, progress=progress)


def _stage(progress: Callable[[float], None] | None, repair: int) -> Callable[[float], None] | None:
    """Replay number `repair` reports into [1 - 2^-r, 1 - 2^-(r+1)): monotonic, never 1."""
    if progress is None:
        return None
    low, width = 1.0 - 0.5**repair, 0.5 ** (repair + 1)
    return lambda done: progress(low + width * min(done, 0.999))


def _earliest_end(trace: Trace, config: ReplayConfig) -> float:
    """The earliest instant every request can have completed: no run ends, or bills, before."""
    svc = config.service
    prefill_s = trace.prompt_tokens / svc.prefill_tokens_per_second
    decode_s = trace.output_tokens * svc.decode_seconds_per_token
    return float(np.max(trace.arrival_seconds + prefill_s + decode_s, initial=0.0))


def _schedule(
    serving: np.ndarray, *, infeasible: int, end: float, config: ReplayConfig
) -> OracleSchedule:
    """Steps 2 and 3 of the module docstring: GPUs held and nodes billed for `serving`,
    the hours counted over the whole steps before `end` (a run's earliest end)."""
    step = STEP_SECONDS
    cluster = config.cluster
    cold_steps = math.ceil(cluster.cold_start_seconds / step)
    holding = np.zeros_like(serving)
    for level in range(1, int(serving.max(initial=0)) + 1):
        warm = level <= config.initial_replicas
        holding += _hold_level(serving >= level, cold_steps=cold_steps, warm=warm)
    gpus = holding * cluster.gpus_per_replica
    in_use = -(-gpus // cluster.gpus_per_node)
    initial_nodes = -(-config.initial_replicas * cluster.gpus_per_replica // cluster.gpus_per_node)
    in_use[0] = max(in_use[0], initial_nodes)
    nodes = _window_max(
        in_use,
        before=math.ceil(cluster.node_idle_seconds / step),
        after=math.ceil(cluster.node_provision_seconds / step),
    )
    billed = int(end // step)
    return OracleSchedule(
        step_seconds=step,
        serving=serving,
        holding=holding,
        nodes=nodes,
        replica_gpu_hours=float(gpus[:billed].sum()) * step / 3600.0,
        node_gpu_hours=float(nodes[:billed].sum()) * cluster.gpus_per_node * step / 3600.0,
        infeasible_requests=infeasible,
    )


class SchedulePolicy:
    """Plays a precomputed schedule: desired = replicas holding a GPU in the current step.

    Headroom asks for warm placeholders for every GPU the schedule needs within the node
    provisioning time, less those replicas still draining hold, so nodes are launched
    exactly that early. After the schedule ends
    (or if the replay runs late) it keeps one replica while requests are queued, so the run
    always finishes.
    """

    name = "oracle"

    def __init__(self, schedule: OracleSchedule, *, provision_seconds: float) -> None:
        self.interval_seconds = schedule.step_seconds
        self.schedule = schedule
        ahead = math.ceil(provision_seconds / schedule.step_seconds)
        self._ahead = _window_max(schedule.holding, before=0, after=ahead)

    def decide(self, obs: Observation) -> Decision:
        k = round(obs.now / self.interval_seconds)
        holding = self.schedule.holding
        if k < len(holding):
            desired, ahead = int(holding[k]), int(self._ahead[k])
        else:
            desired = ahead = 0
        # A replica draining after a scale-down (this one's too) holds its GPU for seconds:
        # placeholders for all of `ahead` beside it would not fit, and launch a node the
        # schedule never needs, which the placeholders then keep up.
        draining = sum(1 for r in obs.replicas if r.state is ReplicaState.TERMINATING)
        draining += max(0, len(obs.replicas) - draining - desired)
        queued = obs.queue_depth.latest() or 0.0
        if desired == 0 and queued > 0:
            return Decision(desired=1, reason=Reason.BACKLOG, message=f"{queued:.0f} queued")
        return Decision(
            desired=desired,
            reason=Reason.FORECAST,
            message=f"schedule: {desired} holding a GPU, {ahead} within provisioning",
            headroom=ahead - desired - draining,
        )


def _serving(
    trace: Trace, *, workload: WorkloadConfig, config: ReplayConfig
) -> tuple[np.ndarray, int]:
    """Replicas that must be serving per step (conditions (a) and (b)); infeasible count."""
    step, svc = STEP_SECONDS, config.service
    slo = workload.slo_ttft_seconds
    arrivals = trace.arrival_seconds
    prefill_s = trace.prompt_tokens / svc.prefill_tokens_per_second
    can = feasible(
        trace.prompt_tokens,
        prefill_tokens_per_second=svc.prefill_tokens_per_second,
        slo_seconds=slo,
    )
    decode_s = trace.output_tokens * svc.decode_seconds_per_token
    end_s = float(np.max(arrivals + np.maximum(slo, prefill_s) + decode_s)) + step
    steps = math.ceil(end_s / step) + 1
    slo_steps = math.ceil(slo / step)
    bucket = np.minimum((arrivals / step).astype(np.int64), steps - 1)
    work = np.bincount(bucket[can], weights=prefill_s[can], minlength=steps) / step
    prefix = np.concatenate(([0.0], np.cumsum(work)))
    need = np.zeros(steps)
    for length in _window_lengths(steps):
        # The window starting at step i spans steps [i, i + length + slo_steps).
        density = np.zeros(steps)
        density[: steps - length + 1] = (prefix[length:] - prefix[:-length]) / (length + slo_steps)
        need = np.maximum(need, _window_max(density, before=length + slo_steps - 1, after=0))
    replicas = np.ceil(need - 1e-9).astype(np.int64)
    slots = _slot_need(arrivals, prefill_s, decode_s, slo=slo, steps=steps)
    replicas = np.maximum(replicas, -(-slots // svc.batch_slots))
    replicas = np.clip(replicas, workload.min_replicas, max(workload.max_replicas, 0))
    return replicas, int((~can).sum())


def _slot_need(
    arrivals: np.ndarray, prefill_s: np.ndarray, decode_s: np.ndarray, *, slo: float, steps: int
) -> np.ndarray:
    """Requests that must hold a batch slot at each step's midpoint."""
    start = arrivals + np.maximum(slo - prefill_s, 0.0)  # latest dispatch that meets the SLO
    end = arrivals + prefill_s + decode_s  # earliest decode end
    mid = (np.arange(steps) + 0.5) * STEP_SECONDS
    first = np.searchsorted(mid, start, side="left")
    last = np.searchsorted(mid, end, side="left")  # exclusive
    keep = last > first
    delta = np.zeros(steps + 1, dtype=np.int64)
    np.add.at(delta, first[keep], 1)
    np.add.at(delta, last[keep], -1)
    return np.cumsum(delta)[:steps]


def _window_lengths(steps: int) -> list[int]:
    lengths = list(range(1, min(_SHORT_WINDOWS, steps) + 1))
    length = float(_SHORT_WINDOWS)
    while length < steps:
        length *= _WINDOW_GROWTH
        lengths.append(min(steps, int(length)))
    return sorted(set(lengths))


def _window_max(values: np.ndarray, *, before: int, after: int) -> np.ndarray:
    """out[k] = max(values[k - before : k + after + 1]), clipped at the array's ends."""
    n = len(values)
    width = before + after + 1
    # Zero padding: every series here is a non-negative count or rate.
    padded = np.concatenate((np.zeros(before, values.dtype), values, np.zeros(after, values.dtype)))
    # Sparse-table doubling: best[i] = max(padded[i : i + span]).
    best, span = padded, 1
    while span * 2 <= width:
        best = np.maximum(best[:-span], best[span:])
        span *= 2
    return np.maximum(best[:n], best[width - span : width - span + n])


def _hold_level(active: np.ndarray, *, cold_steps: int, warm: bool) -> np.ndarray:
    """GPU holding of one replica level: gaps under a cold start bridged, cold starts added."""
    held = active.copy()
    on = np.flatnonzero(active)
    if len(on) == 0:
        return held.astype(np.int64)
    gaps = np.diff(on) - 1
    for start, gap in zip(on[:-1], gaps, strict=True):
        if 0 < gap < cold_steps:
            held[start + 1 : start + 1 + gap] = True
    if warm and on[0] < cold_steps:
        held[: on[0]] = True  # keeping the warm replica is cheaper than a fresh cold start
    # Each run of serving steps is preceded by its cold start (from 0 if it cannot fit).
    edges = np.flatnonzero(np.diff(np.concatenate(([False], held)).astype(np.int8)) == 1)
    out = held.copy()
    for first in edges:
        if warm and first == 0:
            continue
        out[max(0, first - cold_steps) : first] = True
    return out.astype(np.int64)
