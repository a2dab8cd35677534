"""The external metrics API over real HTTPS, reached as kube-apiserver's aggregator reaches
it: the official client with the proxy client certificate and X-Remote-* headers, the
ConfigMap and SubjectAccessReviews served by the lab's fake API server."""

import asyncio
import shutil
import ssl
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal

import pytest
import pytest_asyncio
from cryptography import x509
from helpers import free_port, wait_for
from helpers.aggregator import (
    HPA_GROUP,
    HPA_USER,
    AggregatorPki,
    grant_hpa_external_metrics,
    make_pki,
    proxied_client,
    publish_authentication,
)
from helpers.kube import create_autoscaler, create_vllm
from helpers.pki import served_certificate, swap_in
from helpers.serving import MetricsServer, vllm_queue
from kubernetes import client, utils

from gpufleet.autoscaler.controller import Controller, ControllerConfig
from gpufleet.autoscaler.core import extmetrics as em
from gpufleet.autoscaler.core.hpa.calc import average_value_replicas
from gpufleet.autoscaler.core.observation import PodTelemetry
from gpufleet.autoscaler.extmetrics import server as extmetrics_server
from gpufleet.autoscaler.extmetrics.server import (
    Authorizer,
    AuthSource,
    from_feed,
    make_app,
    serve,
    tls_context,
)
from gpufleet.autoscaler.kube.cluster import Cluster
from gpufleet.autoscaler.prom.client import PromClient
from gpufleet.kube.events import EventRecorder
from gpufleet.lab.kubeapi.server import FakeApiServer

NS = "llm"
NOW = 1_790_000_000.0  # 2026-09-21T...Z
ARGS = (em.GROUP, em.VERSION, NS)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> AggregatorPki:
    return make_pki(tmp_path_factory.mktemp("aggregator"))


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def kube(apiserver: FakeApiServer, pki: AggregatorPki) -> Iterator[client.ApiClient]:
    config = client.Configuration()
    config.host = apiserver.url
    with client.ApiClient(config) as api:
        publish_authentication(api, pki)
        grant_hpa_external_metrics(api)
        yield api


def snapshot() -> em.MetricsSnapshot:
    def workload(name: str, queue: float, model: str = "") -> em.WorkloadMetrics:
        return em.workload_metrics(
            namespace=NS,
            name=name,
            target=name,
            model=model,
            signals={"queue_depth": (NOW - 2, queue), "arrival_rate": (NOW - 2, 3.25)},
            pods=(NOW - 1, (PodTelemetry(pod="p0", gpu_util_percent=80.0),)),
            desired=3,
            current=2,
            ready=2,
            now=NOW,
            fresh_after=0.0,
        )

    return em.MetricsSnapshot([workload("chat", 1.5, "llama"), workload("batch", 2000)])


@pytest_asyncio.fixture
async def url(kube: client.ApiClient, pki: AggregatorPki) -> AsyncIterator[str]:
    feed = em.SnapshotFeed()
    feed.publish(snapshot())
    auth = await asyncio.to_thread(AuthSource, kube)
    tls = tls_context(str(pki.server_cert), str(pki.server_key), auth)
    app = make_app(from_feed(feed), auth, Authorizer(kube), window_seconds=30)
    port = free_port()
    runner = await serve(app, "127.0.0.1", port, tls)
    try:
        yield f"https://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def call(api: client.ApiClient, method: str, *args, **kwargs):
    with api:
        return await asyncio.to_thread(
            getattr(client.CustomObjectsApi(api), method), *args, **kwargs
        )


async def failure(api: client.ApiClient, method: str, *args, **kwargs) -> client.ApiException:
    with pytest.raises(client.ApiException) as caught:
        await call(api, method, *args, **kwargs)
    return caught.value


