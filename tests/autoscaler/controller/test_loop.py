"""The live controller on the fake API server (official client, real HTTP) and real Prometheus
scraping a pod that serves vLLM's metric names: it scales, writes status and events, holds on
missing metrics, refuses to fight an HPA, and turns a bad spec into a condition."""

import asyncio
import dataclasses
import itertools
import logging
import math
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator

import aiohttp
import pytest
from aiohttp import web
from helpers import wait_for
from helpers.e2e import Prometheus
from helpers.kube import create_autoscaler, create_vllm
from helpers.serving import MetricsServer, vllm_queue
from helpers.tools import require
from kubernetes import client

from gpufleet.autoscaler.controller import Controller, ControllerConfig
from gpufleet.autoscaler.core.extmetrics import SnapshotFeed, desired_ratio
from gpufleet.autoscaler.core.observation import Observation
from gpufleet.autoscaler.core.placeholders import placeholder_deployment, placeholder_name
from gpufleet.autoscaler.core.policy import Decision, Policy, Reason
from gpufleet.autoscaler.core.signals import GPU_TELEMETRY
from gpufleet.autoscaler.kube.cluster import Cluster, ClusterView
from gpufleet.autoscaler.prom.client import PromClient
from gpufleet.kube.events import EventRecorder
from gpufleet.lab.kubeapi.server import FakeApiServer
from gpufleet.lab.workload import LABELS

pytestmark = pytest.mark.prometheus
NS = "llm"
GPA = ("autoscaling.gpufleet.dev", "v1alpha1", NS, "gpuautoscalers")


@pytest.fixture(scope="module")
def serving_pod() -> Iterator[str]:
    server = MetricsServer(vllm_queue())
    yield server.address
    server.stop()


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def api(apiserver: FakeApiServer) -> Iterator[client.ApiClient]:
    config = client.Configuration()
    config.host = apiserver.url
    with client.ApiClient(config) as api_client:
        yield api_client


def deploy(api: client.ApiClient, *, replicas: int = 1, gpus: int | None = None) -> None:
    create_vllm(api, NS, replicas=replicas, ready_pod="vllm-0", gpus=gpus)


def autoscaler(api: client.ApiClient, spec: dict) -> None:
    create_autoscaler(api, NS, spec)


KEDA_SPEC = {
    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
    "maxReplicas": 8,
    "policy": "keda",
    "keda": {"queueTarget": 10, "pollingIntervalSeconds": 1},
}


def controller(
    api: client.ApiClient,
    prometheus_url: str,
    *,
    headroom: bool = True,
    is_leader: Callable[[], bool] = lambda: True,
    query_timeout: float = 5.0,
    query_wait: float = 1.0,
    feed: SnapshotFeed | None = None,
    clock: Callable[[], float] = time.time,
    cluster: Cluster | None = None,
) -> tuple[Controller, PromClient]:
    prom = PromClient(prometheus_url, timeout_seconds=query_timeout)
    events = EventRecorder(api, controller="gpufleet.dev/autoscaler", instance="test-0")
    config = ControllerConfig(
        scrape_interval_seconds=1.0,
        rate_window="5s",
        headroom=headroom,
        wait_seconds=query_wait,
    )
    ctl = Controller(
        cluster or Cluster(api),
        prom,
        events,
        config=config,
        is_leader=is_leader,
        feed=feed,
        clock=clock,
    )
    return ctl, prom


async def one_tick_without_prometheus(api: client.ApiClient) -> Controller:
    """A controller's one tick with nothing listening for Prometheus: every signal
    missing, the count held (never lowered)."""
    ctl, prom = controller(api, "http://127.0.0.1:9")
    try:
        await ctl.tick()
    finally:
        await prom.close()
    return ctl


def status(api: client.ApiClient) -> dict:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(*GPA, "chat").get("status", {})


def conditions(api: client.ApiClient) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status(api).get("conditions", [])}


def scale(api: client.ApiClient) -> int:
    return client.AppsV1Api(api).read_namespaced_deployment_scale("vllm", NS).spec.replicas


POD_LABELS = {"namespace": NS, "pod": "vllm-0"}


def wait_scraped(prometheus: Prometheus, metric: str = "vllm:num_requests_waiting") -> None:
    """Until `prometheus` holds three scrapes of `metric`: enough for a rate."""
    wait_for(
        lambda: prometheus.query(f"count_over_time({metric}[1m]) >= 3"),
        timeout=30,
        what=f"three scrapes of {metric}",
    )


async def scraped(prometheus: Prometheus, metric: str = "vllm:num_requests_waiting") -> Prometheus:
    """`prometheus` once it holds three scrapes of `metric`."""
    await asyncio.to_thread(wait_scraped, prometheus, metric)
    return prometheus


