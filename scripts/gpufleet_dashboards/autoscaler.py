"""The autoscaler: replicas, decisions, the serving engine's demand signals, the TTFT SLO."""

# ruff: noqa: E501 (a PromQL query reads best on one line)

from gpufleet_dashboards.grafana import dashboard, panel, row, target, ts, variable

W = '{workload=~"$workload"}'
S = '{namespace=~"$namespace"}'


def leader_on_its_own_axis(p: dict) -> dict:
    """Target B, the 0/1 leader flag, on a right axis of its own: on the seconds axis it
    read "1 s" and flattened the milliseconds a pass takes."""
    p["fieldConfig"]["overrides"].append(
        {
            "matcher": {"id": "byFrameRefID", "options": "B"},
            "properties": [
                {"id": "unit", "value": "none"},
                {"id": "min", "value": 0},
                {"id": "max", "value": 1},
                {"id": "custom.axisPlacement", "value": "right"},
                {"id": "custom.drawStyle", "value": "line"},
                {"id": "custom.lineInterpolation", "value": "stepAfter"},
            ],
        }
    )
    return p


def autoscaler() -> dict:
    per_ns = "{{namespace}}"
    panels = [
        row("Replicas and decisions"),
        ts(
            "Replicas: desired, current, ready, max",
            target(f"gpufleet_autoscaler_desired_replicas{W}", "{{workload}} desired"),
            target(f"gpufleet_autoscaler_current_replicas{W}", "{{workload}} current"),
            target(f"gpufleet_autoscaler_ready_replicas{W}", "{{workload}} ready"),
            target(f"gpufleet_autoscaler_max_replicas{W}", "{{workload}} max"),
            description="Current: replicas starting or ready; ready: Ready and serving.",
        ),
        ts(
            "Decisions by reason",
            target(
                f"sum by (workload, reason) (increase(gpufleet_autoscaler_decisions_total{W}[$__rate_interval]))",
                "{{workload}} {{reason}}",
            ),
            stack=True,
        ),
        panel(
            "state-timeline",
            "Held on missing metrics",
            target(f"gpufleet_autoscaler_missing_metrics{W}", "{{workload}}"),
            w=12,
            h=5,
        ),
        ts(
            "Node headroom: placeholder pods",
            target(f"gpufleet_autoscaler_placeholder_replicas{W}", "{{workload}} placeholders"),
            description="Placeholder pods kept for the replicas the policy expects to need within node provisioning plus a cold start; nodes are provisioned for them ahead, and replicas preempt them.",
            h=5,
        ),
        leader_on_its_own_axis(
            ts(
                "Control loop: seconds per pass",
                target(
                    "sum by (instance) (rate(gpufleet_autoscaler_reconcile_seconds_total[$__rate_interval]))"
                    " / sum by (instance) (rate(gpufleet_autoscaler_ticks_total[$__rate_interval]))",
                    "{{instance}}",
                ),
                target("gpufleet_autoscaler_leader", "{{instance}} leader"),
                target("gpufleet_autoscaler_clock_lead_seconds", "{{instance}} clock lead"),
                description="Seconds per control loop pass, whether the replica is the "
                "leader (right axis), and how far its clock leads Prometheus' (negative: "
                "trails). The loop takes that lead off and runs on Prometheus' time; 0 within "
                "a second. A lead that is not 0 is a clock NTP does not keep.",
                unit="s",
                h=5,
            )
        ),
        ts(
            "Control loop: late queries and busy workloads",
            target(
                "sum by (instance) (increase(gpufleet_autoscaler_late_queries_total[$__rate_interval]))",
                "{{instance}} late queries",
            ),
            target(
                "sum by (instance) (increase(gpufleet_autoscaler_busy_steps_total[$__rate_interval]))",
                "{{instance}} busy steps",
            ),
            target(
                "sum by (instance) (increase(gpufleet_autoscaler_backfill_queries_total[$__rate_interval]))",
                "{{instance}} backfill queries",
            ),
            description="Prometheus queries still answering, and workload steps (their API "
            "writes) still running, when a tick stopped waiting (--tick-seconds). A few at "
            "startup are the history's backfill; a steady count is a slow query override or a "
            "hung admission webhook: that workload acts late, and no other. Backfill queries "
            "fetch the times a workload lacked (one that joined a query others send, or came "
            "back from ticks it sat out); a steady count is a workload that keeps sitting "
            "ticks out.",
            h=5,
        ),
        row("Demand and signals (the vLLM preset's)"),
        ts(
            "Demand: requests per second",
            target(
                f"sum by (namespace) (rate(vllm:time_to_first_token_seconds_count{S}[$__rate_interval]))",
                per_ns + " admitted",
            ),
            target(
                f"sum by (namespace) (rate(vllm:request_success_total{S}[$__rate_interval]))",
                per_ns + " completed",
            ),
            unit="reqps",
            w=8,
        ),
        ts(
            "Queue and batch",
            target(f"sum by (namespace) (vllm:num_requests_waiting{S})", per_ns + " waiting"),
            target(f"sum by (namespace) (vllm:num_requests_running{S})", per_ns + " running"),
            w=8,
        ),
        ts(
            "Prompt tokens per second",
            target(
                f"sum by (namespace) (rate(vllm:prompt_tokens_total{S}[$__rate_interval]))", per_ns
            ),
            w=8,
        ),
        row("SLO"),
        ts(
            "Time to first token, p90",
            target(
                f"histogram_quantile(0.9, sum by (namespace, le) (rate(vllm:time_to_first_token_seconds_bucket{S}[$__rate_interval])))",
                per_ns,
            ),
            unit="s",
            w=8,
        ),
        ts(
            "TTFT SLO attainment (first token within 1 s)",
            target(
                f"1 - namespace_model:ttft_slo_errors:ratio_rate5m{S}", per_ns + " {{model_name}}"
            ),
            unit="percentunit",
            max=1,
            w=8,
            description="From rules/slo.rules.yml: the share of requests whose first token came within 1 s, over 5 minutes.",
        ),
        ts(
            "Error budget burn rate (99% SLO)",
            target(
                f"namespace_model:ttft_slo_errors:ratio_rate1h{S} / 0.01",
                per_ns + " {{model_name}} 1h",
            ),
            target(
                f"namespace_model:ttft_slo_errors:ratio_rate5m{S} / 0.01",
                per_ns + " {{model_name}} 5m",
            ),
            w=8,
            description="1 spends the budget in exactly the SLO period; TTFTBudgetBurnFast pages at 14.4.",
        ),
    ]
    variables = [
        variable("workload", "label_values(gpufleet_autoscaler_desired_replicas, workload)"),
        variable(
            "namespace",
            'label_values(gpufleet_autoscaler_desired_replicas{workload=~"$workload"}, workload)',
            regex="/^([^/]+)\\//",
        ),
    ]
    return dashboard(
        "gpufleet-autoscaler",
        "GPU autoscaler",
        "GPUAutoscaler replicas, decisions, the serving engine's demand signals and the TTFT SLO.",
        variables,
        panels,
    )