async def test_the_hpa_reads_a_metric_summed_over_the_selected_workloads(
    url: str, pki: AggregatorPki
) -> None:
    answer = await call(
        proxied_client(url, pki),
        "list_namespaced_custom_object",
        *ARGS,
        "gpufleet_queue_depth",
        label_selector="autoscaler=chat",
    )
    assert answer == {
        "kind": "ExternalMetricValueList",
        "apiVersion": "external.metrics.k8s.io/v1beta1",
        "metadata": {},
        "items": [
            {
                "metricName": "gpufleet_queue_depth",
                "metricLabels": {"autoscaler": "chat", "target": "chat", "model": "llama"},
                "timestamp": em.rfc3339(NOW - 2),
                "value": "1500m",
            }
        ],
    }
    every = await call(
        proxied_client(url, pki), "list_namespaced_custom_object", *ARGS, "gpufleet_queue_depth"
    )
    values = sorted(utils.parse_quantity(i["value"]) for i in every["items"])
    assert values == [Decimal("1.5"), Decimal(2000)]
    assert {i["value"] for i in every["items"]} == {"1500m", "2k"}


async def test_windows_utilization_and_the_policys_recommendation(
    url: str, pki: AggregatorPki
) -> None:
    def read(metric: str):
        return call(
            proxied_client(url, pki),
            "list_namespaced_custom_object",
            *ARGS,
            metric,
            label_selector="model=llama",
        )

    (rate,) = (await read("gpufleet_arrival_rate"))["items"]
    assert (rate["value"], rate["window"]) == ("3250m", 30)
    (util,) = (await read("gpufleet_gpu_utilization"))["items"]
    assert (util["value"], util["timestamp"], "window" in util) == (
        "80",
        em.rfc3339(NOW - 1),
        False,
    )
    (desired,) = (await read("gpufleet_desired_replicas"))["items"]
    (ratio,) = (await read("gpufleet_desired_ratio"))["items"]
    # 3 wanted of 2 Ready: the largest milli below 1.5, so ceil(ratio x 2) is 3 in floats
    assert (desired["value"], ratio["value"]) == ("3", "1499m")


async def test_discovery_lists_every_metric(url: str, pki: AggregatorPki) -> None:
    api = proxied_client(url, pki)
    with api:
        groups = await asyncio.to_thread(client.ApisApi(api).get_api_versions)
        resources = await asyncio.to_thread(
            client.CustomObjectsApi(api).get_api_resources, em.GROUP, em.VERSION
        )
    assert [g.name for g in groups.groups] == ["external.metrics.k8s.io"]
    assert resources.group_version == "external.metrics.k8s.io/v1beta1"
    assert [r.name for r in resources.resources] == list(em.METRICS)
    assert {(r.kind, r.namespaced, tuple(r.verbs)) for r in resources.resources} == {
        ("ExternalMetricValueList", True, ("get",))
    }


async def test_no_client_certificate_or_a_name_not_allowed_is_401(
    url: str, pki: AggregatorPki
) -> None:
    for api in (
        proxied_client(url, pki, with_cert=False),
        proxied_client(url, pki, cert=(pki.stranger_cert, pki.stranger_key)),
    ):
        err = await failure(api, "list_namespaced_custom_object", *ARGS, "gpufleet_queue_depth")
        assert err.status == 401
        assert '"kind":"Status"' in err.body.replace(" ", "")
        assert '"reason":"Unauthorized"' in err.body.replace(" ", "")


async def test_a_user_without_rbac_is_403_and_reviews_are_cached(
    url: str, pki: AggregatorPki, apiserver: FakeApiServer
) -> None:
    err = await failure(
        proxied_client(url, pki, user="bob", group="system:authenticated"),
        "list_namespaced_custom_object",
        *ARGS,
        "gpufleet_queue_depth",
    )
    assert err.status == 403
    assert (
        'gpufleet_queue_depth.external.metrics.k8s.io is forbidden: User \\"bob\\" cannot list '
        'resource \\"gpufleet_queue_depth\\" in API group \\"external.metrics.k8s.io\\" in the '
        'namespace \\"llm\\"'
    ) in err.body
    for _ in range(3):
        await call(
            proxied_client(url, pki), "list_namespaced_custom_object", *ARGS, "gpufleet_queue_depth"
        )
    reviews = [r for r in apiserver.requests if r.path.endswith("/subjectaccessreviews")]
    assert [r.status for r in reviews] == [201, 201]  # bob's, then the HPA's once


