"""The real exporter in a thread and real Prometheus in a process, for end-to-end tests.

The exporter runs the production `serve()` in a thread with its own event loop, on a real
loopback port, against the simulated NVML and the fake kubelet's real unix socket.
"""

import asyncio
import contextlib
import http.server
import json
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from gpufleet.exporter.daemon import prepare, serve
from gpufleet.exporter.settings import ExporterSettings
from gpufleet.lab.node import NodeLayout, SimNode
from helpers import free_port, wait_for
from helpers.tools import require


class RunningExporter:
    """The real exporter (`serve`) in a background thread."""

    def __init__(self, settings: ExporterSettings, lib: object) -> None:
        self.prepared = prepare(settings)
        self.lib = lib
        self.port: int | None = None
        self._listening = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self.quiescent: bool | None = None  # serve's answer: may NVML be shut down?
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self._stop = asyncio.Event()
            self.quiescent = await serve(
                self.prepared, self.lib, stop=self._stop, on_listening=self._on_port
            )

        try:
            self._loop.run_until_complete(main())
        except BaseException as exc:  # surfaced by start()/stop()
            self._error = exc
            self._listening.set()

    def _on_port(self, port: int) -> None:
        self.port = port
        self._listening.set()

    def start(self) -> "RunningExporter":
        self._thread.start()
        self._listening.wait(10)
        if self._error or self.port is None:
            raise RuntimeError(f"exporter did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        if self._loop.is_closed():  # stopped already (a test that stops it itself)
            return
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(15)
        assert not self._thread.is_alive(), "exporter did not shut down"
        self._loop.close()
        if self._error:
            raise self._error

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str = "/metrics", headers: dict | None = None) -> tuple[int, bytes]:
        request = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def metrics(self) -> str:
        status, body = self.get()
        return body.decode() if status == 200 else ""


# Small enough to keep tests quick, with every kind of allocation: 2 whole GPUs, 2
# time-sliced 4 ways, one GPU split into 7 MIG slices.
SMALL_NODE = NodeLayout(fleet="4xH100+1xH100:mig=7x1g.10gb", whole_gpus=2, replicas=4)


def node_settings(node: SimNode, **overrides) -> ExporterSettings:
    """Fast settings for tests: 100 ms collections, 0.2 s kubelet refresh."""
    fast = dict(
        address="127.0.0.1:0",
        collect_interval_ms=100,
        kubernetes_virtual_gpus=True,
        kubelet_refresh_seconds=0.2,
        node_name="node-a",
    )
    return node.exporter_settings(**{**fast, **overrides})


def start_exporter(node: SimNode, **overrides) -> RunningExporter:
    """The real exporter on `node` (fast settings and `overrides`), once it serves its first
    collection; the caller stops it."""
    exporter = RunningExporter(node_settings(node, **overrides), node.sim).start()
    wait_for(lambda: exporter.get("/health")[0] == 200, what="first collection")
    return exporter


@contextlib.contextmanager
def scraped_node(
    root: Path, layout: NodeLayout, **overrides
) -> Iterator[tuple[SimNode, RunningExporter, "Prometheus"]]:
    """A simulated node of `layout`, the exporter on it (fast settings and `overrides`) and
    Prometheus scraping it: for a module's tests that only read, so they start them once
    (Prometheus takes seconds)."""
    require("prometheus")
    with SimNode(layout, root=root / "n") as node:
        node.sim.nvmlInit()
        exporter = start_exporter(node, **overrides)
        try:
            prometheus = Prometheus(root / "prom", f"127.0.0.1:{exporter.port}")
            try:
                yield node, exporter, prometheus
            finally:
                prometheus.stop()
        finally:
            exporter.stop()