@pytest.fixture(scope="module")
def pod_prometheus(
    serving_pod: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    """Prometheus scraping `serving_pod`, once for the module: the tests' controllers only
    query it, and a Prometheus takes seconds to start and scrape."""
    require("prometheus")
    prometheus = Prometheus(tmp_path_factory.mktemp("prom"), serving_pod, labels=POD_LABELS)
    try:
        wait_scraped(prometheus)
        yield prometheus
    finally:
        prometheus.stop()


async def ticks_until(ctl: Controller, predicate, *, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await ctl.tick()
        await asyncio.sleep(0.2)


async def test_it_scales_a_deployment_on_vllm_queue_depth(
    api: client.ApiClient, pod_prometheus: Prometheus, apiserver: FakeApiServer
) -> None:
    deploy(api)
    autoscaler(api, KEDA_SPEC)
    ctl, prom = controller(api, f"http://127.0.0.1:{pod_prometheus.port}")
    try:
        await ticks_until(ctl, lambda: scale(api) > 1)
    finally:
        await prom.close()
    # KEDA on 200 queued at 10 per replica wants 20; its HPA, with no behavior set, takes
    # at most max(2x, 4) replicas in one step.
    assert scale(api) == 4, status(api).get("message")
    s = status(api)
    assert (s["currentReplicas"], s["desiredReplicas"]) == (1, 4)
    assert s["reason"] == "RateLimited" and "limited to 4 by legacy cap" in s["message"]
    assert s["signals"]["queue_depth"] == 200.0 and s["observedGeneration"] == 1
    assert conditions(api)["AbleToScale"] == ("True", "ReadyForNewScale")
    assert conditions(api)["ScalingActive"] == ("True", "ValidMetricFound")
    (event,) = client.EventsV1Api(api).list_namespaced_event(NS).items
    assert event.regarding.name == "chat" and "1 -> 4 replicas" in event.note
    patches = [
        r for r in apiserver.requests if r.method in ("PUT", "PATCH") and r.path.endswith("/scale")
    ]
    assert len(patches) == 1  # written once, only when the count changed
    # A flag, not the reason text: /metrics renders it as 0 or 1.
    assert ctl.stats.missing_metrics == {f"{NS}/chat": False}


async def test_a_deleted_gpuautoscaler_leaves_no_series_and_no_query_state(
    api: client.ApiClient, pod_prometheus: Prometheus
) -> None:
    """Its missing-metrics and max-replicas series stayed until a restart, so the
    AutoscalerMissingMetrics and AutoscalerPinnedAtMax alerts kept firing for it; and
    each deleted workload's queries stayed in the fetch bookkeeping."""
    deploy(api)
    autoscaler(api, KEDA_SPEC)
    ctl, prom = controller(api, f"http://127.0.0.1:{pod_prometheus.port}")
    try:
        await ticks_until(ctl, lambda: ctl.stats.decisions)
        name = f"{NS}/chat"
        assert name in ctl.stats.max_replicas and name in ctl.stats.missing_metrics
        asked = set(ctl._gather._fetched_until)
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            "autoscaling.gpufleet.dev", "v1alpha1", NS, "gpuautoscalers", "chat"
        )
        await ctl.tick()
    finally:
        await prom.close()
    s = ctl.stats
    per_workload = (s.desired, s.current, s.ready, s.max_replicas, s.missing_metrics)
    assert not any(per_workload) and not s.decisions
    # the exporter's per-pod GPU queries are asked for every tick, workloads or not
    assert set(ctl._gather._fetched_until) == set(GPU_TELEMETRY.values()) < asked


@pytest.fixture
async def gateway_workload(api: client.ApiClient, prometheus_for) -> AsyncIterator[Prometheus]:
    """The workload `chat` whose queue is its pod's 200 waiting plus a gateway's 7
    (signals.gatewayQueueDepth), and Prometheus scraping both."""
    pod_queue = vllm_queue()
    server = MetricsServer(
        lambda: pod_queue() + "# TYPE gateway_waiting gauge\ngateway_waiting 7\n"
    )
    try:
        deploy(api)
        prometheus = await scraped(prometheus_for(server.address, labels=POD_LABELS))
        autoscaler(api, {**KEDA_SPEC, "signals": {"gatewayQueueDepth": "sum(gateway_waiting)"}})
        yield prometheus
    finally:
        server.stop()


async def test_a_gateways_queue_adds_to_the_pods_queue(
    api: client.ApiClient, gateway_workload: Prometheus
) -> None:
    """Issue 18 §3: signals.gatewayQueueDepth is the workload's whole (no pod label joins
    it), summed into the queue depth with its pods' 200 waiting."""
    ctl, prom = controller(api, f"http://127.0.0.1:{gateway_workload.port}")
    try:
        await ticks_until(ctl, lambda: "queue_depth" in status(api).get("signals", {}))
    finally:
        await prom.close()
    assert status(api)["signals"]["queue_depth"] == 207.0


class StallingProxy:
    """Prometheus's query API through a loopback proxy that holds every query containing
    `marker` until `release()`: a query as slow as a costly override, on demand. It passes
    instant queries (Prometheus' clock) only while `passes_time`."""

    def __init__(self, prometheus: Prometheus, marker: str) -> None:
        self._upstream = f"http://127.0.0.1:{prometheus.port}"
        self._marker = marker
        self.released = asyncio.Event()
        self.held = 0  # queries held so far
        self.passes_time = True

    async def __aenter__(self) -> str:
        async def forward(request: web.Request) -> web.Response:
            if request.path == "/api/v1/query" and not self.passes_time:
                return web.Response(status=403, text="range queries only")
            if self._marker in request.query.get("query", ""):
                self.held += 1
                await self.released.wait()
            url = self._upstream + request.path
            async with (
                aiohttp.ClientSession() as session,
                session.get(url, params=request.query) as answer,
            ):
                return web.Response(status=answer.status, body=await answer.read())

        app = web.Application()
        app.router.add_get("/api/v1/query_range", forward)
        app.router.add_get("/api/v1/query", forward)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def __aexit__(self, *exc: object) -> None:
        self.released.set()
        await self._runner.cleanup()

    def release(self) -> None:
        self.released.set()


async def tick(ctl: Controller) -> None:
    """One tick, which must end: a tick that waited for a held query would not."""
    await asyncio.wait_for(ctl.tick(), timeout=30)


async def test_one_workloads_slow_query_slows_no_others_tick(
    api: client.ApiClient, pod_prometheus: Prometheus
) -> None:
    """A query override Prometheus takes long to answer (here a gateway's queue) held
    every workload's tick until it answered: each two such overrides added a query timeout
    to every tick. A tick now waits at most its wait, and the late answer joins the other
    workload's history at a later tick."""
    deploy(api)
    autoscaler(api, KEDA_SPEC)
    slow = {
        **KEDA_SPEC,
        "scaleTargetRef": {"kind": "Deployment", "name": "ghost"},
        "signals": {"gatewayQueueDepth": 'sum(vllm:num_requests_waiting{pod!="held"})'},
    }
    create_autoscaler(api, NS, slow, name="other")
    proxy = StallingProxy(pod_prometheus, 'pod!="held"')
    async with proxy as url:
        ctl, prom = controller(api, url, query_timeout=120, query_wait=0.5)
        try:
            for _ in range(40):  # ticks end while the held query waits; chat scales
                await tick(ctl)
                if scale(api) > 1 and proxy.held:
                    break
                await asyncio.sleep(0.2)
            for _ in range(3):
                await tick(ctl)
            assert scale(api) > 1
            assert proxy.held == 1  # asked once, not again while it answers
            assert ctl.stats.late_queries >= 1
            # late is not failed: neither workload is held on missing metrics
            assert ctl.stats.missing_metrics == {f"{NS}/chat": False, f"{NS}/other": False}
            history = ctl._workloads[(NS, "other")].history
            assert history.latest_time("queue_depth") is None
            proxy.release()
            for _ in range(40):
                await tick(ctl)
                if history.latest_time("queue_depth") is not None:
                    break
                await asyncio.sleep(0.2)
            assert history.latest_time("queue_depth") is not None
            await tick(ctl)  # answered in time: out of the slow lane
            assert not ctl._gather._late and not ctl._gather._lanes.slow
        finally:
            ctl.close()
            await prom.close()


async def test_a_late_gateway_queue_is_never_added_without_it(
    api: client.ApiClient, gateway_workload: Prometheus
) -> None:
    """A workload's queue depth is its pods' plus its gateway's: while the gateway's query
    is late, the pods' 200 alone is no sample of it; once it answers, 207 is."""
    proxy = StallingProxy(gateway_workload, "gateway_waiting")
    async with proxy as url:
        ctl, prom = controller(api, url, query_timeout=120, query_wait=0.5)
        try:
            for _ in range(40):  # the pods' queue answers; the gateway's does not
                await tick(ctl)
                handed = ctl._gather._handed.get((NS, "chat"))
                if handed and handed.queued and proxy.held:
                    break
                await asyncio.sleep(0.2)
            history = ctl._workloads[(NS, "chat")].history
            assert history.latest_time("queue_depth") is None
            # the pods' answers wait, summed, for the gateway's
            assert set(ctl._gather._handed[(NS, "chat")].queued.values()) == {200.0}
            proxy.release()
            await ticks_until(ctl, lambda: history.latest_time("queue_depth") is not None)
            queue = history.observe(time.time(), ()).queue_depth
            assert queue.values and set(queue.values) == {207.0}
        finally:
            ctl.close()
            await prom.close()


async def test_the_served_ratio_counts_the_pods_an_hpa_counts(
    api: client.ApiClient, pod_prometheus: Prometheus
) -> None:
    """The HPA multiplies a `Value` ratio by its Ready pods (`getReadyPodsCount`): terminating
    ones too while Ready, so the ratio was served over too few and the HPA overshot (6 of 4
    Ready with 2 draining read 1499m: 9). A Failed (evicted) pod is no replica: it counted
    as one starting, for as long as it stayed listed."""
    deploy(api)
    core = client.CoreV1Api(api)
    ready = {"conditions": [{"type": "Ready", "status": "True"}], "phase": "Running"}
    for name, status in (("vllm-1", ready), ("vllm-2", {"phase": "Failed"})):
        spec = {"containers": [{"name": "vllm", "image": "vllm"}]}
        core.create_namespaced_pod(NS, {"metadata": {"name": name, "labels": LABELS}, "spec": spec})
        core.patch_namespaced_pod_status(name, NS, {"status": status})
    core.delete_namespaced_pod("vllm-1", NS)  # draining, still Ready
    autoscaler(api, KEDA_SPEC)
    feed = SnapshotFeed()
    ctl, prom = controller(api, f"http://127.0.0.1:{pod_prometheus.port}", feed=feed)
    try:
        await tick(ctl)
        assert ctl.stats.current[f"{NS}/chat"] == 1  # vllm-0; not the evicted vllm-2
        decided = ctl._workloads[(NS, "chat")].decided
        served = feed.latest.get(NS, "chat")
        assert decided is not None and served is not None
        ratio = served.values["gpufleet_desired_ratio"].value
        assert ratio == desired_ratio(decided, current=1, ready=2)
    finally:
        await prom.close()


async def test_the_served_ratio_reads_the_scales_replicas_in_a_recreate_rollout(
    api: client.ApiClient, pod_prometheus: Prometheus
) -> None:
    """A Recreate rollout, as GPU Deployments roll (no spare GPU to surge into): every old
    pod terminating but still Ready, no new one yet. Counted from its pods the target was
    at zero, so the ratio served was the count itself, and the HPA, which reads
    spec.replicas and counts those Ready pods, proposed the count times the pods."""
    deploy(api, replicas=2)
    core = client.CoreV1Api(api)
    spec = {"containers": [{"name": "vllm", "image": "vllm"}]}
    core.create_namespaced_pod(NS, {"metadata": {"name": "vllm-1", "labels": LABELS}, "spec": spec})
    ready = {"conditions": [{"type": "Ready", "status": "True"}], "phase": "Running"}
    core.patch_namespaced_pod_status("vllm-1", NS, {"status": ready})
    for pod in ("vllm-0", "vllm-1"):
        core.delete_namespaced_pod(pod, NS)  # terminating, still Ready
    autoscaler(api, KEDA_SPEC)
    feed = SnapshotFeed()
    ctl, prom = controller(api, f"http://127.0.0.1:{pod_prometheus.port}", feed=feed)
    try:
        await tick(ctl)
        assert ctl.stats.current[f"{NS}/chat"] == 0  # no replica that is not terminating
        decided = ctl._workloads[(NS, "chat")].decided
        served = feed.latest.get(NS, "chat")
        assert decided is not None and served is not None
        ratio = served.values["gpufleet_desired_ratio"].value
        assert ratio == desired_ratio(decided, current=2, ready=2) != decided
        assert served.replicas == 2
    finally:
        await prom.close()


async def test_one_workloads_hung_write_holds_no_others_tick(
    api: client.ApiClient, apiserver: FakeApiServer, pod_prometheus: Prometheus
) -> None:
    """A scale write held by a hung webhook (up to the API call's 30 s) held the whole tick:
    no other workload decided, wrote its status or served its metrics until it ended. The
    workload is now busy and sits out later ticks until its write ends; the others go on,
    and its metrics stay served as last."""
    deploy(api)
    autoscaler(api, KEDA_SPEC)  # chat: 200 waiting, it scales up
    ghost = {**KEDA_SPEC, "scaleTargetRef": {"kind": "Deployment", "name": "ghost"}}
    create_autoscaler(api, NS, ghost, name="other")
    apiserver.faults.hold_writes_suffix = "/deployments/vllm/scale"
    feed = SnapshotFeed()
    ctl, prom = controller(
        api, f"http://127.0.0.1:{pod_prometheus.port}", query_wait=0.5, feed=feed
    )
    gpa = client.CustomObjectsApi(api)

    def other_status() -> dict:
        return gpa.get_namespaced_custom_object(*GPA, "other").get("status", {})

    try:
        for _ in range(40):  # chat's write is held; other's status is written all the same
            await tick(ctl)
            if (NS, "chat") in ctl._steps.busy() and other_status().get("conditions"):
                break
            await asyncio.sleep(0.2)
        assert (NS, "chat") in ctl._steps.busy() and ctl.stats.busy_steps >= 1
        able = {c["type"]: c["reason"] for c in other_status()["conditions"]}["AbleToScale"]
        assert able == "FailedGetScale"
        decided = ctl._workloads[(NS, "chat")].decided
        assert decided is not None and decided > 1
        for _ in range(3):  # busy: sits the steps out, served with the count it decided
            await tick(ctl)
            assert scale(api) == 1
            served = feed.latest.get(NS, "chat")
            assert served is not None
            assert served.values["gpufleet_desired_replicas"].value == decided
        apiserver.faults.hold_writes_suffix = ""
        await ticks_until(ctl, lambda: (NS, "chat") not in ctl._steps.busy() and scale(api) > 1)
    finally:
        apiserver.faults.hold_writes_suffix = ""
        ctl.close()
        await prom.close()


async def test_an_invalid_specs_held_status_write_holds_no_others_tick(
    api: client.ApiClient, apiserver: FakeApiServer, pod_prometheus: Prometheus
) -> None:
    """An invalid GPUAutoscaler's condition and event were written inside the tick, before
    any workload's step: a held status write held every workload. They are steps now."""
    deploy(api)
    autoscaler(api, KEDA_SPEC)
    bad = {**KEDA_SPEC, "scaleTargetRef": {"kind": "Deployment", "name": "x"}, "minReplicas": 9}
    create_autoscaler(api, NS, bad, name="bad")
    apiserver.faults.hold_writes_suffix = "/gpuautoscalers/bad/status"
    ctl, prom = controller(api, f"http://127.0.0.1:{pod_prometheus.port}", query_wait=0.5)
    try:
        for _ in range(40):
            await tick(ctl)
            if scale(api) > 1:
                break
            await asyncio.sleep(0.2)
        assert scale(api) > 1 and (NS, "bad") in ctl._steps.busy()
        apiserver.faults.hold_writes_suffix = ""
        await ticks_until(ctl, lambda: not ctl._steps.busy())
    finally:
        apiserver.faults.hold_writes_suffix = ""
        ctl.close()
        await prom.close()
    reported = client.CustomObjectsApi(api).get_namespaced_custom_object(*GPA, "bad")["status"]
    assert reported["reason"] == "InvalidSpec"


@dataclasses.dataclass
class Wants:
    """A policy that always asks for `desired` replicas: the controller is under test."""

    desired: int
    name: str = "wants"
    interval_seconds: float = 0.0

    def decide(self, obs: Observation) -> Decision:
        return Decision(desired=self.desired, reason=Reason.SCALE_DOWN, message="wants")


async def test_a_step_held_past_a_lost_lease_writes_no_scale(
    api: client.ApiClient, apiserver: FakeApiServer, pod_prometheus: Prometheus
) -> None:
    """A scale-down writes each pod's deletion cost, then the scale. With a deletion-cost
    write held while the lease was lost, the step went on to write the scale and an Event
    once it was answered: leadership was asked only before the first write."""
    deploy(api, replicas=2)
    autoscaler(api, KEDA_SPEC)
    leader = [False]
    ctl, prom = controller(
        api,
        f"http://127.0.0.1:{pod_prometheus.port}",
        is_leader=lambda: leader[0],
        query_wait=0.5,
    )
    try:
        await tick(ctl)  # loads the workload, as a follower: nothing written
        (workload,) = ctl._workloads.values()
        workload.policy, workload.next_decision_at = Wants(1), 0.0
        apiserver.faults.hold_writes_suffix = "/pods/vllm-0"
        leader[0] = True
        for _ in range(40):
            await tick(ctl)
            if (NS, "chat") in ctl._steps.busy():
                break
        assert (NS, "chat") in ctl._steps.busy()
        leader[0] = False
        apiserver.faults.hold_writes_suffix = ""
        for _ in range(20):
            await tick(ctl)
            if not ctl._steps.busy():
                break
            await asyncio.sleep(0.1)
        assert not ctl._steps.busy()
    finally:
        apiserver.faults.hold_writes_suffix = ""
        ctl.close()
        await prom.close()
    assert scale(api) == 2
    assert not [r for r in apiserver.requests if r.path.endswith("/scale") and r.method != "GET"]


async def test_a_refused_deletion_cost_does_not_cancel_the_scale_down(
    api: client.ApiClient, apiserver: FakeApiServer, pod_prometheus: Prometheus, caplog
) -> None:
    """The deletion costs only choose which pods go. A pod patch refused (RBAC, a webhook)
    cancelled the scale write with it: 3 replicas for good, FailedUpdateScale every tick."""
    caplog.set_level(logging.WARNING, logger="gpufleet.autoscaler.controller.loop")
    deploy(api, replicas=3)
    autoscaler(api, KEDA_SPEC)
    ctl, prom = controller(api, f"http://127.0.0.1:{pod_prometheus.port}", query_wait=0.5)
    apiserver.faults.forbid_writes_suffix = "/pods/vllm-0"
    try:
        await tick(ctl)
        (workload,) = ctl._workloads.values()
        workload.policy, workload.next_decision_at = Wants(1), 0.0
        await ticks_until(ctl, lambda: scale(api) == 1)
    finally:
        apiserver.faults.forbid_writes_suffix = ""
        ctl.close()
        await prom.close()
    assert conditions(api)["AbleToScale"][0] == "True"
    said = [r.getMessage() for r in caplog.records if "deletion cost" in r.getMessage()]
    assert said == [
        "llm/chat: cannot set its pods' deletion cost: vllm-0: 403: injected: no such verb"
    ], said


@dataclasses.dataclass
class WithHeadroom:
    """The workload's own policy, its decisions asking for `headroom` placeholder pods: the
    controller's part is under test here, the policy's headroom has its own tests."""

    inner: Policy
    headroom: int

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def interval_seconds(self) -> float:
        return self.inner.interval_seconds

    def decide(self, obs: Observation) -> Decision:
        return dataclasses.replace(self.inner.decide(obs), headroom=self.headroom)


async def first_tick_with_headroom(ctl: Controller, headroom: int) -> WithHeadroom:
    """One tick to load the only workload, then its policy asks for `headroom` placeholders,
    decided at the next tick (not at the next 15 s HPA sync)."""
    await ctl.tick()
    (workload,) = ctl._workloads.values()
    workload.policy = policy = WithHeadroom(workload.policy, headroom)
    workload.next_decision_at = 0.0
    return policy


def placeholder(api: client.ApiClient):
    try:
        return client.AppsV1Api(api).read_namespaced_deployment("chat-placeholder", NS)
    except client.ApiException:
        return None


async def asking_for_headroom(
    api: client.ApiClient, prometheus: Prometheus, headroom: int, *, kept: bool = True
) -> tuple[Controller, PromClient, WithHeadroom]:
    """A 2-GPU Deployment whose GPUAutoscaler's policy asks for `headroom` placeholders;
    `kept`: the controller's --headroom."""
    deploy(api, gpus=2)
    autoscaler(api, KEDA_SPEC)
    ctl, prom = controller(api, f"http://127.0.0.1:{prometheus.port}", headroom=kept)
    return ctl, prom, await first_tick_with_headroom(ctl, headroom)


async def test_it_keeps_the_policys_headroom_as_placeholder_pods(
    api: client.ApiClient, pod_prometheus: Prometheus
) -> None:
    ctl, prom, policy = await asking_for_headroom(api, pod_prometheus, 3)
    (workload,) = ctl._workloads.values()
    try:
        await ticks_until(ctl, lambda: placeholder(api) is not None)
        made = placeholder(api)
        assert made.spec.replicas == 3
        pod = made.spec.template.spec
        assert pod.priority_class_name == "gpufleet-placeholder"
        assert pod.containers[0].resources.limits == {"nvidia.com/gpu": "2"}  # one replica's
        (owner,) = made.metadata.owner_references
        assert (owner.kind, owner.name) == ("GPUAutoscaler", "chat")
        priority = client.SchedulingV1Api(api).read_priority_class("gpufleet-placeholder")
        assert (priority.value, priority.preemption_policy) == (-10, "Never")
        assert ctl.stats.placeholders["llm/chat"] == 3
        assert buffer(api) is None  # no CapacityBuffer CRD in this cluster
        policy.headroom = 0  # the forecast no longer needs nodes ahead: give them back
        workload.next_decision_at = 0.0  # decided now, not at the next 15 s HPA sync
        await ticks_until(ctl, lambda: placeholder(api).spec.replicas == 0)
    finally:
        await prom.close()


@pytest.mark.parametrize("length", [75, 235, 253])
async def test_a_long_named_autoscaler_gets_its_placeholders(
    api: client.ApiClient, pod_prometheus: Prometheus, length: int
) -> None:
    """A name past a label value's 63 characters: the API server (and now the fake one)
    refused the placeholder Deployment labelled with it, every tick. Past 241, the name
    `<name>-placeholder` was refused too (and past 230 it left its ReplicaSet's name too
    long: tests/lab/kubeapi/test_cluster.py)."""
    name = "chat-" + "x" * (length - 5)
    deploy(api, gpus=2)
    create_autoscaler(api, NS, KEDA_SPEC, name=name)
    ctl, prom = controller(api, f"http://127.0.0.1:{pod_prometheus.port}")
    await first_tick_with_headroom(ctl, 2)
    apps = client.AppsV1Api(api)

    def made() -> bool:
        try:
            deployment = placeholder_name(name, kind="Deployment")
            return apps.read_namespaced_deployment(deployment, NS).spec.replicas == 2
        except client.ApiException:
            return False

    try:
        await ticks_until(ctl, made)
        assert ctl.stats.placeholders[f"{NS}/{name}"] == 2
        assert not ctl.stats.errors  # no write refused on the way
    finally:
        await prom.close()


async def test_placeholders_of_a_target_gone_are_released(
    api: client.ApiClient, pod_prometheus: Prometheus
) -> None:
    """The target deleted (or renamed in the spec), its placeholder pods stayed at 3 for
    good, holding GPUs and keeping nodes billed for nothing."""
    ctl, prom, _ = await asking_for_headroom(api, pod_prometheus, 3)
    try:
        await ticks_until(ctl, lambda: placeholder(api) is not None)
        client.AppsV1Api(api).delete_namespaced_deployment("vllm", NS)
        await ticks_until(ctl, lambda: placeholder(api).spec.replicas == 0)
    finally:
        await prom.close()
    assert conditions(api)["AbleToScale"][1] == "FailedGetScale"


async def test_placeholders_of_an_invalid_spec_are_released_until_it_is_mended(
    api: client.ApiClient, apiserver: FakeApiServer, pod_prometheus: Prometheus, caplog
) -> None:
    """A spec made invalid left its placeholder pods at their last size for as long as it
    stayed so: the controller dropped the workload and never looked at its headroom again.
    A release that fails is one line, and is tried again on the next tick."""
    caplog.set_level(logging.INFO, logger="gpufleet.autoscaler.controller.headroom")
    ctl, prom, _ = await asking_for_headroom(api, pod_prometheus, 3)
    custom = client.CustomObjectsApi(api)
    args = ("autoscaling.gpufleet.dev", "v1alpha1", NS, "gpuautoscalers", "chat")
    try:
        await ticks_until(ctl, lambda: placeholder(api) is not None)
        assert placeholder(api).spec.replicas == 3
        custom.patch_namespaced_custom_object(*args, {"spec": {"minReplicas": 9}})
        apiserver.faults.forbid_writes_suffix = "/chat-placeholder/scale"
        await ctl.tick()
        await ctl.tick()
        assert placeholder(api).spec.replicas == 3
        apiserver.faults.forbid_writes_suffix = ""
        await ticks_until(ctl, lambda: placeholder(api).spec.replicas == 0)
        assert conditions(api)["ScalingActive"] == ("False", "InvalidSpec")
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 2, said  # the outage, and its end
        assert said[0].startswith("llm/chat: cannot release its placeholder pods: 0 wanted: 403")
        custom.patch_namespaced_custom_object(*args, {"spec": {"minReplicas": 1}})
        await ctl.tick()
    finally:
        await prom.close()
    assert conditions(api)["ScalingActive"][1] != "InvalidSpec"
    assert ctl.stats.errors["kube_forbidden"] == 2


USERS_OWN = {
    "metadata": {"name": "chat-placeholder", "labels": {"app": "batch"}},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "batch"}},
        "template": {
            "metadata": {"labels": {"app": "batch"}},
            "spec": {"containers": [{"name": "batch", "image": "team/batch:1"}]},
        },
    },
}