async def test_a_bad_label_selector_is_400_with_a_status(url: str, pki: AggregatorPki) -> None:
    err = await failure(
        proxied_client(url, pki),
        "list_namespaced_custom_object",
        *ARGS,
        "gpufleet_queue_depth",
        label_selector="autoscaler in (chat",
    )
    assert err.status == 400
    body = err.body.replace(" ", "")
    assert '"kind":"Status"' in body and '"reason":"BadRequest"' in body and '"code":400' in body
    assert "labelSelector" in err.body


async def test_an_unknown_metric_is_404(url: str, pki: AggregatorPki) -> None:
    err = await failure(proxied_client(url, pki), "list_namespaced_custom_object", *ARGS, "nope")
    assert err.status == 404


def _tls_to(pki: AggregatorPki) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.serving_ca))
    ctx.load_cert_chain(str(pki.proxy_cert), str(pki.proxy_key))
    return ctx


async def _exchange(url: str, pki: AggregatorPki, request: bytes) -> bytes:
    """`request` as sent over TLS with the proxy certificate; everything read back until
    the server closes."""
    host, port = url.removeprefix("https://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port), ssl=_tls_to(pki))
    writer.write(request)
    try:
        return await asyncio.wait_for(reader.read(), timeout=30)
    finally:
        writer.close()


async def test_head_is_get_without_a_body_and_other_methods_are_405_with_allow(
    url: str, pki: AggregatorPki
) -> None:
    path = f"/apis/{em.GROUP}/{em.VERSION}/namespaces/{NS}/gpufleet_queue_depth"
    who = f"X-Remote-User: {HPA_USER}\r\nX-Remote-Group: {HPA_GROUP}\r\nConnection: close"
    head = await _exchange(url, pki, f"HEAD {path} HTTP/1.1\r\nHost: x\r\n{who}\r\n\r\n".encode())
    assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n")  # no body
    post = await _exchange(url, pki, f"POST {path} HTTP/1.1\r\nHost: x\r\n{who}\r\n\r\n".encode())
    assert post.startswith(b"HTTP/1.1 405 ") and b"\r\nAllow: GET, HEAD\r\n" in post


async def test_a_half_sent_request_is_dropped_at_the_idle_timeout(
    kube: client.ApiClient, pki: AggregatorPki, monkeypatch
) -> None:
    """aiohttp's default kept it an hour, and a connection that never began its TLS
    handshake a minute: enough of them held every descriptor."""
    monkeypatch.setattr(extmetrics_server, "IDLE_TIMEOUT_SECONDS", 0.5)
    auth = await asyncio.to_thread(AuthSource, kube)
    tls = tls_context(str(pki.server_cert), str(pki.server_key), auth)
    app = make_app(from_feed(em.SnapshotFeed()), auth, Authorizer(kube), window_seconds=30)
    port = free_port()
    runner = await serve(app, "127.0.0.1", port, tls)
    try:
        replies = await _exchange(f"https://127.0.0.1:{port}", pki, b"GET /apis HTTP/1.1\r\nHo")
        # and one that never begins its TLS handshake (asyncio's own default: 60 s)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        silent = await asyncio.wait_for(reader.read(), timeout=30)
        writer.close()
    finally:
        await runner.cleanup()
    assert replies == b"" and silent == b""  # closed, nothing answered


async def test_a_review_that_cannot_be_made_is_500_and_no_answer(
    url: str, pki: AggregatorPki, apiserver: FakeApiServer
) -> None:
    apiserver.faults.fail_next = 1
    err = await failure(
        proxied_client(url, pki, user="carol"),
        "list_namespaced_custom_object",
        *ARGS,
        "gpufleet_queue_depth",
    )
    assert err.status == 500 and '"reason": "InternalError"' in err.body


async def test_a_rotated_front_proxy_ca_is_taken_without_a_restart(
    kube: client.ApiClient, pki: AggregatorPki, tmp_path_factory, caplog
) -> None:
    """The request-header CA and names were read once at start. When the cluster rotated
    its front-proxy CA, every proxied request (the availability probe too) failed its
    handshake until gpufleet restarted; k8s.io/apiserver follows the ConfigMap."""
    auth = await asyncio.to_thread(AuthSource, kube)
    feed = em.SnapshotFeed()
    feed.publish(snapshot())
    tls = tls_context(str(pki.server_cert), str(pki.server_key), auth)
    app = make_app(from_feed(feed), auth, Authorizer(kube), window_seconds=30)
    port = free_port()
    runner = await serve(app, "127.0.0.1", port, tls)
    url = f"https://127.0.0.1:{port}"
    rotated = make_pki(tmp_path_factory.mktemp("rotated"))
    core = client.CoreV1Api(kube)
    both = pki.proxy_ca.read_text() + rotated.proxy_ca.read_text()  # as during a rotation
    args = ("extension-apiserver-authentication", "kube-system")
    core.patch_namespaced_config_map(*args, {"data": {"requestheader-client-ca-file": both}})

    async def served(cert: tuple) -> bool:
        api = proxied_client(url, pki, cert=cert)
        try:
            await call(api, "list_namespaced_custom_object", *ARGS, "gpufleet_queue_depth")
        except Exception:  # the handshake refused, as the old CA does not sign it
            return False
        return True

    try:
        new = (rotated.proxy_cert, rotated.proxy_key)
        assert not await served(new)
        await asyncio.to_thread(auth.refresh)
        for _ in range(50):  # the context is looked at again once a second at most
            if await served(new):
                break
            await asyncio.sleep(0.1)
        assert await served(new) and await served((pki.proxy_cert, pki.proxy_key))
        core.delete_namespaced_config_map(*args)  # a failed read keeps what was read
        await asyncio.to_thread(auth.refresh)
        await asyncio.to_thread(auth.refresh)
        assert await served(new)
        assert caplog.text.count("keeping the last request-header settings") == 1
    finally:
        await runner.cleanup()


async def test_the_aggregators_probe_and_health_paths_need_no_review(
    url: str, pki: AggregatorPki, apiserver: FakeApiServer
) -> None:
    """As k8s.io/apiserver's delegating authorizer: system:masters (kube-aggregator probes
    discovery as system:kube-aggregator in it) and /healthz, /readyz, /livez never wait on
    a SubjectAccessReview. With reviews failing, the probe got 500 and the APIService went
    Available=False, taking every HPA on it along."""
    apiserver.faults.fail_next = 10
    probe = proxied_client(url, pki, user="system:kube-aggregator", group="system:masters")
    with probe:
        resources = await asyncio.to_thread(
            client.CustomObjectsApi(probe).get_api_resources, em.GROUP, em.VERSION
        )
    assert resources.group_version == f"{em.GROUP}/{em.VERSION}"
    for path in ("/healthz", "/readyz", "/livez"):
        ask = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        reply = await _exchange(url, pki, ask.encode())
        assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b"\r\n\r\nok")
    assert not [r for r in apiserver.requests if r.path.endswith("/subjectaccessreviews")]


