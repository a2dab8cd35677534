"""KEDA's external scaler, driven the way KEDA drives it: a client generated from KEDA's own
externalscaler.proto, over real gRPC, against snapshots the live controller publishes from
real Prometheus. The test plays KEDA's operator (activation 0 <-> 1 on StreamIsActive) and
the HPA it creates (the project's HPA arithmetic on GetMetricSpec and GetMetrics, an
External AverageValue metric), writing the Deployment's scale through the official client.
"""

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
import pytest_asyncio
from cryptography import x509
from helpers import free_port, wait_for
from helpers.aggregator import make_pki
from helpers.kube import create_autoscaler, create_scaled_object, create_vllm
from helpers.pki import served_certificate, swap_in
from helpers.serving import MetricsServer
from kubernetes import client

from gpufleet.autoscaler.controller import Controller, ControllerConfig
from gpufleet.autoscaler.core import extmetrics as em
from gpufleet.autoscaler.core.hpa.calc import average_value_replicas
from gpufleet.autoscaler.kedascaler.api import externalscaler_pb2 as pb
from gpufleet.autoscaler.kedascaler.api import externalscaler_pb2_grpc as pb_grpc
from gpufleet.autoscaler.kedascaler.server import serve, tls_credentials
from gpufleet.autoscaler.kube.cluster import Cluster
from gpufleet.autoscaler.prom.client import PromClient
from gpufleet.kube.events import EventRecorder
from gpufleet.lab.kubeapi.server import FakeApiServer

NS = "llm"
TRIGGER = {
    "scalerAddress": "gpufleet:9403",
    "autoscaler": "chat",
    "metric": "queue_depth",
    "targetValue": "10",
}


def ref(**metadata: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name="chat-so", namespace=NS, scalerMetadata=metadata or TRIGGER)


@pytest_asyncio.fixture
async def scaler() -> AsyncIterator[tuple[em.SnapshotFeed, pb_grpc.ExternalScalerStub]]:
    feed = em.SnapshotFeed()
    port = free_port()
    server = await serve(feed, "127.0.0.1", port)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield feed, pb_grpc.ExternalScalerStub(channel)
    finally:
        await channel.close()
        await server.stop(grace=None)


def publish(feed: em.SnapshotFeed, queue: float | None, *, current: int = 0) -> None:
    signals = {} if queue is None else {"queue_depth": (100.0, queue)}
    feed.publish(
        em.MetricsSnapshot(
            [
                em.workload_metrics(
                    namespace=NS,
                    name="chat",
                    target="vllm",
                    model="",
                    signals=signals,
                    pods=None,
                    desired=None,
                    current=current,
                    ready=0,
                    now=101.0,
                    fresh_after=0.0,
                )
            ]
        )
    )


async def status_of(call) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code()


async def test_answers_and_errors_keda_counts(scaler) -> None:
    feed, stub = scaler
    assert await status_of(stub.IsActive(ref())) == grpc.StatusCode.NOT_FOUND
    publish(feed, None)
    assert await status_of(stub.IsActive(ref())) == grpc.StatusCode.UNAVAILABLE
    bad = ref(autoscaler="chat", metric="queue_depth")
    assert await status_of(stub.GetMetricSpec(bad)) == grpc.StatusCode.INVALID_ARGUMENT
    publish(feed, 0.0)
    assert (await stub.IsActive(ref())).result is False
    publish(feed, 7.5)
    assert (await stub.IsActive(ref())).result is True
    answer = await stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="gpufleet_queue_depth")
    )
    assert list(answer.metricValues) == [
        pb.MetricValue(metricName="gpufleet_queue_depth", metricValue=8, metricValueFloat=7.5)
    ]
    other = pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="s0-cpu")
    assert await status_of(stub.GetMetrics(other)) == grpc.StatusCode.INVALID_ARGUMENT
    spec = await stub.GetMetricSpec(ref())
    assert list(spec.metricSpecs) == [
        pb.MetricSpec(metricName="gpufleet_queue_depth", targetSize=10, targetSizeFloat=10.0)
    ]
    stream = stub.StreamMetricSpec(ref())
    assert await stream.read() == spec  # sent as the stream opens, equal to GetMetricSpec
    stream.cancel()