async def test_a_users_own_object_of_the_placeholders_name_is_never_written(
    api: client.ApiClient, pod_prometheus: Prometheus, caplog
) -> None:
    """The placeholder Deployment was found by its name alone: a user's own
    `chat-placeholder` was patched to pause containers (a real API server refuses only a
    changed selector) and released to 0 with the target."""
    caplog.set_level(logging.INFO, logger="gpufleet.autoscaler.controller.headroom")
    ctl, prom, _ = await asking_for_headroom(api, pod_prometheus, 3)
    client.AppsV1Api(api).create_namespaced_deployment(NS, USERS_OWN)
    try:
        await ticks_until(ctl, lambda: ctl.stats.errors["kube_conflict"] >= 3)
        client.AppsV1Api(api).delete_namespaced_deployment("vllm", NS)
        await ticks_until(ctl, lambda: conditions(api)["AbleToScale"][1] == "FailedGetScale")
        await ctl.tick()
    finally:
        await prom.close()
    theirs = placeholder(api)
    assert theirs.spec.replicas == 2
    assert theirs.spec.template.spec.containers[0].image == "team/batch:1"
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == (
        "llm/chat: cannot keep its placeholder pods: 3 wanted: 409: Deployment "
        "llm/chat-placeholder exists and gpufleet did not make it (no label "
        "autoscaling.gpufleet.dev/placeholder-for=chat): left as it is; rename it to keep "
        "headroom"
    )