@pytest.mark.prometheus
async def test_an_hpa_follows_the_controllers_decision_through_the_api(
    kube: client.ApiClient, pki: AggregatorPki, prometheus_for
) -> None:
    """Real Prometheus -> the live controller -> this API -> the HPA's own arithmetic: the
    team keeps its HPA (the controller sees it and never writes) and lands on gpufleet's
    count."""
    pod = MetricsServer(vllm_queue())
    prom_client = None
    try:
        prometheus = prometheus_for(pod.address, labels={"namespace": NS, "pod": "vllm-0"})
        create_vllm(kube, NS, replicas=1, ready_pod="vllm-0")
        create_autoscaler(
            kube,
            NS,
            {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
                "maxReplicas": 8,
            },
        )
        hpa_metric = {
            "type": "External",
            "external": {
                "metric": {
                    "name": "gpufleet_desired_replicas",
                    "selector": {"matchLabels": {"autoscaler": "chat"}},
                },
                "target": {"type": "AverageValue", "averageValue": "1"},
            },
        }
        client.AutoscalingV2Api(kube).create_namespaced_horizontal_pod_autoscaler(
            NS,
            {
                "metadata": {"name": "vllm"},
                "spec": {
                    "scaleTargetRef": {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": "vllm",
                    },
                    "maxReplicas": 8,
                    "metrics": [hpa_metric],
                },
            },
        )
        await asyncio.to_thread(
            wait_for,
            lambda: prometheus.query("count_over_time(vllm:num_requests_waiting[1m]) >= 3"),
            timeout=30,
        )
        feed = em.SnapshotFeed()
        prom_client = PromClient(f"http://127.0.0.1:{prometheus.port}", timeout_seconds=5)
        ctl = Controller(
            Cluster(kube),
            prom_client,
            EventRecorder(kube, controller="gpufleet.dev/autoscaler", instance="t"),
            config=ControllerConfig(scrape_interval_seconds=1.0, rate_window="5s"),
            feed=feed,
        )
        gpa = client.CustomObjectsApi(kube)

        def desired() -> int:
            obj = gpa.get_namespaced_custom_object(
                "autoscaling.gpufleet.dev", "v1alpha1", NS, "gpuautoscalers", "chat"
            )
            return (obj.get("status") or {}).get("desiredReplicas") or 0

        for _ in range(100):
            await ctl.tick()
            if await asyncio.to_thread(desired) > 1:
                break
            await asyncio.sleep(0.2)
        wanted = await asyncio.to_thread(desired)
        assert wanted > 1  # 200 queued on one replica

        auth = await asyncio.to_thread(AuthSource, kube)
        tls = tls_context(str(pki.server_cert), str(pki.server_key), auth)
        app = make_app(from_feed(feed), auth, Authorizer(kube), window_seconds=5)
        port = free_port()
        runner = await serve(app, "127.0.0.1", port, tls)
        try:
            answer = await call(
                proxied_client(f"https://127.0.0.1:{port}", pki),
                "list_namespaced_custom_object",
                *ARGS,
                "gpufleet_desired_replicas",
                label_selector="autoscaler=chat",
            )
        finally:
            await runner.cleanup()
        total = sum(float(utils.parse_quantity(i["value"])) for i in answer["items"])
        proposal = average_value_replicas(status_replicas=1, total=total, target=1.0)
        assert proposal.replicas == wanted
        scale = client.AppsV1Api(kube).read_namespaced_deployment_scale("vllm", NS)
        assert scale.spec.replicas == 1  # the HPA's to write, not the controller's
    finally:
        pod.stop()
        if prom_client is not None:
            await prom_client.close()


