"""The gather step's joins across ticks, on answers a stand-in gives in Prometheus's shape
(what is under test is how answers become each workload's samples, not Prometheus): a
gateway workload's queue depth is its pods' plus its gateway's, never one of them alone; a
late answer is joined with the pods of the tick that asked."""

import asyncio
import math
import random
from collections.abc import Callable

import pytest
from helpers.autoscalers import pod, workload

from gpufleet.autoscaler.controller.prom_gather import FORGET_EVERY_STEPS, PromGather
from gpufleet.autoscaler.controller.stats import Stats
from gpufleet.autoscaler.controller.workload import Tick, Workload
from gpufleet.autoscaler.core.gather import RangeSeries
from gpufleet.autoscaler.prom.client import PromError, PromErrorKind


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
        await gather.gather(ticks, workloads, now, monotonic=now)
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
        [Tick(workload=w, pods=[pod("a", "a-0"), pod("a", "a-1")])],
        {w.key: w},
        1000,
        monotonic=1000,
    )
    assert prom.asked.is_set() and w.history.latest_time("queue_depth") is None  # late
    prom.release.set()
    await asyncio.wait_for(asyncio.gather(*(f.task for f in gather._late.values())), 30)
    await gather.gather(
        [Tick(workload=w, pods=[pod("a", "a-0")])], {w.key: w}, 1005, monotonic=1005
    )
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
        await gather.gather(
            [Tick(workload=w, pods=[pod("a", f"a-{i}")])], {w.key: w}, now, monotonic=now
        )
        prom.release.set()
        await asyncio.wait_for(asyncio.gather(*(f.task for f in gather._late.values())), 30)
        prom.release.clear()
    assert gather._late
    assert all(set(late.owners) == {("a", "a-2")} for late in gather._late.values())