async def test_headroom_it_may_not_write_is_one_line_not_one_a_tick(
    api: client.ApiClient, apiserver: FakeApiServer, pod_prometheus: Prometheus, caplog
) -> None:
    """A ClusterRole without create on deployments: every tick retried the placeholders
    and logged a warning; now the outage is a line when it starts and one when it ends."""
    caplog.set_level(logging.INFO, logger="gpufleet.autoscaler.controller.headroom")
    ctl, prom, _ = await asking_for_headroom(api, pod_prometheus, 3)
    apiserver.faults.forbid_writes_suffix = "/deployments"  # creating one: 403
    try:
        await ticks_until(ctl, lambda: ctl.stats.errors["kube_forbidden"] >= 5)
        assert placeholder(api) is None
        apiserver.faults.forbid_writes_suffix = ""  # the verb granted
        await ticks_until(ctl, lambda: placeholder(api) is not None)
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 2, said
        assert said[0].startswith("llm/chat: cannot keep its placeholder pods: 3 wanted: ")
        assert said[1].startswith("llm/chat: cannot keep its placeholder pods: works again")
    finally:
        apiserver.faults.forbid_writes_suffix = ""
        await prom.close()


async def test_with_headroom_off_it_writes_no_capacity_object(
    api: client.ApiClient, apiserver: FakeApiServer, pod_prometheus: Prometheus
) -> None:
    """--headroom=false, the chart's autoscaler.headroom: false, whose ClusterRole cannot
    create Deployments: the policy's headroom is never written, nor even tried."""
    ctl, prom, _ = await asking_for_headroom(api, pod_prometheus, 3, kept=False)
    apiserver.faults.forbid_writes_suffix = "/deployments"
    try:
        for _ in range(5):
            await ctl.tick()
        assert ctl.stats.decisions  # the policy decided, with its headroom of 3
        assert placeholder(api) is None
        assert ctl.stats.errors["kube_forbidden"] == 0
        assert not [r for r in apiserver.requests if r.path.endswith("/priorityclasses")]
    finally:
        apiserver.faults.forbid_writes_suffix = ""
        await prom.close()


BUFFERS = ("autoscaling.x-k8s.io", "v1beta1", NS, "capacitybuffers")


def buffer(api: client.ApiClient) -> dict | None:
    try:
        return client.CustomObjectsApi(api).get_namespaced_custom_object(
            *BUFFERS, "chat-placeholder"
        )
    except client.ApiException:
        return None


async def test_where_the_capacity_buffer_crd_is_installed_headroom_is_a_buffer(
    pod_prometheus: Prometheus,
) -> None:
    """Cluster Autoscaler's CapacityBuffer instead of placeholder pods: a PodTemplate of
    one replica's GPUs and a buffer of `headroom` chunks naming it; placeholder pods left
    from before the CRD was installed go to zero, and so does the buffer once its target is
    deleted."""
    with FakeApiServer(install=("capacitybuffers.autoscaling.x-k8s.io",)) as server:
        config = client.Configuration()
        config.host = server.url
        with client.ApiClient(config) as api:
            deploy(api, gpus=2)
            autoscaler(api, KEDA_SPEC)
            ctl, prom = controller(api, f"http://127.0.0.1:{pod_prometheus.port}")
            try:
                await ctl.tick()
                (workload,) = ctl._workloads.values()
                old = placeholder_deployment(
                    namespace=NS,
                    autoscaler="chat",
                    autoscaler_uid=workload.spec.uid,
                    replicas=2,
                    template_spec={},
                )
                client.AppsV1Api(api).create_namespaced_deployment(NS, old)
                workload.policy = policy = WithHeadroom(workload.policy, 3)
                workload.next_decision_at = 0.0
                await ticks_until(ctl, lambda: buffer(api) is not None)
                made = buffer(api)
                assert made["spec"] == {
                    "provisioningStrategy": "buffer.x-k8s.io/active-capacity",
                    "podTemplateRef": {"name": "chat-placeholder"},
                    "replicas": 3,
                }
                template = client.CoreV1Api(api).read_namespaced_pod_template(
                    "chat-placeholder", NS
                )
                limits = template.template.spec.containers[0].resources.limits
                assert limits == {"nvidia.com/gpu": "2"}  # one replica's
                assert placeholder(api).spec.replicas == 0
                assert ctl.stats.buffers["llm/chat"] == 3
                policy.headroom = 1
                workload.next_decision_at = 0.0  # decided now, not at the next HPA sync
                await ticks_until(ctl, lambda: buffer(api)["spec"]["replicas"] == 1)
                assert placeholder(api).spec.replicas == 0
                # The target deleted: the buffer kept its node for good.
                client.AppsV1Api(api).delete_namespaced_deployment("vllm", NS)
                await ticks_until(ctl, lambda: buffer(api)["spec"]["replicas"] == 0)
                assert ctl.stats.buffers["llm/chat"] == 0
            finally:
                await prom.close()


async def test_a_users_own_pod_template_of_the_buffers_name_is_never_written(
    pod_prometheus: Prometheus,
) -> None:
    """With the CapacityBuffer CRD: a PodTemplate of the buffer's name that already existed
    was patched into one replica's GPUs, whoever made it."""
    with FakeApiServer(install=("capacitybuffers.autoscaling.x-k8s.io",)) as server:
        config = client.Configuration()
        config.host = server.url
        with client.ApiClient(config) as api:
            deploy(api, gpus=2)
            core = client.CoreV1Api(api)
            mine = {"metadata": USERS_OWN["metadata"], "template": USERS_OWN["spec"]["template"]}
            core.create_namespaced_pod_template(NS, mine)
            autoscaler(api, KEDA_SPEC)
            ctl, prom = controller(api, f"http://127.0.0.1:{pod_prometheus.port}")
            try:
                await first_tick_with_headroom(ctl, 3)
                await ticks_until(ctl, lambda: ctl.stats.errors["kube_conflict"] >= 2)
            finally:
                await prom.close()
            theirs = core.read_namespaced_pod_template("chat-placeholder", NS)
            assert theirs.template.spec.containers[0].image == "team/batch:1"
            assert buffer(api) is None


NODEPOOLS = ("karpenter.sh", "v1", "nodepools")


async def test_a_nodepool_limit_caps_the_headroom_and_says_so(
    api: client.ApiClient, pod_prometheus: Prometheus
) -> None:
    """Karpenter launches no node past `spec.limits`: placeholders beyond it would pend
    forever. The controller keeps what the limit leaves after the replicas, with a
    NodeHeadroom condition saying why, and all of it once the limit is raised."""
    custom = client.CustomObjectsApi(api)
    pool = {"metadata": {"name": "h100"}, "spec": {"limits": {"nvidia.com/gpu": "2"}}}
    custom.create_cluster_custom_object(*NODEPOOLS, pool)
    deploy(api, gpus=2)
    autoscaler(
        api, {**KEDA_SPEC, "gpu": {"count": 2}, "nodePool": {"name": "h100", "gpusPerNode": 2}}
    )
    ctl, prom = controller(api, f"http://127.0.0.1:{pod_prometheus.port}")
    try:
        await first_tick_with_headroom(ctl, 3)
        # one node of 2 GPUs, taken by the replicas: no room for any placeholder
        await ticks_until(
            ctl, lambda: conditions(api).get("NodeHeadroom") == ("False", "NodePoolLimit")
        )
        (limited,) = [c for c in status(api)["conditions"] if c["type"] == "NodeHeadroom"]
        assert "h100 has room for 0 of 3" in limited["message"]
        assert placeholder(api) is None
        desired = status(api)["desiredReplicas"]
        limit = {"spec": {"limits": {"nvidia.com/gpu": str(2 * (desired + 3))}}}
        custom.patch_cluster_custom_object(*NODEPOOLS, "h100", limit)
        await ticks_until(ctl, lambda: placeholder(api) is not None)
        assert placeholder(api).spec.replicas == 3
        await ticks_until(
            ctl, lambda: conditions(api)["NodeHeadroom"] == ("True", "WithinNodePoolLimits")
        )
    finally:
        await prom.close()


class Raising(WithHeadroom):
    """A policy whose step raises before it decides: the workload sits this tick out."""

    @property
    def interval_seconds(self) -> float:
        raise RuntimeError("a bug in this workload's policy")