async def test_numbers_past_int64_are_clamped_not_a_failed_call(scaler) -> None:
    """The proto's targetSize and metricValue are int64: a targetValue of 1e19 (or a sample
    that large) was an UNKNOWN error and a 13-line traceback on every one of KEDA's polls."""
    feed, stub = scaler
    huge = ref(**{**TRIGGER, "targetValue": "1e300"})
    (spec,) = (await stub.GetMetricSpec(huge)).metricSpecs
    assert (spec.targetSize, spec.targetSizeFloat) == (2**63 - 1, 1e300)
    publish(feed, 1e19)
    (value,) = (await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref()))).metricValues
    assert (value.metricValue, value.metricValueFloat) == (2**63 - 1, 1e19)


async def test_stream_is_active_pushes_each_flip_and_nothing_while_unknown(scaler) -> None:
    feed, stub = scaler
    stream = stub.StreamIsActive(ref())
    publish(feed, None)  # no sample yet: nothing is pushed
    publish(feed, 0.0)
    assert (await stream.read()).result is False
    publish(feed, 0.0)  # unchanged: no message
    publish(feed, 3.0, current=1)
    assert (await stream.read()).result is True
    publish(feed, 3.0, current=1)  # unchanged: no message
    publish(feed, 0.0, current=1)
    assert (await stream.read()).result is False
    stream.cancel()


async def test_stream_is_active_pushes_true_again_while_the_target_stays_at_zero(scaler) -> None:
    """KEDA drops a push it cannot act on yet (no metric name in the ScaledObject's status,
    a failed scale: scale_handler.go "will retry on next activation"). Pushed once, the
    activation then waited for pollingInterval; at zero each snapshot pushes it again."""
    feed, stub = scaler
    stream = stub.StreamIsActive(ref())

    async def pushed() -> bool:
        return (await asyncio.wait_for(stream.read(), timeout=10)).result

    publish(feed, 3.0)
    assert await pushed() is True
    publish(feed, 3.0)  # still at zero
    assert await pushed() is True
    publish(feed, 3.0, current=1)  # scaled from zero: the HPA's from here
    publish(feed, 0.0, current=1)
    assert await pushed() is False  # no true pushed in between
    stream.cancel()


# --- the whole path: Prometheus -> controller -> scaler -> KEDA and its HPA ---


@pytest.fixture
def queue() -> Iterator[list[float]]:
    """vLLM's waiting-requests gauge, set by the test. The pod stays up at 0 replicas: it
    stands for what holds requests while the workload has none (a gateway)."""
    value = [0.0]
    server = MetricsServer(
        lambda: (
            "# TYPE vllm:num_requests_waiting gauge\n"
            f'vllm:num_requests_waiting{{model_name="m",engine="0"}} {value[0]}\n'
        )
    )
    value.append(server.address)  # type: ignore[arg-type]
    yield value
    server.stop()


@contextlib.asynccontextmanager
async def running(ctl: Controller) -> AsyncIterator[None]:
    async def loop() -> None:
        while True:
            await ctl.tick()
            await asyncio.sleep(0.2)

    task = asyncio.create_task(loop(), name="controller")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.prometheus
