"""The whole node: the plugin advertises on the fake kubelet, pods are admitted through it
(GetPreferredAllocation + Allocate), each runs a GPU process, and the exporter attributes
every whole GPU, MIG slice and time-sliced replica to the pod the plugin gave it, as a real
Prometheus sees it."""

from pathlib import Path

import pytest
from helpers import wait_for
from helpers.e2e import RunningExporter

from gpufleet.exporter.settings import ExporterSettings
from gpufleet.lab.kubelet.kubelet import FakeKubelet
from gpufleet.lab.nvml.api import SimulatedNvml
from gpufleet.plugin.daemon import start_plugin
from gpufleet.plugin.settings import PluginSettings, resolve_config

GIB = 1 << 30

TIME_SLICED = """
version: v1
flags: {migStrategy: mixed}
sharing:
  timeSlicing:
    renameByDefault: true
    resources: [{name: nvidia.com/gpu, replicas: 3}]
"""
WHOLE = """
version: v1
flags: {migStrategy: mixed}
"""


@pytest.mark.parametrize(
    ("config_text", "pods_per_resource"),
    [
        (TIME_SLICED, {"nvidia.com/gpu.shared": 6, "nvidia.com/mig-1g.10gb": 7}),
        (WHOLE, {"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": 3}),
    ],
    ids=["replicas and MIG slices", "whole GPUs and MIG slices"],
)
def test_prometheus_sees_the_pods_the_plugin_allocated(
    tmp_path: Path, prometheus_for, config_text: str, pods_per_resource: dict[str, int]
):
    kubelet = FakeKubelet(tmp_path / "k", rate_limit=None)
    kubelet.start()
    sim = SimulatedNvml("2xH100+1xH100:mig=7x1g.10gb", proc_root=tmp_path / "proc")
    sim.nvmlInit()
    (tmp_path / "config.yaml").write_text(config_text)
    settings = PluginSettings(
        kubelet_socket=str(kubelet.device_plugins_dir / "kubelet.sock"),
        config_file=str(tmp_path / "config.yaml"),
    )
    config, _ = resolve_config(settings)
    plugin = start_plugin(settings, config, sim, plugin_dir=kubelet.device_plugins_dir)
    exporter = None
    try:
        for resource in pods_per_resource:
            assert kubelet.device_plugins.wait_for_registrations(resource, 1, timeout_seconds=10)
            wait_for(lambda r=resource: r in kubelet.device_plugins.allocatable(), what=resource)
        expected = {}  # pod -> (device ID, process memory MiB)
        for resource, count in pods_per_resource.items():
            kind = resource.split("/")[1].split(".")[0]
            for n in range(count):
                name = f"{kind}-{n}"
                uid = f"00000000-0000-0000-0000-{len(expected):012d}"
                (device,) = kubelet.admit(("ml", name, uid), "main", resource, 1)
                memory = (1 + len(expected) % 3) * GIB
                sim.spawn_process(
                    device.split("::")[0], pod_uid=uid, used_memory_bytes=memory, sm_share=0.1
                )
                expected[name] = (device, memory >> 20)
        exporter = RunningExporter(
            ExporterSettings(
                address="127.0.0.1:0",
                collect_interval_ms=200,
                kubernetes=True,
                kubernetes_virtual_gpus=True,
                pod_resources_kubelet_socket=kubelet.pod_resources_socket,
                kubelet_checkpoint=kubelet.checkpoint_path,
                kubelet_refresh_seconds=0.2,
                proc_root=sim.proc_root,
            ),
            sim,
        ).start()
        prom = prometheus_for(f"127.0.0.1:{exporter.port}")
        wait_for(
            lambda: len(prom.query('DCGM_FI_DEV_FB_USED{pod!=""}')) >= len(expected),
            timeout=40,
            what="every pod's series in Prometheus",
        )
        migs = {m.uuid: m for g in sim.devices for m in g.mig}
        for name, (device, memory_mib) in expected.items():
            (series,) = prom.query(f'DCGM_FI_DEV_FB_USED{{pod="{name}"}}')
            labels = series["metric"]
            base, _, replica = device.partition("::")
            if base in migs:
                assert labels["GPU_I_ID"] == str(migs[base].gi_id), name
            else:
                assert labels["UUID"] == base, name
            if replica:
                assert labels["vgpu"] == replica
                # A shared GPU: the pod's own framebuffer, not the device's.
                assert float(series["value"][1]) == memory_mib
    finally:
        if exporter:
            exporter.stop()
        plugin.stop()
        kubelet.stop()
        sim.close()