async def test_a_workload_whose_step_raised_keeps_its_part_of_the_nodepool(
    api: client.ApiClient, pod_prometheus: Prometheus
) -> None:
    """The plan took only the workloads decided this tick: one whose step raised (or went
    busy) dropped out, its placeholders still standing, and another was granted the room
    they hold, past the pool's limit."""
    ctl, prom = controller(api, f"http://127.0.0.1:{pod_prometheus.port}")
    try:
        await three_placeholders_in_h100(api, ctl)  # the pool is full: chat's replicas and 3
        chat = ctl._workloads[(NS, "chat")]
        chat.policy = Raising(chat.policy, 3)
        chat.next_decision_at = 0.0
        batch = {"app": "batch"}
        pod = {"containers": [{"name": "b", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
        client.AppsV1Api(api).create_namespaced_deployment(
            NS,
            {
                "metadata": {"name": "batch"},
                "spec": {
                    "selector": {"matchLabels": batch},
                    "template": {"metadata": {"labels": batch}, "spec": pod},
                },
            },
        )
        ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "batch"}
        spec = {**KEDA_SPEC, "scaleTargetRef": ref, "gpu": {"count": 2}}
        create_autoscaler(
            api, NS, {**spec, "nodePool": {"name": "h100", "gpusPerNode": 2}}, name="batch"
        )
        await ctl.tick()
        other = ctl._workloads[(NS, "batch")]
        other.policy = WithHeadroom(other.policy, 2)
        other.next_decision_at = 0.0

        def batch_headroom() -> tuple[str, str] | None:
            found = client.CustomObjectsApi(api).get_namespaced_custom_object(*GPA, "batch")
            for c in (found.get("status") or {}).get("conditions", []):
                if c["type"] == "NodeHeadroom":
                    return (c["status"], c["reason"])
            return None

        await ticks_until(ctl, lambda: batch_headroom() == ("False", "NodePoolLimit"))
        assert ctl.stats.errors  # chat's step did raise
    finally:
        await prom.close()


KUEUE = ("kueue.x-k8s.io", "v1beta2", NS, "workloads")


async def three_placeholders_in_h100(api: client.ApiClient, ctl: Controller) -> int:
    """A workload of 2-GPU replicas in NodePool h100 (2 GPUs a node) whose policy keeps a
    headroom of 3, and the pool, limited to room for all 3 placeholders; returns that limit
    once the 3 placeholders stand."""
    deploy(api, gpus=2)
    autoscaler(
        api, {**KEDA_SPEC, "gpu": {"count": 2}, "nodePool": {"name": "h100", "gpusPerNode": 2}}
    )
    await first_tick_with_headroom(ctl, 3)
    await ticks_until(ctl, lambda: status(api).get("desiredReplicas") is not None)
    limit = 2 * (status(api)["desiredReplicas"] + 3)
    pool = {"metadata": {"name": "h100"}, "spec": {"limits": {"nvidia.com/gpu": str(limit)}}}
    client.CustomObjectsApi(api).create_cluster_custom_object(*NODEPOOLS, pool)
    await ticks_until(ctl, lambda: placeholder(api) is not None)
    assert placeholder(api).spec.replicas == 3
    return limit


async def test_pending_kueue_workloads_take_their_gpus_from_the_headroom(
    api: client.ApiClient, pod_prometheus: Prometheus
) -> None:
    """A queued training job's GPUs count in its NodePool's limit as soon as it is queued:
    the headroom shrinks to what is left, and comes back once Kueue admits it (its pods
    are then ordinary pods the plan does not double count)."""
    custom = client.CustomObjectsApi(api)
    ctl, prom = controller(api, f"http://127.0.0.1:{pod_prometheus.port}")
    try:
        await three_placeholders_in_h100(api, ctl)
        gpus = {"nvidia.com/gpu": "2"}
        job = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": "train"},
            "spec": {
                "queueName": "batch",
                "podSets": [
                    {
                        "name": "main",
                        "count": 2,
                        "template": {
                            "spec": {
                                "nodeSelector": {"karpenter.sh/nodepool": "h100"},
                                "containers": [{"name": "t", "resources": {"limits": gpus}}],
                            }
                        },
                    }
                ],
            },
        }
        custom.create_namespaced_custom_object(*KUEUE, job)
        await ticks_until(ctl, lambda: placeholder(api).spec.replicas == 1)
        assert conditions(api)["NodeHeadroom"] == ("False", "NodePoolLimit")
        admitted = {"status": {"conditions": [{"type": "Admitted", "status": "True"}]}}
        custom.patch_namespaced_custom_object_status(*KUEUE, "train", admitted)
        await ticks_until(ctl, lambda: placeholder(api).spec.replicas == 3)
    finally:
        await prom.close()


async def test_another_teams_node_in_the_pool_takes_its_gpus_from_the_headroom(
    api: client.ApiClient, pod_prometheus: Prometheus
) -> None:
    """Karpenter counts every node of a NodePool against its limits, not just gpufleet's:
    another team's training pod on a node of the pool leaves the placeholders less room,
    and the NodeHeadroom condition says how much of the limit the others use."""
    core = client.CoreV1Api(api)
    ctl, prom = controller(api, f"http://127.0.0.1:{pod_prometheus.port}")
    try:
        limit = await three_placeholders_in_h100(api, ctl)
        node = {"metadata": {"name": "train-node", "labels": {"karpenter.sh/nodepool": "h100"}}}
        core.create_node(node)
        core.patch_node_status("train-node", {"status": {"capacity": {"nvidia.com/gpu": "2"}}})
        core.create_namespace({"metadata": {"name": "research"}})
        gpus = {"limits": {"nvidia.com/gpu": "1"}}
        train = {"name": "t", "image": "trainer", "resources": gpus}
        pod = {
            "metadata": {"name": "train-0"},
            "spec": {"nodeName": "train-node", "containers": [train]},
        }
        core.create_namespaced_pod("research", pod)
        await ticks_until(ctl, lambda: placeholder(api).spec.replicas == 2)
        (limited,) = [c for c in status(api)["conditions"] if c["type"] == "NodeHeadroom"]
        assert (limited["status"], limited["reason"]) == ("False", "NodePoolLimit")
        assert "h100 has room for 2 of 3" in limited["message"]
        assert f"limit nvidia.com/gpu {limit}, 2 used by other pods' nodes" in limited["message"]
        done = {"status": {"phase": "Succeeded"}}  # a finished job holds no GPUs
        core.patch_namespaced_pod_status("train-0", "research", done)
        await ticks_until(ctl, lambda: placeholder(api).spec.replicas == 3)
    finally:
        await prom.close()


@dataclasses.dataclass
class Watched(WithHeadroom):
    """The workload's own policy, keeping the newest observation it was shown."""

    seen: Observation | None = None

    def decide(self, obs: Observation) -> Decision:
        self.seen = obs
        return super().decide(obs)


async def seen_by_policy(ctl: Controller, prom: PromClient) -> Observation:
    """The observation the controller's one workload's policy is shown on its next tick."""
    try:
        await ctl.tick()
        (workload,) = ctl._workloads.values()
        workload.policy = watched = Watched(workload.policy, 0)
        workload.next_decision_at = 0.0
        await ctl.tick()
    finally:
        await prom.close()
    assert watched.seen is not None
    return watched.seen


@pytest.mark.parametrize(
    ("node_pool", "want"),
    [
        pytest.param({"name": "h100", "gpusPerNode": 8}, [2, 8], id="its-pools-ready-nodes"),
        pytest.param({"gpusPerNode": 8}, None, id="naming-no-pool-its-nodes-are-unknown"),
    ],
)
async def test_the_policy_sees_the_free_gpus_of_its_nodepools_nodes(
    api: client.ApiClient, node_pool: dict, want: list[int] | None
) -> None:
    """A node Karpenter keeps through consolidateAfter once it empties is billed, and a
    replica placed there starts without waiting for a node: the policy is shown each
    ready node's GPUs no pod holds (another team's pods hold theirs), and none of a
    cordoned node."""
    core = client.CoreV1Api(api)
    client.CustomObjectsApi(api).create_cluster_custom_object(
        *NODEPOOLS, {"metadata": {"name": "h100"}, "spec": {}}
    )
    for name in ("idle", "shared", "cordoned"):
        labels = {"karpenter.sh/nodepool": "h100"}
        spec = {"unschedulable": name == "cordoned"}
        core.create_node({"metadata": {"name": name, "labels": labels}, "spec": spec})
        ready = [{"type": "Ready", "status": "True"}]
        up = {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": ready}
        core.patch_node_status(name, {"status": up})
    core.create_namespace({"metadata": {"name": "research"}})
    train = {"name": "t", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": "6"}}}
    pod = {"metadata": {"name": "train-0"}, "spec": {"nodeName": "shared", "containers": [train]}}
    core.create_namespaced_pod("research", pod)
    deploy(api, gpus=2)
    autoscaler(api, {**KEDA_SPEC, "gpu": {"count": 2}, "nodePool": node_pool})
    free = (await seen_by_policy(*controller(api, "http://127.0.0.1:9"))).node_free_gpus
    assert (sorted(free) if free is not None else None) == want


async def test_the_policy_sees_the_pods_prompt_length_histogram(
    api: client.ApiClient, pod_prometheus: Prometheus
) -> None:
    """vllm:request_prompt_tokens reaches the policy as per-second cumulative buckets, the
    pods' summed by `le` (the prompt tail's signal)."""
    await scraped(pod_prometheus, "vllm:request_prompt_tokens_bucket")
    deploy(api)
    autoscaler(api, KEDA_SPEC)
    ctl, prom = controller(api, f"http://127.0.0.1:{pod_prometheus.port}")
    samples = (await seen_by_policy(ctl, prom)).prompt_tokens_buckets
    assert samples.times and len(samples.times) == len(samples.values)
    rates = dict(samples.values[-1])  # ~20 finished/s, three in four up to 1,000 tokens
    assert list(rates) == [1000.0, 50000.0, math.inf]
    assert rates[50000.0] == rates[math.inf] == pytest.approx(20.0, rel=0.3)
    assert rates[1000.0] == pytest.approx(15.0, rel=0.3)


@pytest.mark.parametrize(
    "lead", [pytest.param(60.0, id="ahead"), pytest.param(-60.0, id="behind"), 0.0]
)
async def test_the_loop_runs_on_prometheus_time(
    api: client.ApiClient, pod_prometheus: Prometheus, lead: float
) -> None:
    """A controller clock a minute ahead of Prometheus' asked for steps still to come: the
    completion rate (an irate) was missing there for good, and the newest sample a minute
    old, which the gpufleet policy reads as stale and holds on. A minute behind, it saw
    every sample a minute late."""
    deploy(api)
    autoscaler(api, KEDA_SPEC)
    url = f"http://127.0.0.1:{pod_prometheus.port}"
    ctl, prom = controller(api, url, clock=lambda: time.time() + lead)
    obs = await seen_by_policy(ctl, prom)
    assert obs.now == pytest.approx(time.time(), abs=2.0)
    for signal in (obs.completion_rate, obs.queue_depth):
        assert signal.times and obs.now - signal.times[-1] <= 2.0
    assert ctl.stats.clock_lead_seconds == pytest.approx(lead, abs=1.0)


async def test_what_ticks_fetched_ahead_of_prometheus_is_fetched_again(
    api: client.ApiClient, pod_prometheus: Prometheus
) -> None:
    """A tick on this machine's clock a minute ahead, Prometheus' not read (a proxy passed
    range queries only): it asked for a minute of steps still to come, which Prometheus
    answered with copies of its newest sample, and counted them fetched. Once the clock
    was read, the history kept the copies, the real samples of that minute were never
    asked, and the next decision waited a minute more than its interval. Now what ran
    ahead is fetched again, and the next decision is due within its interval."""
    deploy(api)
    autoscaler(api, KEDA_SPEC)
    proxy = StallingProxy(pod_prometheus, "never held")
    proxy.passes_time = False
    async with proxy as url:
        ctl, prom = controller(api, url, query_wait=10.0, clock=lambda: time.time() + 60)
        try:
            await tick(ctl)
            (w,) = ctl._workloads.values()
            assert ctl.stats.clock_lead_seconds == 0.0
            assert w.history.latest_time("queue_depth") > time.time() + 30  # the copies
            proxy.passes_time = True
            await tick(ctl)
        finally:
            await prom.close()
    now = time.time()
    assert ctl.stats.clock_lead_seconds == pytest.approx(60, abs=1)
    for signal in ("queue_depth", "completion_rate"):
        assert now - 3 <= w.history.latest_time(signal) <= now
    assert w.next_decision_at <= now + w.policy.interval_seconds


@pytest.mark.parametrize(
    ("replicas", "maximum", "held"),
    [
        pytest.param(3, 8, 3, id="held"),
        # The hold kept 8 with maxReplicas lowered to 3 while Prometheus was down: the
        # bound is the spec's, metrics or not, as HPA enforces it.
        pytest.param(8, 3, 3, id="within-a-lowered-max"),
    ],
)
async def test_missing_metrics_hold_the_count(
    api: client.ApiClient, replicas: int, maximum: int, held: int
) -> None:
    deploy(api, replicas=replicas)
    autoscaler(api, {**KEDA_SPEC, "maxReplicas": maximum})
    ctl = await one_tick_without_prometheus(api)  # nothing listens there
    assert scale(api) == held
    assert conditions(api)["ScalingActive"][1] == "MissingMetrics"
    assert ctl.stats.errors["prometheus_unavailable"] >= 1
    (name,) = ctl.stats.missing_metrics
    assert ctl.stats.missing_metrics[name] is True and ctl.stats.max_replicas[name] > 0


async def test_queries_that_answer_no_sample_are_missing_metrics(
    api: client.ApiClient, pod_prometheus: Prometheus
) -> None:
    """A model selector matching no series: every query answered, with nothing in it, and
    the policy held; the status said ValidMetricFound and no alert could fire."""
    deploy(api, replicas=2)
    autoscaler(
        api,
        {
            "scaleTargetRef": KEDA_SPEC["scaleTargetRef"],
            "maxReplicas": 8,
            "signals": {"model": "no-such-model"},
        },
    )
    ctl, prom = controller(api, f"http://127.0.0.1:{pod_prometheus.port}")
    try:
        await ticks_until(ctl, lambda: ctl.stats.ticks >= 2)
    finally:
        await prom.close()
    assert scale(api) == 2
    active = next(c for c in status(api)["conditions"] if c["type"] == "ScalingActive")
    assert (active["status"], active["reason"]) == ("False", "MissingMetrics")
    assert "arrival rate and queue depth missing" in active["message"]
    assert ctl.stats.missing_metrics["llm/chat"] is True
    assert ctl.stats.errors["prometheus_unavailable"] == 0  # Prometheus answered


async def test_the_spec_tells_the_policy_of_placeholders_and_the_idle_period(
    api: client.ApiClient,
) -> None:
    """Without placeholders the policy must not count GPUs they would hold as taken (the
    simulator runs it so, issue 18 §5); idleSecondsToZero is its scale-to-zero period."""
    deploy(api)
    spec = {
        **KEDA_SPEC,
        "policy": "gpufleet",
        "minReplicas": 0,
        "idleSecondsToZero": 45,
        "nodePool": {"placeholders": False},
    }
    autoscaler(api, spec)
    ctl = await one_tick_without_prometheus(api)
    settings = ctl._workloads[(NS, "chat")].policy.settings
    assert (settings.placeholders, settings.idle_seconds_to_zero) == (False, 45.0)


async def test_a_policy_that_raises_holds_its_count_and_stops_nothing(
    api: client.ApiClient, pod_prometheus: Prometheus, caplog
) -> None:
    """A sample a policy's arithmetic cannot take (or a bug) raised out of the tick, and
    the daemon, which catches only API errors, exited: every workload stopped, and again
    after each restart while the sample was in range. Now that workload holds its last
    decision; the outage is one error line, with the traceback, for all five ticks."""
    caplog.set_level(logging.INFO, logger="gpufleet.autoscaler.controller.loop")
    ctl, prom, policy = await asking_for_headroom(api, pod_prometheus, 0)

    def broken(obs: Observation) -> Decision:
        raise OverflowError("int too large to convert to float")

    try:
        await ticks_until(ctl, lambda: scale(api) > 1)  # decided once, scaled up
        policy.decide = broken  # type: ignore[method-assign]
        (workload,) = ctl._workloads.values()
        for _ in range(5):
            workload.next_decision_at = 0.0  # decide every tick
            await ctl.tick()
    finally:
        await prom.close()
    assert ctl.stats.errors["policy"] == 5 and ctl.stats.ticks >= 6
    assert status(api)["desiredReplicas"] == scale(api) > 1  # held, still written
    said = [r for r in caplog.records if "policy" in r.getMessage()]
    assert [r.levelname for r in said] == ["ERROR"], [r.getMessage() for r in said]
    assert said[0].exc_info is not None
    assert said[0].getMessage() == (
        "llm/chat: its policy fails; the last decision is held: "
        "OverflowError: int too large to convert to float"
    )


async def test_a_keda_workload_starts_as_a_new_scaled_object(api: client.ApiClient) -> None:
    """Unlike the replay's warm start (`Tuning.keda_active_at_start`): a new
    GPUAutoscaler is a new ScaledObject, never active yet."""
    deploy(api)
    autoscaler(api, KEDA_SPEC)
    ctl = await one_tick_without_prometheus(api)
    assert ctl._workloads[(NS, "chat")].policy._active_at_start is False


async def test_headroom_off_tells_the_policy_there_are_no_placeholders(
    api: client.ApiClient,
) -> None:
    """--headroom=false: as if every spec said placeholders false."""
    deploy(api)
    autoscaler(api, {**KEDA_SPEC, "policy": "gpufleet"})  # placeholders: true by default
    ctl, prom = controller(api, "http://127.0.0.1:9", headroom=False)
    try:
        await ctl.tick()
    finally:
        await prom.close()
    assert ctl._workloads[(NS, "chat")].policy.settings.placeholders is False


async def test_an_open_scheduled_window_sets_the_floor(api: client.ApiClient) -> None:
    """`spec.schedules`: a window open now raises the count to its minReplicas even with
    no signal at all (the forecast's count is only ever raised), with an Event saying
    which window."""
    deploy(api, replicas=1)
    always = {"name": "office", "schedule": "* * * * *", "duration": "1h", "minReplicas": 3}
    autoscaler(api, {**KEDA_SPEC, "schedules": [always]})
    await one_tick_without_prometheus(api)  # no metrics: the count is held
    assert scale(api) == 3
    events = client.EventsV1Api(api).list_namespaced_event(NS).items
    (event,) = [e for e in events if e.action == "Scale" and e.type == "Normal"]
    assert event.reason == "ScheduledWindow"
    assert event.note.startswith("1 -> 3 replicas: schedule office open")


class _Trailing(Cluster):
    """The view one tick behind the API server, as a watch trailing it can give."""

    def __init__(self, api: client.ApiClient) -> None:
        super().__init__(api)
        self._last: ClusterView | None = None

    def view(self) -> ClusterView:
        fresh = super().view()
        stale, self._last = self._last or fresh, fresh
        return stale


async def test_a_view_that_trails_its_own_scale_writes_no_second_one(
    api: client.ApiClient,
) -> None:
    """The target still at 1 in a view from before its scale to 3: the scale read finds 3,
    and no second Event or scale time is written for a scale that did not happen."""
    deploy(api, replicas=1)
    always = {"name": "office", "schedule": "* * * * *", "duration": "1h", "minReplicas": 3}
    autoscaler(api, {**KEDA_SPEC, "schedules": [always]})
    ctl, prom = controller(api, "http://127.0.0.1:9", cluster=_Trailing(api))
    try:
        await ctl.tick()
        scaled_at = status(api)["lastScaleTime"]
        await asyncio.sleep(1.1)  # a second scale would carry a later time
        await ctl.tick()
    finally:
        await prom.close()
    assert scale(api) == 3
    listed = client.EventsV1Api(api).list_namespaced_event(NS).items
    (event,) = [e for e in listed if e.action == "Scale" and e.type == "Normal"]
    assert event.note.startswith("1 -> 3 replicas") and event.series is None
    assert status(api)["lastScaleTime"] == scaled_at


async def test_a_decision_from_a_count_the_target_no_longer_has_is_not_written(
    api: client.ApiClient, pod_prometheus: Prometheus
) -> None:
    """From a view still at 1 after the scale to 4, a step to 2 would have scaled the
    target down from 4 on a count it no longer had; it waits for the next tick's view."""
    deploy(api, replicas=1)
    autoscaler(api, KEDA_SPEC)
    url = f"http://127.0.0.1:{pod_prometheus.port}"
    ctl, prom = controller(api, url, cluster=_Trailing(api))
    try:
        await ctl.tick()  # KEDA on 200 queued: 1 -> 4 (the view's next tick still says 1)
        assert scale(api) == 4
        (workload,) = ctl._workloads.values()
        workload.policy, workload.learns = Wants(desired=2), False
        for scaled in (4, 2):  # from the stale 1: not written; from 4: written
            workload.next_decision_at = 0.0
            await ctl.tick()
            assert scale(api) == scaled
    finally:
        await prom.close()


async def test_it_refuses_to_fight_an_hpa(api: client.ApiClient, serving_pod: str) -> None:
    deploy(api)
    client.AutoscalingV2Api(api).create_namespaced_horizontal_pod_autoscaler(
        NS,
        {
            "metadata": {"name": "vllm"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
                "minReplicas": 1,
                "maxReplicas": 3,
            },
        },
    )
    autoscaler(api, {**KEDA_SPEC, "minReplicas": 2})
    await one_tick_without_prometheus(api)
    assert scale(api) == 1  # minReplicas 2 would raise it, but an HPA owns the target
    assert conditions(api)["AbleToScale"] == ("False", "Competing")
    notes = [e.note for e in client.EventsV1Api(api).list_namespaced_event(NS).items]
    assert any("HorizontalPodAutoscaler/vllm already scales the target" in n for n in notes)


async def test_a_bad_spec_is_a_condition_and_an_event_naming_the_field(
    api: client.ApiClient,
) -> None:
    deploy(api)
    autoscaler(api, {**KEDA_SPEC, "minReplicas": 9})
    ctl, prom = controller(api, "http://127.0.0.1:9")
    try:
        await ctl.tick()
        await ctl.tick()  # reported once per generation
    finally:
        await prom.close()
    assert conditions(api)["ScalingActive"] == ("False", "InvalidSpec")
    assert status(api)["message"] == "spec.minReplicas: 9 is more than maxReplicas 8"
    (event,) = client.EventsV1Api(api).list_namespaced_event(NS).items
    assert (event.reason, event.type) == ("InvalidSpec", "Warning")
    # `kubectl describe` lists the Events whose involvedObject.uid is the object's
    uid = client.CustomObjectsApi(api).get_namespaced_custom_object(*GPA, "chat")["metadata"]
    assert event.regarding.uid == uid["uid"]
    assert scale(api) == 1


async def test_a_bad_spec_whose_event_fails_is_reported_once(
    api: client.ApiClient, apiserver: FakeApiServer, caplog
) -> None:
    """It was remembered as reported only once its Event was made too. Every Event was
    refused on a real cluster (a 422 for its name), so each tick parsed the spec again and
    wrote its status and Event again, with no line in the log."""
    caplog.set_level(logging.WARNING, logger="gpufleet.autoscaler.controller.status_writer")
    deploy(api)
    autoscaler(api, {**KEDA_SPEC, "minReplicas": 9})
    apiserver.faults.forbid_writes_suffix = "/events"
    ctl, prom = controller(api, "http://127.0.0.1:9")
    try:
        for _ in range(5):
            await ctl.tick()
    finally:
        apiserver.faults.forbid_writes_suffix = ""
        await prom.close()
    writes = [r for r in apiserver.requests if r.method in ("PATCH", "POST")]
    assert sum(r.path.endswith("/gpuautoscalers/chat/status") for r in writes) == 1
    assert sum(r.path.endswith("/events") for r in writes) == 1
    assert conditions(api)["ScalingActive"] == ("False", "InvalidSpec")
    (said,) = [r.getMessage() for r in caplog.records if r.name.endswith("status_writer")]
    assert said.startswith("cannot record Events: 403")


async def test_a_spec_made_invalid_deletes_what_its_status_said_of_the_valid_one(
    api: client.ApiClient,
) -> None:
    """A merge patch keeps what it omits: an invalid spec's status went on showing the last
    valid one's desired count, the term that bound it and its signal values. What the
    policy learned (resumed once the spec is mended) and the last scale time stay."""
    deploy(api)
    autoscaler(api, {k: v for k, v in KEDA_SPEC.items() if k not in ("policy", "keda")})
    await one_tick_without_prometheus(api)
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        *GPA,
        "chat",
        {"status": {"signals": {"queue_depth": 42.0}, "lastScaleTime": "2026-11-24T00:00:00Z"}},
        _content_type="application/merge-patch+json",
    )
    before = status(api)
    assert {"desiredReplicas", "boundBy", "learned", "signals"} <= set(before)
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        *GPA, "chat", {"spec": {"minReplicas": 9}}
    )
    await one_tick_without_prometheus(api)
    after = status(api)
    assert after["reason"] == "InvalidSpec"
    assert not {"desiredReplicas", "currentReplicas", "boundBy", "signals"} & set(after)
    assert after["learned"] == before["learned"]
    assert after["lastScaleTime"] == "2026-11-24T00:00:00Z"


async def test_a_signal_no_longer_sampled_leaves_the_status(api: client.ApiClient) -> None:
    """The status' signals were written as a merge patch of the current samples only: with
    none current, it kept showing the last values beside a MissingMetrics condition."""
    deploy(api)
    autoscaler(api, KEDA_SPEC)
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        *GPA,
        "chat",
        {"status": {"signals": {"arrival_rate": 7.5, "queue_depth": 42.0}}},
        _content_type="application/merge-patch+json",
    )
    await one_tick_without_prometheus(api)
    assert conditions(api)["ScalingActive"][1] == "MissingMetrics"
    assert not status(api).get("signals")


