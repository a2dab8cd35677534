"""KEDA's `externalscaler.ExternalScaler` served with grpc.aio.

Every call reads the trigger's `scalerMetadata` (`core.scaler_metadata`) and the newest
snapshot the controller published, so KEDA and an HPA on the external metrics API see the
same numbers. `StreamIsActive` answers at once and then again whenever a published
snapshot flips the activity (the tick that sees the first queued request pushes KEDA's
0 -> 1), and pushes `true` again on each snapshot while the target stays at zero: KEDA
drops an activation it cannot act on yet (its ScaledObject's metric names not in its
status, a failed scale) and tries again only on the next push. `StreamMetricSpec` sends
the spec when it opens, and the spec never changes for a given trigger, so GetMetricSpec
always agrees with it.

Errors are gRPC statuses KEDA counts as scaler errors (it then keeps the count, or applies
the ScaledObject's fallback): INVALID_ARGUMENT for bad metadata, NOT_FOUND for a
GPUAutoscaler the controller does not run, UNAVAILABLE while the metric has no sample.
A stream waits through NOT_FOUND and UNAVAILABLE instead: it has nothing to push yet.
"""

import asyncio
import errno
import logging
import ssl
from collections.abc import AsyncIterator

import grpc

from gpufleet.autoscaler.core.extmetrics import Sample, SnapshotFeed, WorkloadMetrics
from gpufleet.autoscaler.core.scaler_metadata import MetadataError, ScalerTrigger, parse_metadata
from gpufleet.autoscaler.kedascaler.api import externalscaler_pb2 as pb
from gpufleet.autoscaler.kedascaler.api import externalscaler_pb2_grpc as pb_grpc
from gpufleet.http.tls_reload import Reloading
from gpufleet.ports import check_bindable

log = logging.getLogger(__name__)


class _Unanswerable(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class ExternalScaler(pb_grpc.ExternalScalerServicer):
    def __init__(self, feed: SnapshotFeed) -> None:
        self._feed = feed

    async def IsActive(self, request: pb.ScaledObjectRef, context) -> pb.IsActiveResponse:
        trigger = await _trigger(request, context)
        try:
            _, sample = self._sample(request.namespace, trigger)
        except _Unanswerable as err:
            await context.abort(err.code, str(err))
        return pb.IsActiveResponse(result=sample.value > trigger.activation)

    async def StreamIsActive(
        self, request: pb.ScaledObjectRef, context
    ) -> AsyncIterator[pb.IsActiveResponse]:
        trigger = await _trigger(request, context)
        published, loop = asyncio.Event(), asyncio.get_running_loop()
        # The controller publishes on its own thread's loop.
        leave = self._feed.subscribe(lambda: loop.call_soon_threadsafe(published.set))
        sent: bool | None = None
        try:
            while True:
                try:
                    workload, sample = self._sample(request.namespace, trigger)
                except _Unanswerable:
                    active = None  # nothing known yet: push nothing, never a guess
                else:
                    active = sample.value > trigger.activation
                    if active and workload.replicas == 0:
                        sent = None  # still at zero: the activation may have been dropped
                if active is not None and active != sent:
                    sent = active
                    yield pb.IsActiveResponse(result=active)
                await published.wait()
                published.clear()
        finally:
            leave()

    async def GetMetricSpec(self, request: pb.ScaledObjectRef, context) -> pb.GetMetricSpecResponse:
        return _spec(await _trigger(request, context))

    async def StreamMetricSpec(
        self, request: pb.ScaledObjectRef, context
    ) -> AsyncIterator[pb.GetMetricSpecResponse]:
        yield _spec(await _trigger(request, context))
        await asyncio.Event().wait()  # held open until KEDA closes it: nothing ever changes

    async def GetMetrics(self, request: pb.GetMetricsRequest, context) -> pb.GetMetricsResponse:
        ref = request.scaledObjectRef
        trigger = await _trigger(ref, context)
        if request.metricName and request.metricName != trigger.metric:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"metricName {request.metricName!r}: this trigger serves {trigger.metric}",
            )
        try:
            _, sample = self._sample(ref.namespace, trigger)
        except _Unanswerable as err:
            await context.abort(err.code, str(err))
        value = sample.value
        # Both fields: KEDA reads the float only when it is > 0, else the int.
        metric = pb.MetricValue(
            metricName=trigger.metric, metricValue=_int64(value), metricValueFloat=value
        )
        return pb.GetMetricsResponse(metricValues=[metric])

    def _sample(self, namespace: str, trigger: ScalerTrigger) -> tuple[WorkloadMetrics, Sample]:
        workload = self._feed.latest.get(namespace, trigger.autoscaler)
        if workload is None:
            raise _Unanswerable(
                grpc.StatusCode.NOT_FOUND,
                f"GPUAutoscaler {namespace}/{trigger.autoscaler} is not (yet) run by gpufleet",
            )
        sample = workload.values.get(trigger.metric)
        if sample is None:
            raise _Unanswerable(
                grpc.StatusCode.UNAVAILABLE,
                f"{trigger.metric} of {namespace}/{trigger.autoscaler} has no sample",
            )
        return workload, sample


