"""The benchmark's scrape client: closed-loop concurrent scrapes and paced scrapes over HTTP.

An aiohttp client session with one keep-alive connection per concurrent client, sending the
headers Prometheus sends. Latency is client-side, `time.perf_counter` from sending the
request to having read the whole body; bodies are not decompressed (Prometheus' own
decompression is not the exporter's cost). It must only ever talk to loopback addresses.
"""

import asyncio
import math
import time
from dataclasses import dataclass

import aiohttp

# Prometheus 2.x's default scrape Accept header (OpenMetrics preferred), with gzip.
PROMETHEUS_HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,"
    "application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}
TEXT_HEADERS = {"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "identity"}
_TIMEOUT = aiohttp.ClientTimeout(total=60)


class ScrapeError(Exception):
    """A scrape answered with something other than 200."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadResult:
    """What the client saw during one load phase."""

    scrapes: int
    concurrency: int
    wall_seconds: float
    latencies_seconds: tuple[float, ...]  # sorted

    def percentile(self, q: float) -> float:
        """Nearest-rank percentile, q in [0, 100], in seconds."""
        latencies = self.latencies_seconds
        return latencies[min(len(latencies) - 1, max(0, math.ceil(q / 100 * len(latencies)) - 1))]


def _session(concurrency: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency),
        auto_decompress=False,
        timeout=_TIMEOUT,
    )


async def _get(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> bytes:
    async with session.get(url, headers=headers) as response:
        body = await response.read()
        if response.status != 200:
            raise ScrapeError(f"GET {url}: HTTP {response.status}: {body[:200]!r}")
        return body


async def fetch(url: str, headers: dict[str, str] = TEXT_HEADERS) -> bytes:
    """One scrape on a fresh connection; raises ScrapeError unless 200."""
    async with _session(1) as session:
        return await _get(session, url, headers)


class Clients:
    """`concurrency` clients, each sending its next scrape as soon as the last is read.

    Entering opens every connection (one untimed scrape each, `warmup_scrapes`), so `run`
    times steady keep-alive scraping only.
    """

    def __init__(
        self, url: str, *, concurrency: int, headers: dict[str, str] = PROMETHEUS_HEADERS
    ) -> None:
        self._url = url
        self._headers = headers
        self.concurrency = concurrency
        self.warmup_scrapes = concurrency
        self._session = _session(concurrency)

    async def __aenter__(self) -> "Clients":
        await self._session.__aenter__()
        try:
            await asyncio.gather(*(self._get() for _ in range(self.concurrency)))
        except BaseException:
            await self._session.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._session.__aexit__(None, None, None)

    async def _get(self) -> bytes:
        return await _get(self._session, self._url, self._headers)

    async def run(self, scrapes: int) -> LoadResult:
        """`scrapes` scrapes in all, shared by the clients."""
        remaining = scrapes
        latencies: list[float] = []

        async def client() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                start = time.perf_counter()
                await self._get()
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(self.concurrency)))
        wall = time.perf_counter() - start
        return LoadResult(
            scrapes=scrapes,
            concurrency=self.concurrency,
            wall_seconds=wall,
            latencies_seconds=tuple(sorted(latencies)),
        )


async def paced(
    url: str,
    *,
    seconds: float,
    per_second: float = 1.0,
    headers: dict[str, str] = PROMETHEUS_HEADERS,
) -> int:
    """Scrape at a steady `per_second` rate for `seconds`, like one Prometheus; returns the
    number of scrapes."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    count = int(seconds * per_second)
    async with _session(1) as session:
        for n in range(count):
            await asyncio.sleep(max(0.0, start + n / per_second - loop.time()))
            await _get(session, url, headers)
        await asyncio.sleep(max(0.0, start + seconds - loop.time()))
    return count