class Logged(Answers):
    """Answers, logging each query's range; a query holding any of `fail` raises."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, float, float]] = []
        self.fail: set[str] = set()

    async def query_range(self, text: str, *, start: float, end: float, step: float):
        self.asked.append((text, start, end))
        if any(part in text for part in self.fail):
            raise PromError(PromErrorKind.UNAVAILABLE, "down")
        return await super().query_range(text, start=start, end=end, step=step)


def ticks_of(members: str, **workloads: Workload) -> list[Tick]:
    """A tick for each named workload in `members`, with its one pod `<namespace>-0`."""
    return [
        Tick(workload=w, pods=[pod(w.key[0], f"{w.key[0]}-0")])
        for name, w in workloads.items()
        if name in members
    ]


@pytest.mark.parametrize(
    "schedule",
    [
        pytest.param([(1000, "V"), (1010, "VW")], id="created after the shared query ran"),
        pytest.param([(1000, "VW"), (1005, "V"), (1010, "VW")], id="W sat a tick out"),
    ],
)
async def test_a_workload_joining_a_shared_query_gets_its_history(schedule) -> None:
    """V and W send the same queue query, fetched once for both. W, made after V or back
    from a tick it sat out (busy, or its read raised), got only the samples since: a
    forecast on seconds of history, or a gap for good. The times it lacks are fetched
    again for it; once it has them, one fetch of what is new serves both again."""
    w, v = workload("a"), workload("b")
    prom, stats = Logged(), Stats()
    gather = PromGather(prom, stats, step_seconds=1.0, history_seconds=60, wait_seconds=5)
    for now, members in schedule:
        await gather.gather(ticks_of(members, V=v, W=w), {w.key: w, v.key: v}, now, monotonic=now)
    end = schedule[-1][0]
    for x in (v, w):
        queue = x.history.observe(end, ()).queue_depth
        assert queue.times == tuple(float(t) for t in range(end - 60, end + 1))
    backfills = stats.backfill_queries
    assert backfills == len(w.queries)  # one per query W lacked (the self-metric)
    before = len(prom.asked)
    await gather.gather(ticks_of("VW", V=v, W=w), {w.key: w, v.key: v}, end + 5, monotonic=end + 5)
    assert stats.backfill_queries == backfills
    assert {(start, stop) for _, start, stop in prom.asked[before:]} == {(end + 1, end + 5)}
    assert len(prom.asked) - before == len({t for t, _, _ in prom.asked})  # once each


async def test_a_gpuautoscaler_made_again_gets_its_history() -> None:
    """Deleted and made again under the same name: a new history, handed nothing yet."""
    w, v = workload("a"), workload("b")
    gather = PromGather(Logged(), Stats(), step_seconds=1.0, history_seconds=60, wait_seconds=5)
    await gather.gather(ticks_of("VW", V=v, W=w), {w.key: w, v.key: v}, 1000, monotonic=1000)
    w = workload("a")
    await gather.gather(ticks_of("VW", V=v, W=w), {w.key: w, v.key: v}, 1005, monotonic=1005)
    assert len(w.history.observe(1005, ()).queue_depth.times) == 61


@pytest.mark.parametrize("variant", ["a third joins", "V comes back"])
async def test_a_backfill_never_makes_a_gateways_queue_count_a_time_twice(variant) -> None:
    """W (pod a-0 and a gateway) shares the pods' queue query with V. The gateway's query
    fails once, so W's sums for those times wait for it. The pods' query fetched again
    for a workload that lacked those times (the fault of a2f1ee8, reverted) must not add
    the pods' 200 to W's waiting sums a second time: 407 for 207."""
    w, v, u = workload("a", "sum(gateway_waiting)"), workload("b"), workload("c")
    workloads = {x.key: x for x in (w, v, u)}
    prom = Logged()
    gather = PromGather(prom, Stats(), step_seconds=1.0, history_seconds=60, wait_seconds=5)
    await gather.gather(ticks_of("VW", V=v, W=w), workloads, 1000, monotonic=1000)
    prom.fail = {"gateway_waiting"}
    await gather.gather(
        ticks_of("W" if variant == "V comes back" else "VW", V=v, W=w),
        workloads,
        1005,
        monotonic=1005,
    )
    prom.fail = set()
    await gather.gather(ticks_of("VWU", V=v, W=w, U=u), workloads, 1010, monotonic=1010)
    queue = w.history.observe(1010, ()).queue_depth
    assert set(queue.values) == {207.0} and len(queue.values) == 61


class Holds(Answers):
    """Answers at once, except a range `held(start, end)` picks: held until `release` is
    set (for good where a test never sets it)."""

    def __init__(self) -> None:
        self.held: Callable[[float, float], bool] = lambda start, end: False
        self.release = asyncio.Event()

    async def query_range(self, text: str, *, start: float, end: float, step: float):
        if self.held(start, end):
            await self.release.wait()
        return await super().query_range(text, start=start, end=end, step=step)


async def test_a_backfill_never_holds_up_what_is_new() -> None:
    """U joins V's queries while Prometheus cannot answer the backfill: V's and U's fresh
    samples still come every tick (the backfill has a lane of its own), the tick does not
    wait for it (an hour's wait: a tick that waited would never end here), and U's
    history comes when the backfill answers."""
    v, u = workload("b"), workload("a")
    workloads = {v.key: v, u.key: u}
    prom = Holds()
    gather = PromGather(prom, Stats(), step_seconds=1.0, history_seconds=60, wait_seconds=3600)
    await gather.gather(ticks_of("V", V=v, U=u), workloads, 1000, monotonic=1000)
    prom.held = lambda start, end: start < 1001  # the times before U joined
    for now in (1005, 1010, 1015):
        await asyncio.wait_for(
            gather.gather(ticks_of("VU", V=v, U=u), workloads, now, monotonic=now), 30
        )
        assert v.history.latest_time("queue_depth") == now
        assert u.history.latest_time("queue_depth") == now
    assert len(u.history.observe(1015, ()).queue_depth.times) == 15  # 1001..1015 only
    prom.release.set()
    await asyncio.wait_for(asyncio.gather(*(f.task for f in gather._late.values())), 30)
    for now in (1020, 1025):  # the held chunk, taken; then the rest of the gap
        await gather.gather(ticks_of("VU", V=v, U=u), workloads, now, monotonic=now)
    assert len(u.history.observe(1025, ()).queue_depth.times) == 61


QUEUE, RUNNING = "(vllm:num_requests_waiting{})", "(vllm:num_requests_running{})"
PROMPTS = "request_prompt_tokens_bucket"


def pod_queue(pod_name: str, t: float) -> float:
    return 100.0 * (1 + ord(pod_name[0]) - ord("a")) + t % 7


def gateway_queue(t: float) -> float:
    return 7.0 + t % 3


COPY = -1e6  # a step still to come, as Prometheus' lookback answers it


class Chaos:
    """Prometheus holding each pod's series as a function of time, and a gateway's; each
    query, as `rng` draws, answers, fails, or is held until `release_some` lets it go.
    Steps past its clock `now` when asked are answered with copies (COPY)."""

    def __init__(self, rng: random.Random, pods: list[tuple[str, str]]) -> None:
        self.rng, self.pods = rng, pods
        self.p_fail = self.p_hold = 0.15
        self.held: list[asyncio.Event] = []
        self.now = math.inf

    async def query_range(self, text: str, *, start: float, end: float, step: float):
        draw = self.rng.random()
        if draw < self.p_fail:
            raise PromError(PromErrorKind.UNAVAILABLE, "down")
        asked = self.now
        if draw < self.p_fail + self.p_hold:
            self.held.append(event := asyncio.Event())
            await event.wait()
        times = [start + i * step for i in range(round((end - start) / step) + 1)]

        def series(labels: dict[str, str], value: Callable[[float], float]) -> RangeSeries:
            return RangeSeries(
                labels=labels, samples=tuple((t, value(t) if t <= asked else COPY) for t in times)
            )

        if "gateway_waiting" in text:
            return (series({}, gateway_queue),)
        out = []
        for ns, name in self.pods:
            labels = {"namespace": ns, "pod": name}
            if text.endswith(QUEUE):
                out.append(series(labels, lambda t, name=name: pod_queue(name, t)))
            elif text.endswith(RUNNING):
                out.append(series(labels, lambda t: 1.0))
            elif PROMPTS in text:
                for le, value in (("1000", 1.0), ("+Inf", 2.0)):
                    out.append(series({**labels, "le": le}, lambda t, v=value: v))
        return tuple(out)

    def release_some(self, share: float) -> None:
        for event in self.held:
            if self.rng.random() < share:
                event.set()
        self.held = [e for e in self.held if not e.is_set()]


def chaos_world(seed: int):
    """Four workloads sharing their queries: W and X each add the same gateway query's
    queue, V and U do not; the Chaos answering them, and the gather."""
    rng = random.Random(seed)
    gateway = "sum(gateway_waiting)"
    made = {"W": ("a", gateway), "X": ("d", gateway), "V": ("b", ""), "U": ("c", "")}
    prom = Chaos(rng, [(ns, f"{ns}-0") for ns, _ in made.values()])
    live = {name: workload(ns, gw) for name, (ns, gw) in made.items()}
    gather = PromGather(prom, Stats(), step_seconds=1.0, history_seconds=60, wait_seconds=0.01)
    return rng, made, prom, live, gather


@pytest.mark.parametrize("seed", range(30))
async def test_every_workload_ends_with_what_it_would_have_fetched_alone(seed: int) -> None:
    """Four workloads share their queries: W and X each add a gateway's queue (the same
    gateway query), V and U do not. Each tick a random few take part, GPUAutoscalers are
    deleted and made again, and queries fail or answer ticks late. Every sample taken must
    be exactly what fetching that workload alone gives (a sum never counts one part twice
    or misses one), and once Prometheus answers again every workload holds every time of
    its window: nothing joining, sitting out or coming back loses its history."""
    rng, made, prom, live, gather = chaos_world(seed)
    now = 1000
    for _ in range(25):
        for name, (ns, gw) in made.items():
            if rng.random() < 0.05:
                live[name] = workload(ns, gw)  # deleted and made again
        members = "".join(name for name in live if rng.random() < 0.7)
        await gather.gather(
            ticks_of(members, **live), {w.key: w for w in live.values()}, now, monotonic=now
        )
        prom.release_some(rng.random())
        await asyncio.sleep(0)
        now += rng.choice((1, 5, 5, 20))
    prom.p_fail = prom.p_hold = 0.0
    prom.release_some(1.0)
    for _ in range(5):  # a second apart: the window still holds the chaos's times
        await asyncio.wait_for(asyncio.gather(*(f.task for f in gather._late.values())), 30)
        await gather.gather(
            ticks_of("WXVU", **live), {w.key: w for w in live.values()}, now, monotonic=now
        )
        now += 1
    every_window_exact(live, made, now - 1)


def every_window_exact(live: dict[str, Workload], made: dict, end: float) -> None:
    """Every workload holds every time of its window at `end`, each sample (and every one
    it took before) exactly what fetching it alone gives."""
    for name, w in live.items():
        ns, gw = made[name]
        obs = w.history.observe(end, ())
        times = tuple(float(t) for t in range(end - 60, end + 1))
        pods = pod_queue(f"{ns}-0", 0) - pod_queue(f"{ns}-0", 0) % 100
        expected = tuple(pods + t % 7 + (gateway_queue(t) if gw else 0.0) for t in times)
        assert obs.queue_depth.times == times, name
        assert obs.queue_depth.values == expected, name
        assert obs.in_flight.times == times and set(obs.in_flight.values) == {1.0}, name
        assert obs.prompt_tokens_buckets.times == times, name
        # and every sample taken before, in the chaos, was as exact
        for t, value in zip(
            w.history._times["queue_depth"], w.history._values["queue_depth"], strict=True
        ):
            assert value == pods + t % 7 + (gateway_queue(t) if gw else 0.0), (name, t)


@pytest.mark.parametrize("seed", range(30))
async def test_copies_fetched_on_a_clock_ahead_all_go(seed: int) -> None:
    """The chaos above, on a loop clock ahead of Prometheus' by a lead that comes and
    goes (up to 1.5 x the history): every tick asks for the steps to its own time, and
    Prometheus answers those still to come with copies. Once the loop's time is right
    and the window has turned over, every workload holds every time of its window
    exactly: no copy stays, no time is missing, no sum counts a part twice."""
    rng, made, prom, live, gather = chaos_world(seed)
    at, lead = 1000, 0
    for _ in range(40):
        if rng.random() < 0.2:
            lead = rng.choice((0, 0, 2, 5, 20, 45, 90))
        members = "".join(name for name in live if rng.random() < 0.7)
        prom.now = at
        workloads = {w.key: w for w in live.values()}
        await gather.gather(ticks_of(members, **live), workloads, at + lead, monotonic=at)
        prom.release_some(rng.random())
        await asyncio.sleep(0)
        at += rng.choice((1, 5, 5, 20))
    prom.p_fail = prom.p_hold = 0.0
    prom.release_some(1.0)
    # Right again, for longer than the lead and the window: a copy as far ahead as the
    # lead moved the history's bound on what it keeps, and the times that cost age out.
    for _ in range(30):
        await asyncio.wait_for(asyncio.gather(*(f.task for f in gather._late.values())), 30)
        prom.now = at
        workloads = {w.key: w for w in live.values()}
        await gather.gather(ticks_of("WXVU", **live), workloads, at, monotonic=at)
        at += 5
    every_window_exact(live, made, at - 5)


async def test_a_gateway_taken_out_of_the_spec_leaves_no_gap() -> None:
    """W's gateway query failed at 1005, so its pods' part of those times waited for it.
    The spec then dropped the gateway (the history kept): the waiting sums went, and the
    pods' times they held must be handed again, not stay a gap for good."""
    w, v = workload("a", "sum(gateway_waiting)"), workload("b")
    prom = Logged()
    gather = PromGather(prom, Stats(), step_seconds=1.0, history_seconds=60, wait_seconds=5)
    await gather.gather(ticks_of("VW", V=v, W=w), {w.key: w, v.key: v}, 1000, monotonic=1000)
    prom.fail = {"gateway_waiting"}
    await gather.gather(ticks_of("VW", V=v, W=w), {w.key: w, v.key: v}, 1005, monotonic=1005)
    prom.fail = set()
    w = workload("a", old=w)
    for now in (1010, 1015):
        await gather.gather(ticks_of("VW", V=v, W=w), {w.key: w, v.key: v}, now, monotonic=now)
    queue = w.history.observe(1015, ()).queue_depth
    assert queue.times == tuple(float(t) for t in range(955, 1016))
    assert dict(zip(queue.times, queue.values, strict=True))[1003.0] == 200.0