async def _trigger(ref: pb.ScaledObjectRef, context) -> ScalerTrigger:
    """The trigger's metadata; bad metadata ends the call (`abort` raises)."""
    try:
        return parse_metadata(ref.scalerMetadata)
    except MetadataError as err:
        problem = str(err)
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)


def _spec(trigger: ScalerTrigger) -> pb.GetMetricSpecResponse:
    spec = pb.MetricSpec(
        metricName=trigger.metric,
        targetSize=max(1, _int64(trigger.target)),
        targetSizeFloat=trigger.target,
    )
    return pb.GetMetricSpecResponse(metricSpecs=[spec])


def _int64(value: float) -> int:
    """`value` rounded into the proto's int64 fields (protobuf refuses any other int)."""
    return min(max(round(value), -(2**63)), 2**63 - 1)


def tls_credentials(cert_file: str, key_file: str, client_ca_file: str) -> grpc.ServerCredentials:
    """Server TLS for KEDA's `enableTLS`; with a client CA, KEDA must present a certificate
    it signed (the trigger's `tlsClientCert`/`tlsClientKey`). The files are read again
    when they change (`tls_reload`: a renewed Secret is served from the next connection).
    Raises ValueError naming the file that cannot be read or is not PEM; they are checked
    with `ssl` first, since gRPC only logs its own lines and then fails to bind."""

    def read(path: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as err:
            raise ValueError(f"cannot read {path}: {err.strerror or err}") from None

    def load() -> grpc.ServerCertificateConfiguration:
        key, cert = read(key_file), read(cert_file)
        client_ca = read(client_ca_file) if client_ca_file else None
        check = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            # no password: an encrypted key fails here instead of OpenSSL prompting on a TTY
            check.load_cert_chain(cert_file, key_file, password=lambda: b"")
        except (OSError, ssl.SSLError) as err:
            raise ValueError(f"cannot load {cert_file} / {key_file}: {err}") from None
        if client_ca is not None:
            try:
                check.load_verify_locations(cafile=client_ca_file)
            except (OSError, ssl.SSLError) as err:
                raise ValueError(f"cannot load {client_ca_file}: {err}") from None
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=client_ca)

    files = [f for f in (cert_file, key_file, client_ca_file) if f]
    reloading = Reloading(load, files)
    # gRPC asks on each new connection: a new configuration, or None for no change
    return grpc.dynamic_ssl_server_credentials(
        reloading.current, reloading.refresh, require_client_authentication=bool(client_ca_file)
    )


async def serve(
    feed: SnapshotFeed,
    host: str | None,
    port: int,
    credentials: grpc.ServerCredentials | None = None,
) -> grpc.aio.Server:
    """Start serving on host:port (every interface when host is None or empty), over TLS
    with `credentials`, else plaintext; raises OSError when the address cannot be bound."""
    # gRPC reads "::1:9443" as a host with no port (443): an IPv6 host needs its brackets.
    address = f"[{host or '::'}]:{port}" if not host or ":" in host else f"{host}:{port}"
    _check_bindable(host, port, address)
    server = grpc.aio.server()
    pb_grpc.add_ExternalScalerServicer_to_server(ExternalScaler(feed), server)
    try:
        bound = (
            server.add_secure_port(address, credentials)
            if credentials is not None
            else server.add_insecure_port(address)
        )
    except RuntimeError as err:  # grpc says "Failed to bind"
        raise OSError(f"cannot listen on {address}: {err}") from None
    if not bound:
        raise OSError(f"cannot listen on {address}")
    await server.start()
    log.info(
        "serving KEDA's externalscaler.ExternalScaler on %s (%s)",
        address,
        "TLS" if credentials is not None else "plaintext",
    )
    return server


def _check_bindable(host: str | None, port: int, address: str) -> None:
    """Raise OSError if the address is taken or not this host's. gRPC's own failure says
    less and prints a line of its C core's to stderr besides; an error the check cannot
    judge (no IPv6 here, a name that does not resolve) is left to gRPC."""
    try:
        check_bindable(host, port)
    except OSError as err:
        if err.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
            raise OSError(f"cannot listen on {address}: {err.strerror}") from None
