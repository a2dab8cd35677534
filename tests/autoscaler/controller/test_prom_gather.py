"""The gather step's joins across ticks, on answers a stand-in gives in Prometheus's shape
(what is under test is how answers become each workload's samples, not Prometheus): a
gateway workload's queue depth is its pods' plus its gateway's, never one of them alone; a
late answer is joined with the pods of the tick that asked."""

import asyncio

import pytest
from helpers.autoscalers import pod, workload

from gpufleet.autoscaler.controller.prom_gather import PromGather
from gpufleet.autoscaler.controller.stats import Stats
from gpufleet.autoscaler.controller.workload import Tick
from gpufleet.autoscaler.core.gather import RangeSeries


class Answers:
    """Every step of a range query answered: the gateway holds 7, pod a-0 200, pod b-0 50."""

    async def query_range(self, text: str, *, start: float, end: float, step: float):
        times = [start + i * step for i in range(round((end - start) / step) + 1)]
        if "gateway_waiting" in text:
            return (RangeSeries(labels={}, samples=tuple((t, 7.0) for t in times)),)
        if "num_requests_waiting" in text:
            return tuple(
                RangeSeries(
                    labels={"namespace": ns, "pod": name}, samples=tuple((t, v) for t in times)
                )
                for ns, name, v in (("a", "a-0", 200.0), ("b", "b-0", 50.0))
            )
        return ()


@pytest.mark.parametrize(
    "schedule",
    [
        pytest.param(
            [(1000, "VW"), (1005, "V"), (1010, "VW")], id="the gateway workload sat a tick out"
        ),
        pytest.param([(1000, "V"), (1010, "VW")], id="created after the shared query ran"),
    ],
)
async def test_a_gateways_queue_is_never_summed_without_the_pods(schedule) -> None:
    """W (pod a-0 and a gateway) shares the pods' queue query with V. Where the shared query
    had answered without W's pods (W new, or out of a tick), the gateway's backfill gave
    samples of 7 alone: the sum only where both answered for W."""
    w, v = workload("a", "sum(gateway_waiting)"), workload("b")
    workloads = {w.key: w, v.key: v}
    gather = PromGather(Answers(), Stats(), step_seconds=1.0, history_seconds=60, wait_seconds=5)
    for now, members in schedule:
        ticks = [Tick(workload=v, pods=[pod("b", "b-0")])] if "V" in members else []
        ticks += [Tick(workload=w, pods=[pod("a", "a-0")])] if "W" in members else []
        await gather.gather(ticks, workloads, now)
    queue = w.history.observe(schedule[-1][0], ()).queue_depth
    assert queue.values and set(queue.values) == {207.0}


class HeldAnswers:
    """Pods a-0 (200) and a-1 (50) queue at every step; the queue query is held until
    `release` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.asked = asyncio.Event()

    async def query_range(self, text: str, *, start: float, end: float, step: float):
        if "num_requests_waiting" not in text:
            return ()
        self.asked.set()
        await self.release.wait()
        times = [start + i * step for i in range(round((end - start) / step) + 1)]
        return tuple(
            RangeSeries(
                labels={"namespace": "a", "pod": name}, samples=tuple((t, v) for t in times)
            )
            for name, v in (("a-0", 200.0), ("a-1", 50.0))
        )


async def test_a_late_answer_keeps_the_pods_of_the_tick_that_asked() -> None:
    """A query a tick stopped waiting for answers for the times of that tick's pods. Pod a-1
    was deleted before the next tick took the answer: its queue in those times was still W's
    (250), not lost because the taking tick no longer listed it (200)."""
    w = workload("a")
    prom = HeldAnswers()
    gather = PromGather(prom, Stats(), step_seconds=1.0, history_seconds=60, wait_seconds=0.01)
    await gather.gather(
        [Tick(workload=w, pods=[pod("a", "a-0"), pod("a", "a-1")])], {w.key: w}, 1000
    )
    assert prom.asked.is_set() and w.history.latest_time("queue_depth") is None  # late
    prom.release.set()
    await asyncio.wait_for(asyncio.gather(*(f.task for f in gather._late.values())), 30)
    await gather.gather([Tick(workload=w, pods=[pod("a", "a-0")])], {w.key: w}, 1005)
    queue = w.history.observe(1000, ()).queue_depth
    assert queue.values and set(queue.values) == {250.0}


async def test_a_chain_of_late_answers_keeps_only_the_asking_ticks_pods() -> None:
    """Each late fetch kept the pods it was joined with, its predecessor's too: while the
    query stayed late, every pod ever seen was carried on."""
    w = workload("a")
    prom = HeldAnswers()
    gather = PromGather(prom, Stats(), step_seconds=1.0, history_seconds=60, wait_seconds=0.01)
    for i, now in enumerate((1000, 1005, 1010)):
        prom.release.clear()
        await gather.gather([Tick(workload=w, pods=[pod("a", f"a-{i}")])], {w.key: w}, now)
        prom.release.set()
        await asyncio.wait_for(asyncio.gather(*(f.task for f in gather._late.values())), 30)
        prom.release.clear()
    assert gather._late
    assert all(set(late.owners) == {("a", "a-2")} for late in gather._late.values())
