"""The simulated metrics pipeline: scrapes into samples, samples into late observations.

Pure and clockless. The engine calls `scrape` every `scrape_interval_seconds` with the
running totals it keeps (requests arrived and completed, each pod's busy seconds: a call
per request to count them was ~5% of a run) and reports each first token; a sample taken
at time s becomes visible to a policy at s + evaluation_seconds + query_seconds, as a
Prometheus recording rule read by an adapter would, and an observation carries the
visible samples of the last `history_seconds`.
Rates are the increase over the last scrape interval divided by the interval, like
`rate()` over one interval. Replica states are not delayed: a controller reads them from the
Kubernetes API, which is current to within a watch event. The samples go into the same
`SignalHistory` the live controller fills from Prometheus, which cuts the window.
"""

import math
from bisect import bisect_left
from collections.abc import Sequence

import numpy as np

from gpufleet.autoscaler.core.history import SignalHistory
from gpufleet.autoscaler.core.observation import PodTelemetry
from gpufleet.autoscaler.replay.core.model import PipelineModel

# vLLM preallocates 90% of an 80 GiB H100 for weights and KV cache: flat, whatever the load.
FB_USED_MIB = 73728.0
# vLLM's `vllm:request_prompt_tokens` buckets: 1, 2, 5, 10, 20, ... up to the model's
# context (`build_1_2_5_buckets(max_model_len)`; 131072 for a Llama-3.1-8B), then +Inf.
PROMPT_TOKEN_BOUNDS: tuple[float, ...] = tuple(
    float(m * 10**e) for e in range(6) for m in (1, 2, 5) if m * 10**e <= 131072
)


class Pipeline:
    """The counters between scrapes and the samples taken so far; the engine reports first
    tokens, `scrape` turns the counters and the engine's totals into samples."""

    def __init__(self, model: PipelineModel) -> None:
        if model.scrape_interval_seconds <= 0:
            raise ValueError("scrape_interval_seconds must be > 0")
        self.model = model
        self.delay_seconds = model.delay_seconds
        self.history = SignalHistory(
            history_seconds=model.history_seconds, delay_seconds=model.delay_seconds
        )
        # Totals at the last scrape, and counters since.
        self._arrived_at_scrape = 0
        self._completed_at_scrape = 0
        self._prompt_tokens = 0
        self._ttfts: list[float] = []
        self._prefill_seconds = 0.0
        # Prompts per `PROMPT_TOKEN_BOUNDS` bucket (the last: above them all) since the scrape.
        self._prompt_counts = [0] * (len(PROMPT_TOKEN_BOUNDS) + 1)
        self._busy_at_scrape: dict[str, float] = {}

    def first_token(
        self, ttft_seconds: float, *, prompt_tokens: int, prefill_seconds: float
    ) -> None:
        """A request got its first token after `ttft_seconds`, its prompt prefilled. (vLLM
        observes the prompt's length when the request finishes, an output's decode later:
        the same distribution, a few seconds behind.)"""
        self._ttfts.append(ttft_seconds)
        self._prompt_tokens += prompt_tokens
        self._prefill_seconds += prefill_seconds
        self._prompt_counts[bisect_left(PROMPT_TOKEN_BOUNDS, prompt_tokens)] += 1

    def scrape(
        self,
        now: float,
        *,
        arrived: int,
        completed: int,
        queue_depth: int,
        in_flight: int,
        busy_seconds: Sequence[tuple[str, float]],
    ) -> None:
        """Take one sample at `now`; `arrived`, `completed`: requests so far; `busy_seconds`:
        (pod, busy seconds so far) per started pod."""
        interval = self.model.scrape_interval_seconds
        add = self.history.add
        add("arrival_rate", now, (arrived - self._arrived_at_scrape) / interval)
        add("completion_rate", now, (completed - self._completed_at_scrape) / interval)
        add("prompt_tokens_rate", now, self._prompt_tokens / interval)
        add("ttft_sum_rate", now, sum(self._ttfts) / interval)
        add("prefill_sum_rate", now, self._prefill_seconds / interval)
        add("queue_depth", now, float(queue_depth))
        add("in_flight", now, float(in_flight))
        if self._ttfts:
            add("ttft_p90_seconds", now, float(np.percentile(self._ttfts, 90)))
        self.history.add_buckets("prompt_tokens_buckets", now, self._cumulative(interval))
        self._prompt_counts = [0] * (len(PROMPT_TOKEN_BOUNDS) + 1)
        self._arrived_at_scrape, self._completed_at_scrape = arrived, completed
        self._prompt_tokens = 0
        self._prefill_seconds = 0.0
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
        self.history.add_pods(now, tuple(pods))

    def _cumulative(self, interval: float) -> tuple[tuple[float, float], ...]:
        """The prompt counts since the scrape as cumulative (bound, per second) buckets."""
        out = []
        total = 0
        for bound, count in zip((*PROMPT_TOKEN_BOUNDS, math.inf), self._prompt_counts, strict=True):
            total += count
            out.append((bound, total / interval))
        return tuple(out)
