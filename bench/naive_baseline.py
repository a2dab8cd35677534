"""The benchmark's baseline: an exporter built the way dcgm-exporter works, alone in its process.

Everything happens inside the scrape, as in dcgm-exporter's HTTP handler: read every field of
every GPU and MIG entity from NVML, open a NEW gRPC channel to the kubelet's pod-resources
socket and call `List`, map device IDs to pods, clear and set one prometheus-client `Gauge`
per field, render the registry, gzip it when the client accepts gzip (what
prometheus-client's `make_wsgi_app` does). Nothing is cached between scrapes but the NVML
topology (dcgm-exporter also discovers devices once, at start).

To keep the comparison about architecture, not about output or NVML call counts, it reads
NVML with the same `NvmlReader` as gpufleet (the same calls for the same CSV fields, without
the per-process queries dcgm-exporter does not make) and emits the same series: one per
(entity, pod holding it), with that entity's value. XID errors come from NVML events, which
a per-scrape exporter cannot wait for, so DCGM_FI_DEV_XID_ERRORS is 0. Scrapes run one at a
time on the event loop, as a GIL-bound process would run them anyway.

Protocol with the parent: one JSON line `{"port": N}` on stdout once listening, then serving
until SIGTERM or SIGINT. Nothing else is written to stdout. Not a product: benchmark only.
"""

import argparse
import asyncio
import gzip
import json
import socket
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import grpc
from aiohttp import hdrs, web
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.exposition import choose_encoder, gzip_accepted

from gpufleet.exporter.core.samples import EntitySample
from gpufleet.exporter.core.selection import FLEX, select_entities
from gpufleet.exporter.daemon import install_signal_handlers, load_selection
from gpufleet.exporter.nvml.reader import NvmlReader
from gpufleet.exporter.settings import EMBEDDED_COLLECTORS
from gpufleet.kubelet.api import podresources_v1_pb2 as pb
from gpufleet.kubelet.api import podresources_v1_pb2_grpc as pb_grpc
from gpufleet.lab.node import NodeLayout, SimNode
from gpufleet.logs import setup_logging

XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
ENTITY_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID")
POD_LABELS = ("container", "namespace", "pod")
_NO_POD = ("", "", "")
_LIST_TIMEOUT_SECONDS = 10.0


def list_pods(socket_path: Path) -> dict[str, list[tuple[str, str, str]]]:
    """Device UUID (GPU-... or MIG-...) -> (container, namespace, pod) of each holder.

    A new channel per call, as dcgm-exporter's pod mapper does on every scrape. Replica IDs
    (`<uuid>::<n>`) map to their device's UUID.
    """
    holders: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    with grpc.insecure_channel(
        f"unix://{socket_path.absolute()}", options=[("grpc.enable_http_proxy", 0)]
    ) as channel:
        response = pb_grpc.PodResourcesListerStub(channel).List(
            pb.ListPodResourcesRequest(), timeout=_LIST_TIMEOUT_SECONDS
        )
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if not devices.resource_name.startswith("nvidia.com/"):
                    continue
                for device_id in devices.device_ids:
                    uuid = device_id.split("::", 1)[0]
                    holders[uuid].append((container.name, pod.namespace, pod.name))
    return holders


class NaiveExporter:
    """Collects, attributes and renders on every `scrape` call."""

    def __init__(self, lib: object, *, socket_path: Path, hostname: str) -> None:
        selection = load_selection(EMBEDDED_COLLECTORS)
        self._reader = NvmlReader(lib, (f.spec for f in selection.fields))
        self._reader.discover()
        self._socket_path = socket_path
        self._hostname = hostname
        self._label_rows = sorted(f.spec.name for f in selection.labels)
        self._registry = CollectorRegistry()
        label_names = (*ENTITY_LABELS, "Hostname", *self._label_rows, *POD_LABELS)
        self._gauges = {
            f.spec.name: Gauge(f.spec.name, f.help, label_names, registry=self._registry)
            for f in selection.metrics
        }

    def scrape(self, accept: str, accept_encoding: str) -> tuple[bytes, dict[str, str]]:
        """Read NVML and the kubelet, set the gauges, render; returns body and headers."""
        samples, _ = self._reader.collect(time.monotonic(), processes_of=())
        holders = list_pods(self._socket_path)
        node_labels = self._reader.node_labels
        for gauge in self._gauges.values():
            gauge.clear()
        for sample in select_entities(samples, FLEX):
            entity = self._entity_labels(sample, node_labels)
            key = sample.entity.mig.uuid if sample.entity.mig else sample.entity.uuid
            pods = holders.get(key) or [_NO_POD]
            for name, gauge in self._gauges.items():
                value = 0.0 if name == XID_FIELD else sample.values.get(name)
                if value is None:
                    continue
                for pod in pods:
                    gauge.labels(*entity, *pod).set(value)
        encoder, content_type = choose_encoder(accept)
        body = encoder(self._registry)
        headers = {hdrs.CONTENT_TYPE: content_type}
        if gzip_accepted(accept_encoding):
            body = gzip.compress(body)
            headers[hdrs.CONTENT_ENCODING] = "gzip"
        return body, headers

    def _entity_labels(self, sample: EntitySample, node_labels: Mapping[str, str]) -> list[str]:
        entity, mig = sample.entity, sample.entity.mig
        values = [
            str(entity.gpu),
            entity.uuid,
            entity.pci_bus_id,
            f"nvidia{entity.gpu}",
            entity.model_name,
            mig.profile if mig else "",
            str(mig.gi_id) if mig else "",
            self._hostname,
        ]
        for name in self._label_rows:
            values.append(sample.labels.get(name) or node_labels.get(name, ""))
        return values


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubelet-socket", type=Path, required=True)
    parser.add_argument("--node-name", default="bench-node")
    return parser


async def _serve(exporter: NaiveExporter) -> None:
    async def metrics(request: web.Request) -> web.Response:
        body, headers = exporter.scrape(
            request.headers.get(hdrs.ACCEPT, ""), request.headers.get(hdrs.ACCEPT_ENCODING, "")
        )
        return web.Response(body=body, headers=headers)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    stop = asyncio.Event()
    install_signal_handlers(stop)
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


async def _run(args: argparse.Namespace) -> None:
    with SimNode(NodeLayout(), with_kubelet=False) as node:
        node.sim.nvmlInit()
        try:
            hostname = args.node_name
            await _serve(
                NaiveExporter(node.sim, socket_path=args.kubelet_socket, hostname=hostname)
            )
        finally:
            node.sim.nvmlShutdown()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    setup_logging(debug=False, json_format=False)
    asyncio.run(_run(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