async def test_a_renewed_serving_certificate_is_served_without_a_restart(
    kube: client.ApiClient, pki: AggregatorPki, tmp_path_factory
) -> None:
    """The serving certificate was loaded once: after cert-manager renewed the Secret the
    old one was served until it expired, and the APIService with it."""
    mounted = tmp_path_factory.mktemp("mounted")
    cert, key = mounted / "tls.crt", mounted / "tls.key"
    shutil.copy(pki.server_cert, cert)
    shutil.copy(pki.server_key, key)
    auth = await asyncio.to_thread(AuthSource, kube)
    app = make_app(from_feed(em.SnapshotFeed()), auth, Authorizer(kube), window_seconds=30)
    port = free_port()
    runner = await serve(app, "127.0.0.1", port, tls_context(str(cert), str(key), auth))

    try:
        first = await asyncio.to_thread(served_certificate, port)
        renewed = make_pki(tmp_path_factory.mktemp("renewed"))
        swap_in(((renewed.server_key, key), (renewed.server_cert, cert)))
        for _ in range(50):  # looked at again once a second at most
            if await asyncio.to_thread(served_certificate, port) != first:
                break
            await asyncio.sleep(0.1)
        now = await asyncio.to_thread(served_certificate, port)
        assert now == x509.load_pem_x509_certificate(renewed.server_cert.read_bytes())
    finally:
        await runner.cleanup()


async def test_a_refresh_that_raises_keeps_the_settings_and_the_loop(
    kube: client.ApiClient, caplog, monkeypatch
) -> None:
    """Only a ValueError was caught: any other failure (the client unable to refresh its
    token) ended the minute's loop for good, and its stop raised at shutdown."""
    auth = await asyncio.to_thread(AuthSource, kube)
    before = auth.current

    def broken(api):
        raise RuntimeError("kubernetes.config: cannot refresh the token")

    monkeypatch.setattr(extmetrics_server, "read_auth_config", broken)
    for _ in range(2):
        await asyncio.to_thread(auth.refresh)
    assert auth.current == before
    assert caplog.text.count("keeping the last request-header settings") == 1