async def test_a_bad_spec_whose_report_failed_is_reported_on_a_later_tick(
    api: client.ApiClient, apiserver: FakeApiServer
) -> None:
    """It was remembered as reported before its write: one failed write, and the bad spec
    was never reported (no status, no Event, no log line)."""
    deploy(api)
    autoscaler(api, {**KEDA_SPEC, "minReplicas": 9})
    ctl, prom = controller(api, "http://127.0.0.1:9")
    apiserver.faults.forbid_writes_suffix = "/status"
    try:
        await ctl.tick()
        apiserver.faults.forbid_writes_suffix = ""
        await ctl.tick()
    finally:
        await prom.close()
    assert conditions(api)["ScalingActive"] == ("False", "InvalidSpec")


async def test_a_gpuautoscaler_made_again_is_a_new_object(api: client.ApiClient) -> None:
    """Deleted and made again between ticks, it is at generation 1 again: the controller
    kept running the old spec (maxReplicas 8, the old uid) for good."""
    deploy(api, replicas=4)
    autoscaler(api, KEDA_SPEC)
    ctl, prom = controller(api, "http://127.0.0.1:9")
    custom = client.CustomObjectsApi(api)
    args = ("autoscaling.gpufleet.dev", "v1alpha1", NS, "gpuautoscalers")
    try:
        await ctl.tick()
        old = ctl._workloads[(NS, "chat")].spec.uid
        custom.delete_namespaced_custom_object(*args, "chat")
        autoscaler(api, {**KEDA_SPEC, "maxReplicas": 2})
        await ctl.tick()
    finally:
        await prom.close()
    spec = ctl._workloads[(NS, "chat")].spec
    assert spec.uid != old and spec.workload.max_replicas == 2
    assert scale(api) == 2  # the new bound, though the metrics are missing


