"""The `gpufleet` policy end to end in the simulator: burst reaction, learning, steady SLO."""

import itertools
import re

import numpy as np
import pytest

from gpufleet.autoscaler.core.factory import Tuning
from gpufleet.autoscaler.core.gpufleet_policy import GpufleetPolicy
from gpufleet.autoscaler.core.gpufleet_settings import GpufleetSettings
from gpufleet.autoscaler.core.policy import Reason
from gpufleet.autoscaler.core.workload import WorkloadConfig
from gpufleet.autoscaler.replay.core import sweep
from gpufleet.autoscaler.replay.core.engine import simulate
from gpufleet.autoscaler.replay.core.model import PipelineModel, ReplayConfig
from gpufleet.autoscaler.replay.core.trace import trace_from_arrays
from gpufleet.autoscaler.replay.core.workloads import workload_trace
from gpufleet.autoscaler.replay.settings import SimulateSettings

PROMPT = 2000  # tokens: prefill-bound at the default 15k tokens/s, 7.5 requests/s per replica
OUTPUT = 20


def steady_then_burst(*, base_rps: float, burst_rps: float, start: float, seconds: float):
    """Evenly spaced arrivals: `base_rps` until `start`, `burst_rps` for `seconds`, then base."""
    before = np.arange(0.0, start, 1.0 / base_rps)
    burst = np.arange(start, start + seconds, 1.0 / burst_rps)
    after = np.arange(start + seconds, start + seconds + 120.0, 1.0 / base_rps)
    t = np.concatenate([before, burst, after])
    return trace_from_arrays(t, np.full(t.size, PROMPT), np.full(t.size, OUTPUT))


# A burst starting just before a scrape barely shows in that sample; it shows in the next.
@pytest.mark.parametrize(
    "start", [300.0, 302.5, 303.5], ids=["at-a-scrape", "mid-interval", "late-in-interval"]
)
def test_first_scale_up_on_the_first_tick_the_burst_is_visible(start: float) -> None:
    # 80/s: even the 1.5 s of it in a late-in-interval sample is more than the two replicas
    # serve (15/s), so the first sample showing it must scale up; a smaller share of a
    # sample that the fleet can absorb is, correctly, acted on one sample later.
    trace = steady_then_burst(base_rps=2.0, burst_rps=80.0, start=start, seconds=30.0)
    workload = WorkloadConfig(name="burst", min_replicas=1, max_replicas=20)
    policy = GpufleetPolicy(workload)
    config = ReplayConfig(initial_replicas=2)
    result = simulate(trace, policy, workload=workload, config=config)
    pipe: PipelineModel = config.pipeline
    scrape = pipe.scrape_interval_seconds * (np.floor(start / pipe.scrape_interval_seconds) + 1)
    visible = scrape + pipe.evaluation_seconds + pipe.query_seconds
    first_tick = policy.interval_seconds * np.ceil(visible / policy.interval_seconds)
    before = [d.desired for d in result.decisions if d.t < start]
    ups = [d for d in result.decisions if d.t >= start and d.desired > before[-1]]
    assert ups, "no scale-up for a 40x burst"
    assert ups[0].t == pytest.approx(first_tick)
    assert ups[0].reason == Reason.BURST
    # The pipeline hides a burst for up to one scrape plus evaluation and query.
    assert ups[0].t - start <= pipe.scrape_interval_seconds + 1.5 + policy.interval_seconds


def test_learns_the_simulated_service_rate_when_saturated() -> None:
    t = np.arange(0.0, 300.0, 1.0 / 12.0)  # 12/s on one replica that serves 7.5/s
    trace = trace_from_arrays(t, np.full(t.size, PROMPT), np.full(t.size, OUTPUT))
    workload = WorkloadConfig(name="hot", min_replicas=1, max_replicas=1)
    result = simulate(trace, GpufleetPolicy(workload), workload=workload, config=ReplayConfig())
    last = result.decisions[-1].message
    m = re.search(r"capacity ([\d.]+)/s per replica \(learned, (\d+) samples\)", last)
    assert m is not None, last
    assert float(m.group(1)) == pytest.approx(15_000 / PROMPT, rel=0.1)
    assert int(m.group(2)) >= 20


def test_steady_traffic_meets_the_slo_within_bounds() -> None:
    t = np.arange(0.0, 900.0, 1.0 / 20.0)  # 20/s: about 3 replicas' worth
    trace = trace_from_arrays(t, np.full(t.size, PROMPT), np.full(t.size, OUTPUT))
    workload = WorkloadConfig(name="steady", min_replicas=2, max_replicas=6)
    config = ReplayConfig(initial_replicas=4)
    result = simulate(trace, GpufleetPolicy(workload), workload=workload, config=config)
    assert result.slo_attainment >= 0.99
    assert all(2 <= d.desired <= 6 for d in result.decisions)
    assert max(d.desired for d in result.decisions[-60:]) <= 5  # not pinned at max


def test_a_higher_target_attainment_never_attains_less_on_a_flash_crowd() -> None:
    # Issue 17: the knob buys standing capacity monotonically. A 10x crowd of two minutes,
    # shorter than the lead time, on a seeded tuning trace (seed 0, never a held-out one).
    defaults = SimulateSettings.model_construct()
    trace = workload_trace("flash:height=10,length=120,duration=600", seed=0, scale=4)
    attained, billed = [], []
    for target in (0.5, 0.9, 0.99, 0.999, 0.99999):
        (spec,) = sweep.plan(
            [trace],
            ["gpufleet"],
            workload=defaults.workload(),
            config=defaults.sim_config(),
            tuning=Tuning(gpufleet_target_attainment=target),
            sweep=False,
            warm_start=True,
        )
        result = sweep.run(spec)
        attained.append(result.slo_attainment)
        billed.append(result.node_gpu_hours)
    assert attained == sorted(attained)
    assert attained[-2] >= 0.99 > attained[1]  # the top stands for the crowd; 90% does not
    # and never pays less: 99.999% stands more than 99.9% for the same crowd. Except by one
    # tick of one node: a larger fleet carries a crowd a tick longer before it buys the
    # same node (99% bought the crowd's node at 330 s, 90% at 328 s).
    tick = GpufleetSettings().interval_seconds * defaults.gpus_per_node / 3600.0
    assert all(more >= less - tick for less, more in itertools.pairwise(billed))
    assert billed[-1] > billed[-2] > billed[1] > billed[0]
