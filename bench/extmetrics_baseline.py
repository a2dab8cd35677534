"""The prometheus-adapter way of serving external metrics, for `extmetrics_bench`'s baseline.

The same HTTPS server, authentication and cached SubjectAccessReviews as gpufleet's
(`gpufleet.autoscaler.extmetrics.server`), but each request is answered as
prometheus-adapter's `externalRules` answer it: one PromQL instant query,
`sum(<series>{namespace="<ns>",<selector as matchers>}) by (autoscaler)`, against
Prometheus. With PROM_URL `floor` it answers a fixed value instead: the same server with
nothing behind it, the floor this machine puts under both. Prints "ready" once serving,
then serves until stdin closes.

    python -m bench.extmetrics_baseline KUBE_URL PROM_URL|floor PORT CERT KEY
"""

import asyncio
import sys
import threading

import aiohttp
from kubernetes import client

from gpufleet.autoscaler.core.extmetrics import Matched, Sample
from gpufleet.autoscaler.extmetrics.server import (
    Authorizer,
    AuthSource,
    make_app,
    serve,
    tls_context,
)
from gpufleet.core.selectors import Requirement

# The externalRules a user would write for the metric the benchmark reads.
SERIES = {"gpufleet_queue_depth": "vllm:num_requests_waiting"}


def promql(namespace: str, metric: str, selector: tuple[Requirement, ...]) -> str:
    matchers = [f'namespace="{namespace}"']
    for r in selector:
        if r.op != "=":
            raise ValueError(f"the baseline takes equality selectors only, not {r.op}")
        (value,) = r.values
        matchers.append(f'{r.key}="{value}"')
    return f"sum({SERIES[metric]}{{{','.join(matchers)}}}) by (autoscaler)"


async def main(kube_url: str, prom_url: str, port: int, cert: str, key: str) -> None:
    config = client.Configuration()
    config.host = kube_url
    api = client.ApiClient(config)
    auth = AuthSource(api)
    session = aiohttp.ClientSession()

    async def floor(namespace: str, metric: str, selector: tuple[Requirement, ...]) -> Matched:
        return [({"autoscaler": "floor"}, Sample(0.0, 1.0))]

    async def lookup(namespace: str, metric: str, selector: tuple[Requirement, ...]) -> Matched:
        params = {"query": promql(namespace, metric, selector)}
        async with session.get(f"{prom_url}/api/v1/query", params=params) as response:
            body = await response.json()
        return [
            (r["metric"], Sample(float(r["value"][0]), float(r["value"][1])))
            for r in body["data"]["result"]
        ]

    app = make_app(
        floor if prom_url == "floor" else lookup, auth, Authorizer(api), window_seconds=None
    )
    runner = await serve(app, "127.0.0.1", port, tls_context(cert, key, auth))
    print("ready", flush=True)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    threading.Thread(
        target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(done.set)), daemon=True
    ).start()
    await done.wait()
    await runner.cleanup()
    await session.close()
    api.close()


if __name__ == "__main__":
    kube, prom, port_text, cert_file, key_file = sys.argv[1:6]
    asyncio.run(main(kube, prom, int(port_text), cert_file, key_file))