class Prometheus:
    """A real Prometheus server on loopback, scraping one target every second."""

    def __init__(
        self,
        workdir: Path,
        target: str = "",
        *,
        labels: dict[str, str] | None = None,
        file_sd: Path | None = None,
        port: int | None = None,
        rule_files: tuple[Path, ...] = (),
        alertmanager: str | None = None,
        scrape: dict | None = None,
    ) -> None:
        """Scrape `target` every second, its series labelled with `labels` (as Kubernetes
        service discovery would add namespace and pod), or the targets a file_sd file lists,
        with the `scrape` config's other keys (honor_labels, relabel_configs); evaluate
        `rule_files` every second and send alerts to `alertmanager` (host:port)."""
        self.port = port or free_port()  # the same port again: a restart
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "prometheus.yml"
        if file_sd is not None:
            targets = f"  file_sd_configs: [{{files: ['{file_sd}'], refresh_interval: 1s}}]\n"
        else:
            static = json.dumps([{"targets": [target], "labels": labels or {}}])
            targets = f"  static_configs: {static}\n"
        rules = json.dumps([str(path) for path in rule_files])
        alerting = ""
        if alertmanager:
            managers = json.dumps([{"static_configs": [{"targets": [alertmanager]}]}])
            alerting = f"alerting: {{alertmanagers: {managers}}}\n"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"rule_files: {rules}\n" + alerting + "scrape_configs:\n"
            "- job_name: gpu\n"
            + targets
            + "".join(f"  {key}: {json.dumps(value)}\n" for key, value in (scrape or {}).items())
        )
        self._proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                # An alert that fired before Alertmanager answered is resent within 1 s,
                # not the default minute.
                "--rules.alert.resend-delay=1s",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def query(self, expr: str, at: str | None = None) -> list[dict]:
        """An instant query, now or `at` (a Unix time as Prometheus writes it)."""
        data = self._get("query", {"query": expr} | ({"time": at} if at else {}))
        return data["result"] if data else []

    def pinned(self) -> "PinnedPrometheus":
        """This server read at its last scrape from now on (see PinnedPrometheus)."""
        (last,) = self.query("max(timestamp(up))")
        return PinnedPrometheus(self, last["value"][1])

    def metadata(self, metric: str) -> list[dict]:
        """/api/v1/metadata for one metric name: the type and help Prometheus stored."""
        return (self._get("metadata", {"metric": metric}) or {}).get(metric, [])

    def _get(self, endpoint: str, params: dict[str, str]):
        url = f"http://127.0.0.1:{self.port}/api/v1/{endpoint}?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = json.load(response)
        except OSError:
            return None
        assert body["status"] == "success", body
        return body["data"]

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(10)


class PinnedPrometheus:
    """Queries at one instant, a scrape's own timestamp: answers compared with each other
    then come from the same samples, where a scrape a second lands between two live
    queries and moves every gauge."""

    def __init__(self, prom: Prometheus, at: str) -> None:
        self._prom, self._at = prom, at

    def query(self, expr: str) -> list[dict]:
        return self._prom.query(expr, self._at)


class Alertmanager:
    """A real Alertmanager on loopback that posts every alert to a webhook receiver here."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.received: list[dict] = []  # the alerts of every webhook notification
        self._webhook = _Webhook(self.received)
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "alertmanager.yml"
        config.write_text(
            "route: {receiver: hook, group_by: [alertname], group_wait: 1s, group_interval: 1s}\n"
            "receivers:\n"
            f"- name: hook\n  webhook_configs: [{{url: 'http://127.0.0.1:{self._webhook.port}/'}}]\n"
        )
        self._proc = subprocess.Popen(
            [
                "prometheus-alertmanager",
                f"--config.file={config}",
                f"--storage.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",  # no gossip port
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def names(self, status: str = "firing") -> set[str]:
        """Alert names the webhook has received with `status`."""
        return {a["labels"]["alertname"] for a in list(self.received) if a["status"] == status}

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(10)
        self._webhook.stop()


class _Webhook:
    """An HTTP receiver for Alertmanager's webhook notifications."""

    def __init__(self, received: list[dict]) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.extend(json.loads(body)["alerts"])
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
