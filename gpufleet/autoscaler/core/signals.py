"""Serving-engine presets: the PromQL behind each signal a policy reads, per engine.

Every query groups `by (namespace, pod)` (histograms also by `le`), so one query per signal
serves every workload, joined to workloads by their pods (`gather`). `{{selector}}` is
replaced by extra label matchers (the spec's model) and `{{window}}` by the rate window;
rates use `irate`, the increase over the last scrape interval, as the replay measures them.

Metric names are each engine's own, as Prometheus scrapes them (tests/data/engines lists
what each engine exports, from its own repository, and the tests hold every query to it):
vLLM and SGLang counters end in `_total`; TGI's, Triton's and TorchServe's client libraries
add no suffix. Where an engine has no metric for a signal
the preset leaves it out, and the policy sees it missing, never zero:
- no engine counts arrivals except TGI (which counts OpenAI-route requests twice) and
  TorchServe: arrivals are requests reaching their first token (or completing) plus the
  growth of the waiting queue;
- TorchServe has no queue gauge: by Little's law the queue-seconds accrued per second
  (`rate(ts_queue_latency_microseconds)`) are the mean number of requests waiting;
- Triton reports the first-response histogram in milliseconds (opt-in,
  `--metrics-config histogram_latencies=true`), scaled to seconds here;
- SGLang exports its prompt-length histogram only when started with
  `--collect-tokens-histogram`.
Pure data and string templates.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.autoscaler.core.history import BUCKET_SIGNALS


@dataclass(frozen=True, slots=True)
class SignalQuery:
    """One signal's PromQL and how its answer becomes a workload's value."""

    template: str
    # "sum": add the pods' values; "quantile": add buckets, then quantile; "buckets": add
    # buckets, and keep them (a `Buckets` signal)
    kind: str = "sum"
    quantile: float = 0.9
    scale: float = 1.0  # multiply the result (units)

    def render(self, *, selector: str, window: str) -> str:
        # The window first: a model name holding "{{window}}" is the model's, not a slot.
        return self.template.replace("{{window}}", window).replace("{{selector}}", selector)


def _by_pod(expr: str) -> str:
    return f"sum by (namespace, pod) ({expr})"


def _rate(metric: str) -> str:
    return _by_pod(f"irate({metric}{{{{{{selector}}}}}}[{{{{window}}}}])")


def _gauge(metric: str) -> str:
    return _by_pod(f"{metric}{{{{{{selector}}}}}}")


def _growth(metric: str) -> str:
    return _by_pod(f"deriv({metric}{{{{{{selector}}}}}}[{{{{window}}}}])")


def _arrivals(admitted: str, waiting: str) -> SignalQuery:
    """Requests admitted per second plus the waiting queue's growth, never below 0."""
    return SignalQuery(f"clamp_min({_rate(admitted)} + {_growth(waiting)}, 0)")


def _bucket_rates(bucket: str) -> str:
    return f"sum by (namespace, pod, le) (irate({bucket}{{{{{{selector}}}}}}[{{{{window}}}}]))"


# Signals that are a quantile of a histogram, and which quantile.
QUANTILE_SIGNALS: Mapping[str, float] = {"ttft_p90_seconds": 0.9}


def _quantile(bucket: str, *, scale: float = 1.0) -> SignalQuery:
    q = QUANTILE_SIGNALS["ttft_p90_seconds"]
    return SignalQuery(_bucket_rates(bucket), kind="quantile", quantile=q, scale=scale)