async def test_a_conflict_is_retried_and_a_broken_workload_stops_no_other(
    api: client.ApiClient, pod_prometheus: Prometheus, apiserver: FakeApiServer
) -> None:
    deploy(api)
    autoscaler(api, KEDA_SPEC)
    ghost = {**KEDA_SPEC, "scaleTargetRef": {"kind": "Deployment", "name": "ghost"}}
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        *GPA,
        {
            "apiVersion": "autoscaling.gpufleet.dev/v1alpha1",
            "kind": "GPUAutoscaler",
            "metadata": {"name": "broken"},
            "spec": ghost,
        },
    )
    apiserver.faults.conflict_next_writes = 1  # the first scale write meets a 409
    apiserver.faults.conflict_path_suffix = "/scale"
    ctl, prom = controller(api, f"http://127.0.0.1:{pod_prometheus.port}")
    try:
        await ticks_until(ctl, lambda: scale(api) > 1)
    finally:
        await prom.close()
    assert scale(api) == 4
    writes = [r for r in apiserver.requests if r.method == "PATCH" and r.path.endswith("/scale")]
    assert [r.status for r in writes] == [409, 200]  # read again, then written
    broken = client.CustomObjectsApi(api).get_namespaced_custom_object(*GPA, "broken")["status"]
    able = {c["type"]: c for c in broken["conditions"]}["AbleToScale"]
    assert (able["status"], able["reason"]) == ("False", "FailedGetScale")
    assert 'deployments.apps "ghost" not found' in able["message"]


async def test_one_workloads_failing_query_holds_no_other(
    api: client.ApiClient, pod_prometheus: Prometheus
) -> None:
    """A query override Prometheus refuses (400) marked every workload MissingMetrics and
    held all their counts: the first failure of a tick was applied to each."""
    deploy(api)
    autoscaler(api, KEDA_SPEC)
    bad = {
        **KEDA_SPEC,
        "scaleTargetRef": {"kind": "Deployment", "name": "ghost"},
        "signals": {"queries": {"queueDepth": "sum by (namespace, pod) (rate(x[1m]"}},
    }
    create_autoscaler(api, NS, bad, name="other")
    ctl, prom = controller(api, f"http://127.0.0.1:{pod_prometheus.port}")
    try:
        await ticks_until(ctl, lambda: scale(api) > 1)
    finally:
        await prom.close()
    assert conditions(api)["ScalingActive"] == ("True", "ValidMetricFound")
    assert ctl.stats.errors["prometheus_bad_query"] >= 1
    assert ctl.stats.missing_metrics == {f"{NS}/chat": False, f"{NS}/other": True}


async def test_a_second_gpuautoscaler_on_a_target_stands_aside(
    api: client.ApiClient, apiserver: FakeApiServer
) -> None:
    """Two on one Deployment (maxReplicas 8 and 2) both wrote its scale every tick,
    flipping it, with an Event each time: now the younger stands aside as from an HPA."""
    deploy(api, replicas=3)
    autoscaler(api, KEDA_SPEC)
    create_autoscaler(api, NS, {**KEDA_SPEC, "maxReplicas": 2}, name="late")
    ctl, prom = controller(api, "http://127.0.0.1:9")
    try:
        for _ in range(3):
            await ctl.tick()
    finally:
        await prom.close()
    assert scale(api) == 3  # chat holds on missing metrics; late writes nothing
    late = client.CustomObjectsApi(api).get_namespaced_custom_object(*GPA, "late")["status"]
    active = {c["type"]: c for c in late["conditions"]}["AbleToScale"]
    assert "GPUAutoscaler/chat already scales the target" in late["message"] + active["message"]
    assert not [r for r in apiserver.requests if r.method == "PATCH" and r.path.endswith("/scale")]


async def test_the_hpa_policy_scales_on_the_exporters_gpu_utilization(
    api: client.ApiClient, prometheus_for
) -> None:
    """Per-pod GPU telemetry comes from the exporter's DCGM series (labelled with the pod)."""
    pod = MetricsServer(lambda: "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL 90\n")
    try:
        deploy(api)
        prometheus = await scraped(
            prometheus_for(pod.address, labels=POD_LABELS), "DCGM_FI_DEV_GPU_UTIL"
        )
        # The operator's behavior wins over the HPA's common 60 s scale-up window.
        behavior = {"scaleUp": {"stabilizationWindowSeconds": 0}}
        autoscaler(
            api,
            {
                **KEDA_SPEC,
                "policy": "hpa",
                "hpa": {"targetGPUUtilization": 60},
                "behavior": behavior,
            },
        )
        ctl, prom = controller(api, f"http://127.0.0.1:{prometheus.port}")
        try:
            await ticks_until(ctl, lambda: scale(api) > 1)
        finally:
            await prom.close()
    finally:
        pod.stop()
    assert scale(api) == 2  # ceil(1 x 90 / 60)
    assert "gpu_util avg 90.0 over 1 pods vs target 60" in status(api)["message"]


async def test_a_status_it_cannot_write_is_one_line_and_its_warning_one_event(
    api: client.ApiClient, apiserver: FakeApiServer, caplog
) -> None:
    """403 on the status: nothing was logged, and the Warning for a missing target went
    out every tick (200 Event writes in 200 ticks), as the status kept the old state."""
    caplog.set_level(logging.INFO, logger="gpufleet.autoscaler.controller.status_writer")
    deploy(api)  # the namespace; the GPUAutoscaler's own target is not there
    create_autoscaler(
        api, NS, {**KEDA_SPEC, "scaleTargetRef": {"kind": "Deployment", "name": "ghost"}}
    )
    apiserver.faults.forbid_writes_suffix = "/status"
    ctl, prom = controller(api, "http://127.0.0.1:9")

    def event_writes() -> int:
        return sum(1 for r in apiserver.requests if "/events" in r.path and r.method != "GET")

    try:
        await ctl.tick()
        first = event_writes()  # a Warning per condition that turned bad
        for _ in range(9):
            await ctl.tick()
    finally:
        apiserver.faults.forbid_writes_suffix = ""
        await prom.close()
    assert event_writes() == first >= 1
    said = [r.getMessage() for r in caplog.records if "status" in r.getMessage()]
    assert said == ["llm/chat: cannot write its status: 403: injected: no such verb"]


async def test_a_lease_lost_mid_tick_stops_the_writes_left(
    api: client.ApiClient, apiserver: FakeApiServer
) -> None:
    """Leadership was read once a tick: a lease lost meanwhile still let that tick write
    scales, statuses and Events, while another replica may already lead."""
    deploy(api)
    autoscaler(api, KEDA_SPEC)
    calls = itertools.count()
    # leader when the tick began, then not
    ctl, prom = controller(api, "http://127.0.0.1:9", is_leader=lambda: next(calls) == 0)
    before = len(apiserver.requests)  # the setup's writes
    try:
        await ctl.tick()
    finally:
        await prom.close()
    assert ctl.stats.leader is True
    made = apiserver.requests[before:]
    assert made and not [r for r in made if r.method in ("PATCH", "POST", "PUT")]


