"""External metrics latency: gpufleet's cached answers against one PromQL query per request.

For each size N, in processes of their own: the lab's fake API server with N served
workloads and their GPUAutoscalers (`controller_world`), a real Prometheus scraping
N pods' `vllm:num_requests_waiting`, the real `gpufleet autoscaler` daemon ticking every
second with `--external-metrics-address`, and the prometheus-adapter-style baseline
(`extmetrics_baseline`: the same HTTPS server and auth, one instant query per request
against the same Prometheus), and the floor (that server answering a constant). This
process plays the aggregator: HTTPS with the proxy client certificate, the HPA
controller's user in X-Remote-* headers, keep-alive, one request at a time, in turn to
each server on the same random workloads, and checks gpufleet and the baseline answer
the same value. Latency is request sent -> body read.

    python3 -m bench.extmetrics_bench [--workloads 1,100,1000] [--requests 2000] [--json out.json]
"""

import argparse
import asyncio
import json
import random
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import aiohttp
from kubernetes import client

from bench.controller_world import NS
from bench.entry import exit_with
from gpufleet.lab.prometheus import Child, start_prometheus
from tests.helpers import free_port
from tests.helpers.aggregator import (
    HPA_GROUP,
    HPA_USER,
    grant_hpa_external_metrics,
    make_pki,
    publish_authentication,
)

METRIC = "gpufleet_queue_depth"


def serve_pods(n: int) -> ThreadingHTTPServer:
    """N pods' queue gauges on one target, labelled as Kubernetes discovery would."""
    body = "# TYPE vllm:num_requests_waiting gauge\n" + "".join(
        f'vllm:num_requests_waiting{{namespace="{NS}",pod="w{i}-0",autoscaler="w{i}"}} {i % 17}\n'
        for i in range(n)
    )
    data = body.encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(n: int, requests: int, work: Path) -> dict:
    world = subprocess.Popen(
        [sys.executable, "-m", "bench.controller_world", str(n)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    procs: list[subprocess.Popen] = [world]
    prometheus: Child | None = None
    pods = serve_pods(n)
    try:
        kube = json.loads(world.stdout.readline())["kube"]
        pki = make_pki(work / "pki")
        config = client.Configuration()
        config.host = kube
        with client.ApiClient(config) as api:
            publish_authentication(api, pki)
            grant_hpa_external_metrics(api)
        target = work / "pods.json"
        target.write_text(json.dumps([{"targets": [f"127.0.0.1:{pods.server_address[1]}"]}]))
        prometheus = start_prometheus(
            work,
            host="127.0.0.1",
            port=free_port(),
            targets_dir=work,
            rule_files=[],
            scrape_seconds=1.0,
        )
        prom = prometheus.url
        ours, theirs = free_port(), free_port()
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    *("-m", "gpufleet.cli", "autoscaler", "--kube-url", kube),
                    *("--prometheus-url", prom, "--leader-elect=false", "--metrics-address", ""),
                    *("--tick-seconds", "1", "--scrape-interval-seconds", "1"),
                    *("--rate-window", "5s", "--external-metrics-address", f"127.0.0.1:{ours}"),
                    *("--external-metrics-tls-cert-file", str(pki.server_cert)),
                    *("--external-metrics-tls-key-file", str(pki.server_key)),
                ],
                stdout=subprocess.DEVNULL,
            )
        )
        floor = free_port()
        for source, port in ((prom, theirs), ("floor", floor)):
            baseline = subprocess.Popen(
                [
                    sys.executable,
                    *("-m", "bench.extmetrics_baseline", kube, source, str(port)),
                    *(str(pki.server_cert), str(pki.server_key)),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            procs.append(baseline)
            assert baseline.stdout.readline().strip() == "ready"

        tls = ssl.create_default_context(cafile=pki.serving_ca)
        tls.load_cert_chain(pki.proxy_cert, pki.proxy_key)
        headers = {"X-Remote-User": HPA_USER, "X-Remote-Group": HPA_GROUP}
        base = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}/{METRIC}"
        urls = {
            "gpufleet": f"https://127.0.0.1:{ours}{base}",
            "baseline": f"https://127.0.0.1:{theirs}{base}",
            "floor": f"https://127.0.0.1:{floor}{base}",
        }
        connector = aiohttp.TCPConnector(ssl=tls, limit_per_host=1)
        async with aiohttp.ClientSession(connector=connector, headers=headers) as session:

            async def get(which: str, i: int) -> tuple[float, str | None]:
                started = time.perf_counter()
                async with session.get(
                    urls[which], params={"labelSelector": f"autoscaler=w{i}"}
                ) as r:
                    body = await r.json() if r.status == 200 else None
                elapsed = time.perf_counter() - started
                items = (body or {}).get("items") or []
                return elapsed, items[0]["value"] if items else None

            async def both_answer() -> bool:
                try:
                    values = [await get(w, n - 1) for w in urls]
                except aiohttp.ClientError:
                    return False
                return all(v is not None for _, v in values)

            deadline = time.monotonic() + 180
            while not await both_answer():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no answers from both servers for {n} workloads")
                await asyncio.sleep(1)
            rng = random.Random(n)
            for _ in range(200):  # warm-up: connections, SubjectAccessReview cache
                for which in urls:
                    await get(which, rng.randrange(n))
            latencies: dict[str, list[float]] = {w: [] for w in urls}
            mismatches = 0
            for _ in range(requests):
                i = rng.randrange(n)
                values = []
                for which in urls:
                    elapsed, value = await get(which, i)
                    latencies[which].append(elapsed * 1000)
                    values.append(value)
                mismatches += values[0] != values[1]
        return {
            "workloads": n,
            "requests": requests,
            "mismatched_values": mismatches,
            **{
                f"{w}_{name}": round(percentile(ms, q), 3)
                for w, ms in latencies.items()
                for name, q in (("p50_ms", 0.5), ("p99_ms", 0.99))
            },
        }
    finally:
        for p in reversed(procs):
            if p.stdin:
                p.stdin.close()
            p.terminate()
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        if prometheus is not None:
            prometheus.stop()
        pods.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="1,100,1000")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not shutil.which("prometheus"):
        sys.exit("prometheus is not installed (./dev test installs it)")
    rows = []
    columns = [f"{w} {q}" for w in ("gpufleet", "baseline", "floor") for q in ("p50", "p99")]
    print(f"| workloads | requests | {' | '.join(c + ' ms' for c in columns)} | p50 ratio |")
    print("|---:" * (len(columns) + 3) + "|")
    for n in (int(w) for w in args.workloads.split(",")):
        with tempfile.TemporaryDirectory(prefix="extmetrics-bench-") as tmp:
            row = asyncio.run(measure(n, args.requests, Path(tmp)))
        rows.append(row)
        cells = [row[c.replace(" ", "_") + "_ms"] for c in columns]
        ratio = row["baseline_p50_ms"] / row["gpufleet_p50_ms"]
        print(
            f"| {n:,} | {row['requests']:,} | {' | '.join(map(str, cells))} | {ratio:.1f}x |",
            flush=True,
        )
        if row["mismatched_values"]:
            print(f"  {row['mismatched_values']} answers differed between the two", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    exit_with(main)