async def test_a_step_that_does_not_divide_the_history_still_meets_the_sums() -> None:
    """--scrape-interval-seconds 7 with a 60 s history: a fetch from `end - 60` asked
    off the steps' grid, so a joining gateway workload's sums met only half: the pods'
    200 alone at one time, the gateway's 7 alone at the next."""
    w, v = workload("a", "sum(gateway_waiting)"), workload("b")
    gather = PromGather(Logged(), Stats(), step_seconds=7.0, history_seconds=60, wait_seconds=5)
    await gather.gather(ticks_of("V", V=v, W=w), {w.key: w, v.key: v}, 1001, monotonic=1001)
    for now in (1008, 1015, 1022):
        await gather.gather(ticks_of("VW", V=v, W=w), {w.key: w, v.key: v}, now, monotonic=now)
    queue = w.history.observe(1022, ()).queue_depth
    assert len(queue.values) == 9 and set(queue.values) == {207.0}


async def test_what_was_handed_before_the_history_is_forgotten() -> None:
    """W sits out every other tick and its backfills never answer, so each absence leaves a
    run of handed times of its own. Ticks two steps apart from an odd step: a forgetting
    that waited for a step divisible by its period never came, and the runs grew for as
    long as the controller ran."""
    w, v = workload("a"), workload("b")
    prom, now = Holds(), 999
    prom.held = lambda start, end: end < now  # a backfill: never answered
    gather = PromGather(prom, Stats(), step_seconds=1.0, history_seconds=60, wait_seconds=5)
    await gather.gather(
        ticks_of("VW", V=v, W=w), {w.key: w, v.key: v}, 999, monotonic=999
    )  # all answered
    for i in range(400):
        now = 1001 + 2 * i
        members = "VW" if i % 2 == 0 else "V"
        await gather.gather(ticks_of(members, V=v, W=w), {w.key: w, v.key: v}, now, monotonic=now)
    runs = max(len(spans._spans) for spans in gather._handed[w.key].spans.values())
    assert runs <= (FORGET_EVERY_STEPS + 60) // 4 + 1
    gather.close()


