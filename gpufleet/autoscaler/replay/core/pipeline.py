"""The simulated metrics pipeline: scrapes into samples, samples into late observations.

Pure and clockless. The engine calls `scrape` every `scrape_interval_seconds` with the
counters it keeps; a sample taken at time s becomes visible to a policy at
s + evaluation_seconds + query_seconds, as a Prometheus recording rule read by an adapter
would, and an observation carries the visible samples of the last `history_seconds`.
Rates are the increase over the last scrape interval divided by the interval, like
`rate()` over one interval. Replica states are not delayed: a controller reads them from the
Kubernetes API, which is current to within a watch event.
"""

from bisect import bisect_left, bisect_right
from collections.abc import Sequence

import numpy as np

from gpufleet.autoscaler.core.observation import Observation, PodTelemetry, Replica, Series
from gpufleet.autoscaler.replay.core.model import PipelineModel

# vLLM preallocates 90% of an 80 GiB H100 for weights and KV cache: flat, whatever the load.
FB_USED_MIB = 73728.0


class Pipeline:
    """Sample store plus the counters between scrapes; the engine reports events, `scrape`
    turns the counters into samples."""

    def __init__(self, model: PipelineModel) -> None:
        if model.scrape_interval_seconds <= 0:
            raise ValueError("scrape_interval_seconds must be > 0")
        self.model = model
        self.delay_seconds = model.delay_seconds
        # Counters since the last scrape.
        self._arrivals = 0
        self._completions = 0
        self._prompt_tokens = 0
        self._ttfts: list[float] = []
        self._prefill_seconds = 0.0
        # Samples, aligned with `times` (ttft has its own times: omitted when no first token).
        self.times: list[float] = []
        self.arrival_rate: list[float] = []
        self.queue_depth: list[float] = []
        self.in_flight: list[float] = []
        self.completion_rate: list[float] = []
        self.prompt_tokens_rate: list[float] = []
        self.ttft_sum_rate: list[float] = []
        self.prefill_sum_rate: list[float] = []
        self.ttft_times: list[float] = []
        self.ttft_p90: list[float] = []
        self.pods: list[tuple[PodTelemetry, ...]] = []
        self._busy_at_scrape: dict[str, float] = {}

    def arrived(self) -> None:
        """A request arrived."""
        self._arrivals += 1

    def first_token(
        self, ttft_seconds: float, *, prompt_tokens: int, prefill_seconds: float
    ) -> None:
        """A request got its first token after `ttft_seconds`, its prompt prefilled."""
        self._ttfts.append(ttft_seconds)
        self._prompt_tokens += prompt_tokens
        self._prefill_seconds += prefill_seconds

    def completed(self) -> None:
        """A request finished its last output token."""
        self._completions += 1

    def scrape(
        self,
        now: float,
        *,
        queue_depth: int,
        in_flight: int,
        busy_seconds: Sequence[tuple[str, float]],
    ) -> None:
        """Take one sample at `now`; `busy_seconds`: (pod, busy seconds so far) per started pod."""
        interval = self.model.scrape_interval_seconds
        self.times.append(now)
        self.arrival_rate.append(self._arrivals / interval)
        self.completion_rate.append(self._completions / interval)
        self.prompt_tokens_rate.append(self._prompt_tokens / interval)
        self.ttft_sum_rate.append(sum(self._ttfts) / interval)
        self.prefill_sum_rate.append(self._prefill_seconds / interval)
        self._prefill_seconds = 0.0
        self.queue_depth.append(float(queue_depth))
        self.in_flight.append(float(in_flight))
        if self._ttfts:
            self.ttft_times.append(now)
            self.ttft_p90.append(float(np.percentile(self._ttfts, 90)))
        self._arrivals = self._completions = self._prompt_tokens = 0
        self._ttfts = []
        pods = []
        busy_now = {}
        for name, busy in busy_seconds:
            # A pod started mid-interval counts from its start: 0 busy before it existed.
            done = busy - self._busy_at_scrape.get(name, 0.0)
            util = min(100.0, max(0.0, 100.0 * done / interval))
            pods.append(
                PodTelemetry(
                    pod=name,
                    gpu_util_percent=util,
                    fb_used_mib=FB_USED_MIB,
                    gr_engine_active_ratio=util / 100.0,
                )
            )
            busy_now[name] = busy
        self._busy_at_scrape = busy_now
        self.pods.append(tuple(pods))

    def observe(self, now: float, replicas: tuple[Replica, ...]) -> Observation:
        """What a policy sees at `now`: samples scraped in [now - history, now - delay]."""
        newest = now - self.delay_seconds
        oldest = now - self.model.history_seconds
        lo = bisect_left(self.times, oldest)
        hi = bisect_right(self.times, newest)
        times = tuple(self.times[lo:hi])
        tlo = bisect_left(self.ttft_times, oldest)
        thi = bisect_right(self.ttft_times, newest)
        return Observation(
            now=now,
            arrival_rate=Series(times, tuple(self.arrival_rate[lo:hi])),
            queue_depth=Series(times, tuple(self.queue_depth[lo:hi])),
            in_flight=Series(times, tuple(self.in_flight[lo:hi])),
            completion_rate=Series(times, tuple(self.completion_rate[lo:hi])),
            prompt_tokens_rate=Series(times, tuple(self.prompt_tokens_rate[lo:hi])),
            ttft_sum_rate=Series(times, tuple(self.ttft_sum_rate[lo:hi])),
            prefill_sum_rate=Series(times, tuple(self.prefill_sum_rate[lo:hi])),
            ttft_p90_seconds=Series(tuple(self.ttft_times[tlo:thi]), tuple(self.ttft_p90[tlo:thi])),
            pods=self.pods[hi - 1] if hi > lo else (),
            replicas=replicas,
        )