async def test_keda_activates_from_zero_scales_through_its_hpa_and_back(
    queue: list, prometheus_for, scaler
) -> None:
    feed, stub = scaler
    prometheus = prometheus_for(queue[1], labels={"namespace": NS, "pod": "vllm-0"})
    with FakeApiServer() as apiserver:
        config = client.Configuration()
        config.host = apiserver.url
        with client.ApiClient(config) as api:
            create_vllm(api, NS, replicas=0, ready_pod="vllm-0")
            spec = {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
                "minReplicas": 0,
                "maxReplicas": 8,
            }
            create_autoscaler(api, NS, spec)
            # KEDA owns the Deployment: the controller computes and publishes, never writes.
            create_scaled_object(
                api,
                NS,
                "chat-so",
                {
                    "scaleTargetRef": {"name": "vllm"},
                    "triggers": [{"type": "external-push", "metadata": TRIGGER}],
                },
            )
            apps = client.AppsV1Api(api)

            def scale() -> int:
                return apps.read_namespaced_deployment_scale("vllm", NS).spec.replicas

            def write_scale(n: int) -> None:
                apps.patch_namespaced_deployment_scale("vllm", NS, {"spec": {"replicas": n}})

            await asyncio.to_thread(
                wait_for, lambda: prometheus.query("vllm:num_requests_waiting"), timeout=30
            )
            prom = PromClient(f"http://127.0.0.1:{prometheus.port}", timeout_seconds=5)
            events = EventRecorder(api, controller="gpufleet.dev/autoscaler", instance="t")
            ctl = Controller(
                Cluster(api),
                prom,
                events,
                config=ControllerConfig(scrape_interval_seconds=1.0, rate_window="5s"),
                feed=feed,
            )
            try:
                async with running(ctl):
                    active = stub.StreamIsActive(ref())
                    first = await asyncio.wait_for(active.read(), 30)
                    assert (first.result, await asyncio.to_thread(scale)) == (False, 0)

                    queue[0] = 25.0  # the first requests queue while at zero
                    assert (await asyncio.wait_for(active.read(), 30)).result is True
                    await asyncio.to_thread(write_scale, 1)  # KEDA's activation, 0 -> 1
                    # The HPA KEDA created: External AverageValue on s0-gpufleet_queue_depth.
                    (target,) = (await stub.GetMetricSpec(ref())).metricSpecs
                    (value,) = (
                        await stub.GetMetrics(
                            pb.GetMetricsRequest(
                                scaledObjectRef=ref(), metricName=target.metricName
                            )
                        )
                    ).metricValues
                    proposal = average_value_replicas(
                        status_replicas=await asyncio.to_thread(scale),
                        total=value.metricValueFloat,
                        target=target.targetSizeFloat,
                    )
                    assert (value.metricValueFloat, proposal.replicas) == (25.0, 3)
                    await asyncio.to_thread(write_scale, proposal.replicas)
                    assert await asyncio.to_thread(scale) == 3

                    queue[0] = 0.0  # drained: KEDA deactivates (cooldownPeriod 0 here)
                    assert (await asyncio.wait_for(active.read(), 30)).result is False
                    assert (await stub.IsActive(ref())).result is False
                    await asyncio.to_thread(write_scale, 0)
                    active.cancel()
            finally:
                await prom.close()
            assert await asyncio.to_thread(scale) == 0
            scale_writes = [
                r for r in apiserver.requests if r.method == "PATCH" and r.path.endswith("/scale")
            ]
            assert len(scale_writes) == 3  # KEDA's and its HPA's; the controller never wrote


async def test_tls_with_a_client_ca_asks_keda_for_its_certificate(tmp_path) -> None:
    pki = make_pki(tmp_path)
    port = free_port()
    credentials = tls_credentials(str(pki.server_cert), str(pki.server_key), str(pki.proxy_ca))
    server = await serve(em.SnapshotFeed(), "127.0.0.1", port, credentials)

    def channel(with_cert: bool) -> grpc.aio.Channel:
        creds = grpc.ssl_channel_credentials(
            root_certificates=pki.serving_ca.read_bytes(),
            private_key=pki.proxy_key.read_bytes() if with_cert else None,
            certificate_chain=pki.proxy_cert.read_bytes() if with_cert else None,
        )
        return grpc.aio.secure_channel(f"127.0.0.1:{port}", creds)

    try:
        async with channel(True) as ok:
            spec = await pb_grpc.ExternalScalerStub(ok).GetMetricSpec(ref(), timeout=10)
            assert spec.metricSpecs[0].targetSizeFloat == 10.0
        async with channel(False) as anonymous:
            call = pb_grpc.ExternalScalerStub(anonymous).GetMetricSpec(ref(), timeout=10)
            assert await status_of(call) == grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop(grace=None)


def _certificate(pki) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pki.server_cert.read_bytes())