@pytest.mark.parametrize(
    "schedule",
    [
        pytest.param(
            [(1000, 1060, True), (1005, 1005, True), (1010, 1010, True)],
            id="a-minute-ahead-then-read",
        ),
        pytest.param(
            [(1000, 1060, False), (1005, 1013, True), (1010, 1010, True), (1015, 1015, True)],
            id="then-read-8-s-short-then-right",  # the first reading, off by its round trip
        ),
        pytest.param(
            [(1000, 1000, True), (1005, 975, False), (1010, 1010, True)],
            id="behind-unread-takes-back-nothing",  # this clock stepped back, time() failing
        ),
    ],
)
async def test_steps_fetched_while_still_to_come_are_fetched_again(schedule, caplog) -> None:
    """A tick on a clock a minute ahead of Prometheus' asked for a minute of steps still
    to come: copies stood in the history for them, and once the loop's time was right the
    real samples were never asked (each query counted as fetched a minute ahead). A tick
    that read Prometheus' clock places the earlier ones by the monotonic clock: the steps
    each asked ahead go, from the histories, the gateway's waiting sums and what each
    workload was handed, and are asked again. A tick whose clock was not read judges
    none: its own time may be what is wrong."""
    _, made, prom, live, gather = chaos_world(0)
    prom.p_fail = prom.p_hold = 0.0  # every query answers: only the clock is at play
    workloads = {w.key: w for w in live.values()}
    for at, now, read in schedule:
        prom.now = at
        await gather.gather(ticks_of("WXVU", **live), workloads, now, monotonic=at, read_now=read)
        await asyncio.sleep(0)  # the backfill, beside the tick
    every_window_exact(live, made, schedule[-1][0])
    took_back = any("fetched ahead is fetched again" in r.message for r in caplog.records)
    assert took_back == (schedule[0][1] > schedule[0][0])
    gather.close()
