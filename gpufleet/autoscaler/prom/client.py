"""Prometheus' HTTP API (`/api/v1/query_range`, and `time()` for its clock), with aiohttp.

The popular Python client is synchronous and pulls in pandas; the controller needs two
endpoints, a timeout per query and its errors sorted by kind. A query is sent as GET, which
any read-only proxy passes, unless its parameters are too long for a request line: then as
the API's form-encoded POST. Answers are parsed into `RangeSeries` (labels and (time,
value) samples); NaN and infinite samples are dropped, since a policy must see a missing
value as missing, never as a number.
"""

import asyncio
import json
import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Any
from urllib.parse import urlencode

import aiohttp

from gpufleet.autoscaler.core.gather import RangeSeries
from gpufleet.core.messages import cut, shown

# An error's text goes into a log line and every workload's status condition: a 200 KB
# error page became a 200 KB line and condition message.
MAX_ERROR_CHARS = 500
# Parameters longer than this go in a POST body: a 1.1 MB `signals.queries` override got
# HTTP 431 from Prometheus itself as GET, and proxies refuse request lines of 8 KB (nginx,
# Apache) or less. Every preset query is far shorter, so their requests are as before.
MAX_GET_PARAMS_BYTES = 4096
NATIVE_HISTOGRAMS = (
    "the query answers native histogram samples, where a number is read: wrap it in "
    "histogram_quantile(), histogram_sum(), histogram_count() or histogram_fraction()"
)


class PromErrorKind(StrEnum):
    """The `kind` of gpufleet_autoscaler_errors_total, after "prometheus_"."""

    UNAVAILABLE = "unavailable"  # connection refused or reset, 5xx
    TIMEOUT = "timeout"  # no answer within the query timeout
    BAD_QUERY = "bad_query"  # 400/422: the PromQL does not parse or cannot run
    BAD_RESPONSE = "bad_response"  # an answer that is not the API's JSON


class PromError(Exception):
    def __init__(self, kind: PromErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class PromClient:
    """Queries one Prometheus; the caller owns the session's lifetime (`close`)."""

    def __init__(self, url: str, *, timeout_seconds: float = 5.0) -> None:
        self._url = url.rstrip("/")
        self._timeout = timeout_seconds
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def query_range(
        self, query: str, *, start: float, end: float, step: float
    ) -> tuple[RangeSeries, ...]:
        """A matrix query. Raises PromError."""
        params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        data = await self._ask("/api/v1/query_range", params)
        return parse_matrix(data, start=start, end=end)

    async def server_time(self) -> float:
        """Prometheus' own clock: `time()` at its now (an instant query given no time), a
        scalar; or a vector of that one value, as VictoriaMetrics answers every instant
        query (its `time()` is its clock less `-search.latencyOffset`, the time it counts
        complete: the value is taken, not the answer's stamp). Raises PromError."""
        data = await self._ask("/api/v1/query", {"query": "time()"})
        try:
            kind, result = data["resultType"], data["result"]
            if kind == "vector" and len(result) == 1:
                now = float(result[0]["value"][1])
            elif kind == "scalar":
                now = float(result[1])
            else:
                raise TypeError(f"a {kind} result of {len(result)}")
        except (TypeError, ValueError, KeyError, IndexError, OverflowError) as err:
            message = cut(f"time(): not one number: {err}", MAX_ERROR_CHARS)
            raise PromError(PromErrorKind.BAD_RESPONSE, message) from None
        if not math.isfinite(now):
            raise PromError(PromErrorKind.BAD_RESPONSE, f"time(): {now}")
        return now

    async def _ask(self, path: str, params: Mapping[str, str]) -> Any:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        url = f"{self._url}{path}"
        form = urlencode(params)
        try:
            async with asyncio.timeout(self._timeout):
                if len(form) <= MAX_GET_PARAMS_BYTES:
                    request = self._session.get(url, params=params)
                else:
                    request = self._session.post(url, data=form, headers=_FORM)
                async with request as resp:
                    body = await resp.read()
                    status = resp.status
        except TimeoutError:
            raise PromError(
                PromErrorKind.TIMEOUT, f"no answer within {self._timeout:g} s"
            ) from None
        except aiohttp.ClientError as err:
            raise PromError(PromErrorKind.UNAVAILABLE, f"{type(err).__name__}: {err}") from None
        return _payload(status, body)


_FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def _payload(status: int, body: bytes) -> Any:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        kind = PromErrorKind.UNAVAILABLE if status >= 500 else PromErrorKind.BAD_RESPONSE
        raise PromError(kind, f"HTTP {status}: not JSON") from None
    if not isinstance(doc, dict):
        raise PromError(PromErrorKind.BAD_RESPONSE, f"HTTP {status}: not an API answer")
    if doc.get("status") != "success":
        # Bounded: it goes into a log line and every workload's status condition.
        error = cut(f"{doc.get('errorType', '?')}: {doc.get('error', '?')}", MAX_ERROR_CHARS)
        if doc.get("errorType") == "timeout":  # its own query timeout (503): not an outage
            kind = PromErrorKind.TIMEOUT
        elif status in (400, 422):
            kind = PromErrorKind.BAD_QUERY
        else:
            kind = PromErrorKind.UNAVAILABLE
        raise PromError(kind, error)
    return doc.get("data")


def parse_matrix(
    data: Any, *, start: float = -math.inf, end: float = math.inf
) -> tuple[RangeSeries, ...]:
    """`data` of a range query -> series; raises PromError(BAD_RESPONSE) on any other shape,
    or on a label value that is not a string, and PromError(BAD_QUERY) where a series holds
    native histogram samples (a policy reads numbers: read as no samples, such a query
    left its workloads on MissingMetrics without a word why). Samples outside the query's
    [start, end] (give or take a second of its rounding) are dropped: a range query answers
    none, and a sample from the future held a workload's history still until that time
    came (each later sample was "not newer")."""
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        raise PromError(PromErrorKind.BAD_RESPONSE, "expected a matrix result")
    out = []
    isfinite = math.isfinite
    low, high = start - 1.0, end + 1.0
    try:
        # A tick parses a sample per pod and signal: one pass, and the decoded label dict
        # kept as it came (the answer is ours alone).
        for item in data.get("result") or ():
            if isinstance(item, dict) and item.get("histograms"):
                raise PromError(PromErrorKind.BAD_QUERY, NATIVE_HISTOGRAMS)
            samples = tuple(
                (ts, value)
                for t, v in item.get("values") or ()
                if low <= (ts := float(t)) <= high and isfinite(value := float(v))
            )
            labels = item.get("metric") or {}
            if not isinstance(labels, dict):
                raise TypeError("metric is not an object")
            if not all(type(v) is str for v in labels.values()):
                raise TypeError(f"a label value is not a string in {shown(labels)}")
            out.append(RangeSeries(labels=labels, samples=samples))
    except (TypeError, ValueError, AttributeError, OverflowError) as err:
        message = cut(f"malformed matrix: {err}", MAX_ERROR_CHARS)
        raise PromError(PromErrorKind.BAD_RESPONSE, message) from None
    return tuple(out)
