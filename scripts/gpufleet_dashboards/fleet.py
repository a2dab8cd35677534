"""The fleet overview: dashboard 12239's panels on the same metrics and variables, with
true per-GPU values, plus namespaces, pods, MIG and time-slicing."""

# ruff: noqa: E501 (a PromQL query reads best on one line)

from gpufleet.exporter.core.profiles import either_profile as dcgm
from gpufleet_dashboards.grafana import (
    dashboard,
    gpu_series,
    panel,
    row,
    stat,
    target,
    ts,
    variable,
)

F = '{instance=~"$instance", gpu=~"$gpu"}'
INST = '{instance=~"$instance"}'
N = '{instance=~"$instance", namespace=~"$namespace"}'
N_POD = '{instance=~"$instance", namespace=~"$namespace", pod!=""}'
GPU = "{{Hostname}} GPU {{gpu}}"


def fleet() -> dict:
    # The pods of each whole GPU held by more than one (time-slicing, MPS): `vgpu` would
    # name them only with --kubernetes-virtual-gpus, which is off by default.
    whole = 'gpufleet_pod_gpu_share{instance=~"$instance", gpu=~"$gpu", GPU_I_ID=""}'
    shared = f"({whole} and on (UUID) (count by (UUID) ({whole}) > 1))"
    panels = [
        row(
            "dcgm-exporter dashboard 12239: the same metrics and variables, one true value per GPU"
        ),
        ts("GPU Temperature", target(dcgm("DCGM_FI_DEV_GPU_TEMP", F), GPU), unit="celsius", w=18),
        panel(
            "gauge",
            "GPU Avg. Temp",
            target(f"avg {dcgm('DCGM_FI_DEV_GPU_TEMP', F)}"),
            unit="celsius",
            w=6,
            min=0,
            max=100,
        ),
        ts("GPU Power Usage", target(dcgm("DCGM_FI_DEV_POWER_USAGE", F), GPU), unit="watt", w=18),
        panel(
            "gauge",
            "GPU Power Total",
            target(f"sum {dcgm('DCGM_FI_DEV_POWER_USAGE', F)}"),
            unit="watt",
            w=6,
        ),
        ts("GPU SM Clocks", target(f"DCGM_FI_DEV_SM_CLOCK{F} * 1000000", GPU), unit="hertz"),
        ts(
            "GPU Utilization",
            target(f"sum by (Hostname, gpu, UUID) {dcgm('DCGM_FI_DEV_GPU_UTIL', F)}", GPU),
            unit="percent",
            description="The GPU's own utilization: on a time-sliced GPU the pods' series and the "
            "unattributed rest add up to it. MIG GPUs have none (see the MIG row).",
        ),
        ts(
            "GPU Framebuffer Mem Used",
            target(f"sum by (Hostname, gpu, UUID) (DCGM_FI_DEV_FB_USED{F})", GPU),
            unit="mbytes",
            description="Per physical GPU: its pods' parts, the rest, and its MIG instances.",
        ),
        ts(
            "Tensor Core Utilization",
            target(
                dcgm("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", F), GPU + " {{GPU_I_PROFILE}} {{GPU_I_ID}}"
            ),
            unit="percentunit",
            description="Per GPU, or per MIG instance on a MIG GPU. A100 and older have no DCGM_FI_PROF_*.",
        ),
        row("Fleet"),
        stat(
            "GPUs", target(f"count(count by (Hostname, UUID) {dcgm('DCGM_FI_DEV_GPU_TEMP', INST)})")
        ),
        stat("GPUs allocated", target(f"sum(gpufleet_pod_gpu_share{INST})"), decimals=2),
        stat(
            "Utilization (non-MIG GPUs)",
            target(f"avg(sum by (Hostname, UUID) {dcgm('DCGM_FI_DEV_GPU_UTIL', INST)})"),
            unit="percent",
        ),
        stat("Power", target(f"sum {dcgm('DCGM_FI_DEV_POWER_USAGE', INST)}"), unit="watt"),
        stat(
            "Pods on GPUs",
            target(f"count(count by (namespace, pod) (gpufleet_pod_gpu_share{INST}))"),
        ),
        stat(
            "MIG instances",
            target(
                'count(count by (Hostname, UUID, GPU_I_ID) (DCGM_FI_DEV_FB_FREE{instance=~"$instance", GPU_I_ID!=""}))'
            ),
        ),
        row("Namespaces and pods"),
        ts(
            "GPUs allocated by namespace",
            target(f"sum by (namespace) (gpufleet_pod_gpu_share{N})", "{{namespace}}"),
            stack=True,
            description="Physical GPUs: a whole GPU 1, a 1g.10gb slice 1/7, a time-sliced GPU shared among its pods.",
        ),
        ts(
            "GPU power by namespace",
            target(f"sum by (namespace) (gpufleet_pod_power_usage{N})", "{{namespace}}"),
            unit="watt",
            stack=True,
        ),
        ts(
            "Framebuffer used by namespace",
            target(
                'sum by (namespace) (DCGM_FI_DEV_FB_USED{instance=~"$instance", namespace=~"$namespace", pod!=""})',
                "{{namespace}}",
            ),
            unit="mbytes",
            stack=True,
        ),
        ts(
            "GPU utilization by pod (top 20)",
            target(
                f"topk(20, sum by (namespace, pod) {dcgm('DCGM_FI_DEV_GPU_UTIL', N_POD)})",
                "{{namespace}}/{{pod}}",
            ),
            unit="percent",
            description="Each pod's own utilization; on a shared GPU, its part of the GPU's time.",
        ),
        panel(
            "table",
            "Pods and their GPUs",
            target(
                f"sum by (namespace, pod, Hostname, gpu, GPU_I_PROFILE, GPU_I_ID, vgpu) (gpufleet_pod_gpu_share{N})",
                instant=True,
            ),
            w=24,
            h=10,
            description="Each pod's part of a physical GPU (gpufleet_pod_gpu_share).",
        ),
        row("MIG"),
        panel(
            "bargauge",
            "MIG instances by profile",
            target(
                'count by (GPU_I_PROFILE) (count by (Hostname, UUID, GPU_I_ID, GPU_I_PROFILE) (DCGM_FI_DEV_FB_FREE{instance=~"$instance", gpu=~"$gpu", GPU_I_ID!=""}))',
                "{{GPU_I_PROFILE}}",
                instant=True,
            ),
            w=6,
        ),
        ts(
            "MIG instance framebuffer used",
            target(
                'DCGM_FI_DEV_FB_USED{instance=~"$instance", gpu=~"$gpu", GPU_I_ID!=""}',
                GPU + " {{GPU_I_PROFILE}}#{{GPU_I_ID}} {{pod}}",
            ),
            unit="mbytes",
            w=9,
        ),
        ts(
            "MIG instance engine activity",
            target(
                dcgm(
                    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                    '{instance=~"$instance", gpu=~"$gpu", GPU_I_ID!=""}',
                ),
                GPU + " {{GPU_I_PROFILE}}#{{GPU_I_ID}} {{pod}}",
            ),
            unit="percentunit",
            w=9,
        ),
        row("Time-slicing"),
        panel(
            "bargauge",
            "Pods per shared GPU",
            target(f"count by (Hostname, gpu) ({shared})", GPU, instant=True),
            w=6,
        ),
        ts(
            "Shares of time-sliced GPUs by pod",
            target(shared, GPU + " {{namespace}}/{{pod}}"),
            unit="percentunit",
            stack=True,
            w=9,
        ),
        ts(
            "Time-sliced GPU utilization: pods and the rest",
            target(
                f"{dcgm('DCGM_FI_DEV_GPU_UTIL', F)} and on (UUID) {shared}",
                GPU + " {{pod}}",
            ),
            unit="percent",
            stack=True,
            w=9,
            description="Per GPU, the pods' series and the unattributed rest (no pod label) stack to the GPU's utilization.",
        ),
    ]
    variables = [
        variable("instance", f"label_values({gpu_series()}, instance)"),
        variable("gpu", f"label_values({gpu_series(INST)}, gpu)"),
        variable(
            "namespace", 'label_values(gpufleet_pod_gpu_share{instance=~"$instance"}, namespace)'
        ),
    ]
    return dashboard(
        "gpufleet-fleet",
        "GPU fleet overview",
        "dcgm-exporter dashboard 12239's panels on the same metrics and variables, plus namespaces, pods, MIG and time-slicing.",
        variables,
        panels,
    )
