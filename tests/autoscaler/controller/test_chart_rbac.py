"""The chart's RBAC against every call the autoscaler makes. The fake API server authorizes
each request of the autoscaler's service account through the ClusterRole, Role and
bindings `helm template` renders, as kube-apiserver's RBAC authorizer does, while the
controller does all it can: reads every list (NodePools, Kueue's Workloads and flavors,
nodes among them), scales up and down (deletion costs first), writes status and Events,
keeps headroom as placeholder pods or a CapacityBuffer and releases it, and holds the
lease. A verb the code uses and the chart does not grant is a 403 here, not in a user's
cluster."""

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from helpers import wait_for
from helpers.chart_rbac import NAMESPACE, RELEASE, admin, as_the_chart_grants, client_with, refused
from helpers.e2e import Prometheus
from helpers.kube import create_autoscaler, create_vllm
from helpers.serving import MetricsServer, vllm_queue
from helpers.tools import require
from kubernetes import client

from gpufleet.autoscaler.controller import Controller, ControllerConfig
from gpufleet.autoscaler.core.observation import Observation
from gpufleet.autoscaler.core.policy import Decision, Reason
from gpufleet.autoscaler.kube.cluster import Cluster
from gpufleet.autoscaler.prom.client import PromClient
from gpufleet.kube.events import EventRecorder
from gpufleet.kube.lease import LeaderElector, LeaseConfig
from gpufleet.lab.kubeapi.server import FakeApiServer

pytestmark = pytest.mark.prometheus
NS = "llm"
ACCOUNT = f"{RELEASE}-gpufleet-autoscaler"
BUFFERS = "capacitybuffers.autoscaling.x-k8s.io"


@dataclass
class Scripted:
    """A policy that asks for what the test says."""

    desired: int
    headroom: int
    name: str = "scripted"
    interval_seconds: float = 0.0

    def decide(self, obs: Observation) -> Decision:
        return Decision(
            desired=self.desired, reason=Reason.SCALE_UP, message="", headroom=self.headroom
        )


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    require("prometheus")
    pod = MetricsServer(vllm_queue())
    prom = Prometheus(tmp_path_factory.mktemp("prom"), pod.address, labels={"namespace": NS})
    try:
        # Up and scraping: a query refused while it starts holds the count, and the
        # scale-down (deletion costs first) would never be written.
        wait_for(
            lambda: prom.query("count_over_time(vllm:num_requests_waiting[1m]) >= 3"),
            timeout=30,
            what="three scrapes",
        )
        yield prom
    finally:
        prom.stop()
        pod.stop()


def the_world(server: FakeApiServer) -> None:
    """The target, its GPUAutoscaler, and an object of every kind a tick reads more of."""
    api = admin(server)
    create_vllm(api, NS, replicas=1, gpus=2, ready_pod="vllm-0")
    create_autoscaler(
        api,
        NS,
        {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
            "maxReplicas": 8,
        },
    )
    custom = client.CustomObjectsApi(api)
    custom.create_cluster_custom_object(
        "karpenter.sh",
        "v1",
        "nodepools",
        {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"}},
    )
    custom.create_namespaced_custom_object(
        "kueue.x-k8s.io",
        "v1beta2",
        NS,
        "workloads",
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "j"}},
    )


@pytest.mark.parametrize("install", [(), (BUFFERS,)], ids=["placeholders", "capacitybuffers"])
async def test_every_call_the_autoscaler_makes_is_granted_by_the_chart(
    install: tuple[str, ...], prometheus: Prometheus, tmp_path
) -> None:
    with FakeApiServer(install=install) as server:
        api = client_with(server, as_the_chart_grants(server, tmp_path, "autoscaler"))
        the_world(server)
        elector = LeaderElector(
            api, LeaseConfig(namespace=NAMESPACE, name=ACCOUNT, identity="autoscaler-0")
        )
        assert elector.try_acquire_or_renew() and elector.try_acquire_or_renew()
        prom = PromClient(f"http://127.0.0.1:{prometheus.port}", timeout_seconds=5)
        events = EventRecorder(api, controller="gpufleet.dev/autoscaler", instance="autoscaler-0")
        config = ControllerConfig(scrape_interval_seconds=1.0, rate_window="5s")
        cluster = Cluster(api, watch=True)  # as the daemon reads: list, then watch
        ctl = Controller(cluster, prom, events, config=config, is_leader=elector.is_leader)
        try:
            await ctl.tick()
            (workload,) = ctl._workloads.values()
            policy = workload.policy = Scripted(desired=3, headroom=2)
            workload.learns = False
            apps = client.AppsV1Api(admin(server))
            target = (NS, "Deployment", "vllm")

            def caught_up() -> bool:
                """The watched view has the target as the API has it: the daemon's 1 s
                tick gives a watch that long, these ticks none."""
                scale = apps.read_namespaced_deployment_scale("vllm", NS).spec.replicas
                return cluster.view().scales[target].replicas == scale

            for step in ((3, 2), (3, 1), (1, 1)):  # up with headroom, less of it, down
                policy.desired, policy.headroom = step
                workload.next_decision_at = 0.0
                await ctl.tick()
                wait_for(caught_up, what="the watch to see the scale")
            apps.delete_namespaced_deployment("vllm", NS)
            wait_for(lambda: target not in cluster.view().scales, what="the watch to see it")
            await ctl.tick()  # the target gone: its headroom released
        finally:
            cluster.close()
            await prom.close()
        elector.release()
        kept = ctl.stats.buffers if install else ctl.stats.placeholders
        assert kept["llm/chat"] == 0
        assert ctl.stats.errors == {"kube_not_found": 1}  # the deleted target's scale
        assert refused(server) == []
        made = {(r.method, r.path.rsplit("/", 1)[-1]) for r in server.requests if r.status < 300}
        # the writes this was about: the scale both ways, deletion costs, Events, the lease
        assert {("PATCH", "scale"), ("PATCH", "vllm-0"), ("POST", "events")} <= made
        assert ("PUT", ACCOUNT) in made
        # and the authorizer refuses what the chart does not grant
        with pytest.raises(client.ApiException) as err:
            client.CoreV1Api(api).delete_namespaced_pod("vllm-0", NS)
        assert err.value.status == 403