async def test_a_lease_lost_while_a_write_waits_for_a_thread_stops_it(
    api: client.ApiClient, apiserver: FakeApiServer, pod_prometheus: Prometheus
) -> None:
    """Leadership was asked on the loop, before each write was queued for a thread. With
    the pool full of writes held by a hung webhook, a write queued behind them started
    after the lease was lost. Here the lease is lost just so: leading on the loop, not in
    the threads. No write is made, and none counts as an error."""
    deploy(api)
    autoscaler(api, KEDA_SPEC)  # 200 waiting: it scales up, writes its status, an Event

    def leading() -> bool:
        return threading.current_thread() is threading.main_thread()

    ctl, prom = controller(api, f"http://127.0.0.1:{pod_prometheus.port}", is_leader=leading)
    before = len(apiserver.requests)  # the setup's writes
    try:
        for _ in range(3):
            await tick(ctl)
    finally:
        ctl.close()
        await prom.close()
    assert ctl._workloads[(NS, "chat")].decided > 1  # it would have scaled
    made = apiserver.requests[before:]
    assert not [r for r in made if r.method in ("PATCH", "POST", "PUT", "DELETE")]
    assert not +ctl.stats.errors


async def test_a_restarted_controller_writes_no_status_it_need_not(
    api: client.ApiClient, pod_prometheus: Prometheus, apiserver: FakeApiServer
) -> None:
    """A restart lost lastScaleTime, so every tick's status differed from what the API
    held and was written again (20 PATCHes in 20 steady ticks) until the next scale. And
    a field no longer said (boundBy after a switch to keda) stayed for good, rewritten
    every tick: a merge patch keeps what it omits."""
    deploy(api)
    autoscaler(api, {**KEDA_SPEC, "policy": "gpufleet"})
    url = f"http://127.0.0.1:{pod_prometheus.port}"
    first, prom = controller(api, url)
    try:
        await ticks_until(first, lambda: "lastScaleTime" in status(api))
    finally:
        await prom.close()
    assert "boundBy" in status(api)
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        *GPA, "chat", {"spec": {"policy": "keda"}}
    )
    restarted, prom = controller(api, url)

    def status_writes() -> int:
        return sum(
            1 for r in apiserver.requests if r.method == "PATCH" and r.path.endswith("/status")
        )

    try:
        await restarted.tick()
        before = status_writes()
        for _ in range(10):
            await restarted.tick()
    finally:
        await prom.close()
    assert status_writes() - before <= 1  # the 30 s refresh of the signals at most
    assert "boundBy" not in status(api) and "lastScaleTime" in status(api)
    assert "learned" not in status(api)  # gpufleet's, which keda would never resume


async def test_a_restarted_controller_resumes_what_the_policy_learned(
    api: client.ApiClient,
) -> None:
    deploy(api)
    autoscaler(api, {k: v for k, v in KEDA_SPEC.items() if k not in ("policy", "keda")})
    learned = {"samples": 500, "sat_weight": 20.0, "sat_tokens": 300_000.0, "probe": 1.25}
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        *GPA,
        "chat",
        {"status": {"learned": learned}},
        _content_type="application/merge-patch+json",
    )
    await one_tick_without_prometheus(api)
    resumed = status(api)["learned"]
    assert resumed["samples"] >= 500 and resumed["probe"] == 1.25  # not relearning from 0


async def test_status_names_the_term_that_bound_the_decision(api: client.ApiClient) -> None:
    # Issue 17: gpufleet's decision says which term set the count; the spec's knob is
    # accepted as the CRD declares it.
    deploy(api, replicas=3)
    spec = {k: v for k, v in KEDA_SPEC.items() if k not in ("policy", "keda")}
    autoscaler(api, {**spec, "slo": {"ttftSeconds": 2, "targetAttainment": 0.999}})
    await one_tick_without_prometheus(api)  # nothing listens: signals missing
    s = status(api)
    assert (s["reason"], s["boundBy"]) == ("MissingMetrics", "missing signals")
    assert s["message"].endswith("; bound by missing signals")
    assert conditions(api)["ScalingActive"][1] == "MissingMetrics"  # not InvalidSpec


async def one_tick_at_min_two(api: client.ApiClient, target: dict) -> None:
    """One tick of a GPUAutoscaler on `target` with minReplicas 2 and Prometheus down:
    the count is held, never lowered, but raised to the minimum."""
    autoscaler(api, {"scaleTargetRef": target, "minReplicas": 2, "maxReplicas": 4})
    await one_tick_without_prometheus(api)


async def test_any_kind_with_a_scale_subresource_a_leaderworkerset(api: client.ApiClient) -> None:
    """A custom resource's scale subresource, found through discovery."""
    deploy(api)
    lws = ("leaderworkerset.x-k8s.io", "v1", NS, "leaderworkersets")
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        *lws,
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "llama-70b"},
            "spec": {"replicas": 1},
        },
    )
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        *lws,
        "llama-70b",
        {"status": {"replicas": 1, "hpaPodSelector": "app=vllm"}},
        _content_type="application/merge-patch+json",
    )
    await one_tick_at_min_two(
        api,
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "name": "llama-70b",
        },
    )
    got = client.CustomObjectsApi(api).get_namespaced_custom_object(*lws, "llama-70b")
    # Prometheus is down (held, never lowered), but minReplicas 2 raises it from 1.
    assert got["spec"]["replicas"] == 2
    assert status(api)["currentReplicas"] == 1  # the pods its hpaPodSelector selects


async def test_a_replicationcontroller_of_the_core_group(api: client.ApiClient) -> None:
    """apiVersion v1 (the core group, no `/apis/` prefix): discovery asked `/apis//v1`."""
    deploy(api)
    client.CoreV1Api(api).create_namespaced_replication_controller(
        NS,
        {
            "metadata": {"name": "vllm-rc"},
            "spec": {
                "replicas": 1,
                "selector": {"app": "vllm"},
                "template": {
                    "metadata": {"labels": {"app": "vllm"}},
                    "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]},
                },
            },
        },
    )
    await one_tick_at_min_two(
        api, {"apiVersion": "v1", "kind": "ReplicationController", "name": "vllm-rc"}
    )
    got = client.CoreV1Api(api).read_namespaced_replication_controller_scale("vllm-rc", NS)
    assert (got.spec.replicas, got.status.selector) == (2, "app=vllm")
    assert status(api)["currentReplicas"] == 1  # vllm-0, which its selector selects


async def test_prometheus_stopped_mid_run_holds_the_count_then_recovers(
    api: client.ApiClient, serving_pod: str, tmp_path, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="gpufleet.autoscaler.controller.loop")
    deploy(api)
    prometheus = Prometheus(tmp_path / "prom", serving_pod, labels=POD_LABELS)
    try:
        await scraped(prometheus)
        autoscaler(api, {**KEDA_SPEC, "maxReplicas": 4})
        ctl, prom = controller(api, f"http://127.0.0.1:{prometheus.port}")
        try:
            await ticks_until(ctl, lambda: scale(api) == 4)
            prometheus.stop()
            deadline = time.monotonic() + 20
            while conditions(api)["ScalingActive"][1] != "MissingMetrics":
                # A tick queries only once a new step is due, so this takes a second or two.
                assert time.monotonic() < deadline, "no MissingMetrics condition"
                await ctl.tick()
                assert scale(api) == 4  # held: never lowered on missing data
                await asyncio.sleep(0.2)
            for _ in range(3):
                await ctl.tick()
                assert scale(api) == 4
                await asyncio.sleep(0.5)
            prometheus = Prometheus(
                tmp_path / "prom", serving_pod, labels=POD_LABELS, port=prometheus.port
            )
            await ticks_until(
                ctl,
                lambda: conditions(api)["ScalingActive"] == ("True", "ValidMetricFound"),
                timeout=30,
            )
        finally:
            await prom.close()
        assert scale(api) == 4
        # Every failed tick held the count; the log says so when it began and when it ended.
        said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Prometheus")]
        assert len(said) == 2, said
        assert said[0].startswith("Prometheus queries fail; counts held: unavailable: ")
        assert said[1].startswith("Prometheus queries fail; counts held: works again, after ")
    finally:
        prometheus.stop()


OTHER = {
    **KEDA_SPEC,
    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"},
}


async def test_a_workload_whose_step_raises_sits_the_tick_out_alone(
    api: client.ApiClient, caplog, monkeypatch
) -> None:
    """An exception out of one workload's step (a bug, or cluster data nothing checked)
    left the tick, so no workload was decided or written, and the daemon exited. Injected
    here into one workload's target read: the other is still raised to its minimum, and
    the failing one is one error line with its traceback, not one a tick."""
    caplog.set_level(logging.INFO, logger="gpufleet.autoscaler.controller.loop")
    deploy(api)
    autoscaler(api, {**KEDA_SPEC, "minReplicas": 2})
    create_autoscaler(api, NS, OTHER, name="other")
    ctl, prom = controller(api, "http://127.0.0.1:9")
    read = ctl._read_target

    async def failing(t, view, index) -> None:
        if t.workload.spec.name == "other":
            raise RuntimeError("a bug")
        await read(t, view, index)

    monkeypatch.setattr(ctl, "_read_target", failing)
    try:
        await ctl.tick()
        await ctl.tick()
    finally:
        await prom.close()
    assert scale(api) == 2
    assert ctl.stats.errors["workload"] == 2
    said = [r for r in caplog.records if "reading its target fails" in r.getMessage()]
    assert len(said) == 1 and said[0].exc_info is not None
    assert said[0].getMessage() == (
        "llm/other: reading its target fails; it sits this tick out: RuntimeError: a bug"
    )


@pytest.mark.parametrize(
    ("change", "said"),
    [
        # the API server keeps a null in a preserve-unknown-fields object
        (
            {"signals": {"queries": {"queueDepth": None}}},
            "spec: cannot be read: AttributeError",
        ),
        (
            {"schedules": [{"name": "s", "schedule": "0 9 * * *", "duration": "999999999h"}]},
            "'999999999h': at most 8784h (366 days)",
        ),
    ],
    ids=["null-query", "duration-past-year-one"],
)
async def test_a_spec_nothing_foresaw_is_an_invalid_spec_not_a_stopped_loop(
    api: client.ApiClient, change: dict, said: str
) -> None:
    deploy(api)
    autoscaler(api, {**KEDA_SPEC, **change})
    await one_tick_without_prometheus(api)
    assert conditions(api)["ScalingActive"] == ("False", "InvalidSpec")
    assert said in status(api)["message"]


async def test_a_status_of_any_shape_is_rewritten_not_a_stopped_loop(api: client.ApiClient) -> None:
    """A status edited by hand: condition items that are not objects, a type that is a
    list. condition_list raised on them, every tick, for every workload."""
    deploy(api)
    autoscaler(api, {**KEDA_SPEC, "minReplicas": 2})
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        *GPA,
        "chat",
        {"status": {"conditions": ["x", 3, {"type": ["AbleToScale"]}, {"status": "True"}]}},
        _content_type="application/merge-patch+json",
    )
    await one_tick_without_prometheus(api)
    assert scale(api) == 2
    assert conditions(api)["AbleToScale"][0] == "True"