def _renew(pki, renewed) -> None:
    swap_in(((renewed.server_key, pki.server_key), (renewed.server_cert, pki.server_cert)))


async def _serves_in_the_end(port: int, pki) -> bool:
    for _ in range(50):  # looked at again once a second at most
        if await asyncio.to_thread(served_certificate, port) == _certificate(pki):
            return True
        await asyncio.sleep(0.1)
    return False


async def test_a_renewed_certificate_is_served_without_a_restart(tmp_path) -> None:
    """The scaler read its certificate once: a Secret renewed by cert-manager was served
    only after a restart, and KEDA's every call failed once the old one expired."""
    pki, renewed = make_pki(tmp_path / "first"), make_pki(tmp_path / "renewed")
    port = free_port()
    credentials = tls_credentials(str(pki.server_cert), str(pki.server_key), "")
    server = await serve(em.SnapshotFeed(), "127.0.0.1", port, credentials)
    try:
        assert await asyncio.to_thread(served_certificate, port) == _certificate(pki)
        _renew(pki, renewed)
        assert await _serves_in_the_end(port, renewed)
    finally:
        await server.stop(grace=None)


async def test_a_certificate_renewed_during_startup_is_served(tmp_path, monkeypatch) -> None:
    """The files were first loaded, then looked at: a Secret swapped in between was taken
    for the one served, and the old certificate stayed until the next renewal."""
    pki, renewed = make_pki(tmp_path / "first"), make_pki(tmp_path / "renewed")
    load_cert_chain = ssl.SSLContext.load_cert_chain

    def loaded_then_renewed(context, *args, **kwargs) -> None:
        load_cert_chain(context, *args, **kwargs)
        _renew(pki, renewed)  # just after the first load read the files
        monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", load_cert_chain)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", loaded_then_renewed)
    port = free_port()
    credentials = tls_credentials(str(pki.server_cert), str(pki.server_key), "")
    server = await serve(em.SnapshotFeed(), "127.0.0.1", port, credentials)
    try:
        assert await _serves_in_the_end(port, renewed)
    finally:
        await server.stop(grace=None)


def test_an_unreadable_tls_file_is_named(tmp_path) -> None:
    pki = make_pki(tmp_path)
    with pytest.raises(ValueError, match=r"cannot read /nonexistent/tls\.crt: No such file"):
        tls_credentials("/nonexistent/tls.crt", str(pki.server_key), "")


def test_a_tls_file_that_is_not_pem_is_named(tmp_path) -> None:
    """gRPC would only log its own lines and then fail to bind: checked first, by name."""
    pki = make_pki(tmp_path)
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"\x00\x85 not a certificate")
    with pytest.raises(ValueError, match=f"cannot load {garbage} / {pki.server_key}: "):
        tls_credentials(str(garbage), str(pki.server_key), "")
    with pytest.raises(ValueError, match=f"cannot load {garbage}: "):
        tls_credentials(str(pki.server_cert), str(pki.server_key), str(garbage))


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
async def test_an_ipv6_host_is_served_on_it() -> None:
    """`--keda-scaler-address [::1]:PORT`: gRPC read "::1:PORT" as a host with its default
    port 443 and failed to bind."""
    port = free_port()
    server = await serve(em.SnapshotFeed(), "::1", port)
    try:
        async with grpc.aio.insecure_channel(f"[::1]:{port}") as channel:
            spec = await pb_grpc.ExternalScalerStub(channel).GetMetricSpec(ref(), timeout=10)
            assert spec.metricSpecs[0].targetSizeFloat == 10.0
    finally:
        await server.stop(grace=None)


async def test_a_taken_port_is_one_line_and_nothing_from_grpc(capfd) -> None:
    """gRPC's failure to bind also printed its C core's own E-line on stderr, and its
    message pointed at GRPC_VERBOSITY."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError) as caught:
            await serve(em.SnapshotFeed(), "127.0.0.1", port)
    assert str(caught.value) == f"cannot listen on 127.0.0.1:{port}: Address already in use"
    assert capfd.readouterr().err == ""