PRESETS: Mapping[str, Mapping[str, SignalQuery]] = {
    "vllm": {
        "arrival_rate": _arrivals(
            "vllm:time_to_first_token_seconds_count", "vllm:num_requests_waiting"
        ),
        "queue_depth": SignalQuery(_gauge("vllm:num_requests_waiting")),
        "in_flight": SignalQuery(_gauge("vllm:num_requests_running")),
        "completion_rate": SignalQuery(_rate("vllm:request_success_total")),
        "prompt_tokens_rate": SignalQuery(_rate("vllm:prompt_tokens_total")),
        "ttft_p90_seconds": _quantile("vllm:time_to_first_token_seconds_bucket"),
        "ttft_sum_rate": SignalQuery(_rate("vllm:time_to_first_token_seconds_sum")),
        "prefill_sum_rate": SignalQuery(_rate("vllm:request_prefill_time_seconds_sum")),
        "prompt_tokens_buckets": SignalQuery(
            _bucket_rates("vllm:request_prompt_tokens_bucket"), kind="buckets"
        ),
    },
    "sglang": {
        "arrival_rate": _arrivals(
            "sglang:time_to_first_token_seconds_count", "sglang:num_queue_reqs"
        ),
        "queue_depth": SignalQuery(_gauge("sglang:num_queue_reqs")),
        "in_flight": SignalQuery(_gauge("sglang:num_running_reqs")),
        "completion_rate": SignalQuery(_rate("sglang:num_requests_total")),
        "prompt_tokens_rate": SignalQuery(_rate("sglang:prompt_tokens_total")),
        "ttft_p90_seconds": _quantile("sglang:time_to_first_token_seconds_bucket"),
        "ttft_sum_rate": SignalQuery(_rate("sglang:time_to_first_token_seconds_sum")),
        "prompt_tokens_buckets": SignalQuery(
            _bucket_rates("sglang:prompt_tokens_histogram_bucket"), kind="buckets"
        ),
    },
    "tgi": {
        "arrival_rate": _arrivals("tgi_request_success", "tgi_queue_size"),
        "queue_depth": SignalQuery(_gauge("tgi_queue_size")),
        "in_flight": SignalQuery(_gauge("tgi_batch_current_size")),
        "completion_rate": SignalQuery(_rate("tgi_request_success")),
        "prompt_tokens_rate": SignalQuery(_rate("tgi_request_input_length_sum")),
        "prompt_tokens_buckets": SignalQuery(
            _bucket_rates("tgi_request_input_length_bucket"), kind="buckets"
        ),
    },
    "triton": {
        "arrival_rate": _arrivals(
            "nv_inference_request_success", "nv_inference_pending_request_count"
        ),
        "queue_depth": SignalQuery(_gauge("nv_inference_pending_request_count")),
        "completion_rate": SignalQuery(_rate("nv_inference_request_success")),
        "ttft_p90_seconds": _quantile(
            "nv_inference_first_response_histogram_ms_bucket", scale=1e-3
        ),
        "ttft_sum_rate": SignalQuery(
            _rate("nv_inference_first_response_histogram_ms_sum"), scale=1e-3
        ),
    },
    "torchserve": {
        "arrival_rate": SignalQuery(_rate("ts_inference_requests_total")),
        "queue_depth": SignalQuery(_rate("ts_queue_latency_microseconds"), scale=1e-6),
        "in_flight": SignalQuery(_rate("ts_inference_latency_microseconds"), scale=1e-6),
    },
}


def queries_for(preset: str, overrides: Mapping[str, str]) -> dict[str, SignalQuery]:
    """A workload's signal -> query: the preset's, with the spec's PromQL overrides, each
    grouped by (namespace, pod) and read as the preset's would be: summed over the
    workload's pods; a histogram signal's as buckets by `le`; a quantile signal's as
    buckets by `le` too (in seconds), or as each pod's quantile, of which the workload
    takes the largest (`gather.workload_quantiles`)."""
    out = dict(PRESETS[preset])
    for signal, template in overrides.items():
        if signal in BUCKET_SIGNALS:
            out[signal] = SignalQuery(template, kind="buckets")
        elif signal in QUANTILE_SIGNALS:
            out[signal] = SignalQuery(template, kind="quantile", quantile=QUANTILE_SIGNALS[signal])
        else:
            out[signal] = SignalQuery(template)
    return out


def model_selector(preset: str, model: str) -> str:
    """The label matcher selecting one model's series, in the engine's own label name."""
    if not model:
        return ""
    label = {"triton": "model", "tgi": ""}.get(preset, "model_name")
    return f'{label}="{_promql_string(model)}"' if label else ""


def _promql_string(text: str) -> str:
    """`text` inside a PromQL double-quoted string: Go's escapes, as its lexer reads them (a
    raw newline ends the query in a parse error)."""
    out = []
    for ch in text:
        if ch in '\\"':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


# The exporter's per-pod GPU series (dcgm-exporter names and `namespace`/`pod` labels, as a
# ServiceMonitor with honorLabels keeps them) -> the PodTelemetry field each fills. Each
# under either profile: `--compat 4.9` serves DCGM 4.7's names, GPU_UTIL as a ratio.
GPU_TELEMETRY: Mapping[str, str] = {
    "gpu_util_percent": (
        "avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL or 100 * DCGM_FI_DEV_GPU_UTIL_RATIO)"
    ),
    "fb_used_mib": "sum by (namespace, pod) (DCGM_FI_DEV_FB_USED)",
    "gr_engine_active_ratio": (
        "avg by (namespace, pod) "
        "(DCGM_FI_PROF_GR_ENGINE_ACTIVE or DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO)"
    ),
}
