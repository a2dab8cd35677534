"""Cost and chargeback by namespace, from the recording rules in rules/gpu-usage.rules.yml."""

# ruff: noqa: E501 (a PromQL query reads best on one line)

from gpufleet_dashboards.grafana import dashboard, panel, row, stat, target, ts, variable

C = '{namespace=~"$namespace"}'


def over_range(series: str) -> str:
    """`series` (per hour, or GPUs) integrated over the dashboard's range into hours: the
    value at every $__interval step times the step. A namespace that existed for part of the
    range is charged for that part only; the rules' evaluation interval does not matter."""
    return f"sum by (namespace) (sum_over_time({series}[$__range:$__interval])) * $__interval_ms / 3600000"


def cost() -> dict:
    price = "scalar(gpufleet:gpu_hourly_price:dollars)"
    per_ns = "{{namespace}}"
    panels = [
        row("Now"),
        stat(
            "Price per GPU-hour",
            target("gpufleet:gpu_hourly_price:dollars"),
            unit="currencyUSD",
            w=6,
        ),
        stat(
            "GPUs allocated",
            target(f"sum(namespace:gpufleet_gpus_allocated:sum{C})"),
            decimals=2,
            w=6,
        ),
        stat("GPUs idle", target(f"sum(namespace:gpufleet_gpus_idle:sum{C})"), decimals=2, w=6),
        stat(
            "Idle cost per hour",
            target(f"sum(namespace:gpufleet_idle_gpu_cost:dollars_per_hour{C})"),
            unit="currencyUSD",
            w=6,
        ),
        row("By namespace"),
        ts(
            "GPUs allocated by namespace",
            target(f"namespace:gpufleet_gpus_allocated:sum{C}", per_ns),
            stack=True,
        ),
        ts(
            "GPUs used by namespace",
            target(f"namespace:gpufleet_gpus_used:sum{C}", per_ns),
            stack=True,
        ),
        ts(
            "GPUs idle by namespace",
            target(f"namespace:gpufleet_gpus_idle:sum{C}", per_ns),
            stack=True,
        ),
        ts(
            "Idle cost per hour by namespace",
            target(f"namespace:gpufleet_idle_gpu_cost:dollars_per_hour{C}", per_ns),
            unit="currencyUSD",
            stack=True,
        ),
        row("Chargeback over the dashboard's time range"),
        panel(
            "table",
            "GPU-hours and cost by namespace",
            target(over_range(f"namespace:gpufleet_gpus_allocated:sum{C}"), instant=True),
            target(over_range(f"namespace:gpufleet_gpus_used:sum{C}"), instant=True),
            target(over_range(f"namespace:gpufleet_gpus_idle:sum{C}"), instant=True),
            target(
                f"{over_range(f'namespace:gpufleet_gpus_allocated:sum{C}')} * {price}", instant=True
            ),
            target(
                over_range(f"namespace:gpufleet_idle_gpu_cost:dollars_per_hour{C}"), instant=True
            ),
            target(
                over_range(f"gpufleet_pod_power_usage{C}") + " / 1000",
                instant=True,
            ),
            w=24,
            h=10,
            description="Allocated, used and idle GPU-hours, the cost of the allocated and of the idle ones, "
            "and the energy charged to each namespace (kWh, from gpufleet_pod_power_usage), summed at every interval step of the range.",
        ),
    ]
    panels[-1]["transformations"].append(
        {
            "id": "organize",
            "options": {
                "excludeByName": {"Time": True},
                "renameByName": {
                    "Value #A": "allocated GPU-hours",
                    "Value #B": "used GPU-hours",
                    "Value #C": "idle GPU-hours",
                    "Value #D": "allocated cost ($)",
                    "Value #E": "idle cost ($)",
                    "Value #F": "energy (kWh)",
                },
            },
        }
    )
    variables = [
        variable("namespace", "label_values(namespace:gpufleet_gpus_allocated:sum, namespace)")
    ]
    return dashboard(
        "gpufleet-cost",
        "GPU cost and chargeback",
        "GPUs allocated, used and idle per namespace, and their cost, from rules/gpu-usage.rules.yml.",
        variables,
        panels,
    )
