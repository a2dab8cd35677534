"""A simulated GPU node: simulated NVML, a fake kubelet, and pods running GPU processes.

`gpufleet lab`, the end-to-end tests and the benchmark all build their node here, so they
exercise the same layout: whole GPUs, MIG slices and time-sliced replicas, each allocated
to pods the way NVIDIA's device plugin names them, and each pod running a process whose
`/proc/<pid>/cgroup` carries its pod UID. The device-plugin issue will let the plugin make
these allocations; until then this module plays its part.
"""

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.core.device_ids import base_id, is_replica, replica_id
from gpufleet.lab.nvml.api import SimulatedNvml

# The simulator side alone imports neither grpc nor pydantic: an exporter under benchmark
# without -k, and a peer exporter in its own environment, hold just that side.
if TYPE_CHECKING:
    from gpufleet.exporter.settings import ExporterSettings
    from gpufleet.lab.kubelet.kubelet import FakeKubelet, RateLimit

# The benchmark's node (issue 2): 8 x H100, two of them MIG 7 x 1g.10gb.
DEFAULT_FLEET = "6xH100+2xH100:mig=7x1g.10gb"
NAMESPACES = ("inference", "research", "batch")
GIB = 1 << 30


@dataclass(frozen=True, slots=True, kw_only=True)
class SimPod:
    """A pod of the simulated node and the simulated process it runs."""

    namespace: str
    name: str
    uid: str
    container: str
    resource_name: str
    device_ids: tuple[str, ...]
    pid: int


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeLayout:
    """How the node's GPUs are handed out.

    Non-MIG GPUs: the first `whole_gpus` go to one pod each; the rest are time-sliced into
    `replicas` shares (`GPU-<uuid>::<n>`), one pod per share. Each MIG slice goes to a pod.
    """

    fleet: str = DEFAULT_FLEET
    whole_gpus: int = 2
    replicas: int = 22
    shared_resource: str = "nvidia.com/gpu.shared"  # renameByDefault: true
    seed: int = 0


def _uid(seed: int, name: str) -> str:
    h = hashlib.sha256(f"{seed}:pod:{name}".encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _memory_bytes(uid: str, *, shared: bool, mig: bool) -> int:
    """A pod's framebuffer use: distinct per time-sliced pod (0.5-3 GiB, so 22 shares fit
    one 80 GB GPU and per-pod attribution is checkable), 2 GiB per MIG slice, 40 GiB for a
    whole GPU."""
    if shared:
        return (1 + int(uid[:8], 16) % 6) * (GIB // 2)
    return (2 if mig else 40) * GIB


def _plan(sim: SimulatedNvml, layout: NodeLayout) -> list[tuple[str, str, tuple[str, ...]]]:
    """(pod name, resource name, device IDs) for every pod of the layout."""
    plan = []
    whole = 0
    for gpu in sim.devices:
        if gpu.mig_enabled:
            for mig in gpu.mig:
                name = f"mig-{gpu.index}-{mig.gi_id}"
                plan.append((name, f"nvidia.com/mig-{mig.profile}", (mig.uuid,)))
        elif whole < layout.whole_gpus:
            whole += 1
            plan.append((f"train-{gpu.index}", "nvidia.com/gpu", (gpu.uuid,)))
        else:
            for n in range(layout.replicas):
                name = f"serve-{gpu.index}-{n}"
                plan.append((name, layout.shared_resource, (replica_id(gpu.uuid, n),)))
    return plan


class SimNode:
    """Simulated NVML + fake kubelet + pods. Use as a context manager.

    `root` holds the kubelet's directory tree (`pod-resources/kubelet.sock`,
    `device-plugins/kubelet_internal_checkpoint`); the simulator's proc root lives beside it.
    """

    def __init__(
        self,
        layout: NodeLayout | None = None,
        *,
        root: Path | None = None,
        rate_limit: "RateLimit | None" = None,
        with_kubelet: bool = True,
    ) -> None:
        self.layout = layout or NodeLayout()
        self._tmp = None if root else tempfile.TemporaryDirectory(prefix="gpufleet-node-")
        self.root = Path(root or self._tmp.name)  # type: ignore[union-attr]
        self.sim = SimulatedNvml(
            self.layout.fleet, seed=self.layout.seed, proc_root=self.root / "proc"
        )
        # Without a kubelet, only the simulator side is built: layouts are deterministic, so
        # a process holding just the simulator (an exporter under benchmark) sees the same
        # GPUs, pids and pod UIDs as another process holding the kubelet side.
        self.kubelet: FakeKubelet | None = None
        if with_kubelet:
            from gpufleet.lab.kubelet import kubelet

            self.kubelet = kubelet.FakeKubelet(self.root / "kubelet", rate_limit=rate_limit)
        self.pods: dict[tuple[str, str], SimPod] = {}

    def __enter__(self) -> "SimNode":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the kubelet and schedule the layout's pods."""
        if self.kubelet:
            self.kubelet.start()
        for index, (name, resource, ids) in enumerate(_plan(self.sim, self.layout)):
            self.add_pod(NAMESPACES[index % len(NAMESPACES)], name, resource, ids)

    def exporter_settings(self, **overrides: object) -> "ExporterSettings":
        """Settings for an exporter attributing this node's pods: Kubernetes and pod_uid on,
        the kubelet socket and checkpoint and the proc root this node has. `overrides` are
        further `ExporterSettings` fields (and may replace these)."""
        from gpufleet.exporter.settings import ExporterSettings

        fields: dict[str, object] = {
            "kubernetes": True,
            "kubernetes_enable_pod_uid": True,
            "proc_root": self.sim.proc_root,
        }
        if self.kubelet:
            fields["pod_resources_kubelet_socket"] = self.kubelet.pod_resources_socket
            fields["kubelet_checkpoint"] = self.kubelet.checkpoint_path
        return ExporterSettings(**{**fields, **overrides})

    def add_pod(
        self, namespace: str, name: str, resource: str, device_ids: tuple[str, ...]
    ) -> SimPod:
        """Allocate devices to a new pod and start its GPU process."""
        uid = _uid(self.layout.seed, f"{namespace}/{name}")
        shared = is_replica(device_ids[0])
        share = 1.0 / self.layout.replicas if shared else 0.9
        memory = _memory_bytes(uid, shared=shared, mig=device_ids[0].startswith("MIG-"))
        pid = self.sim.spawn_process(
            base_id(device_ids[0]), pod_uid=uid, used_memory_bytes=memory, sm_share=share
        )
        pod = SimPod(
            namespace=namespace,
            name=name,
            uid=uid,
            container="main",
            resource_name=resource,
            device_ids=device_ids,
            pid=pid,
        )
        self.pods[(namespace, name)] = pod
        if self.kubelet:
            from gpufleet.lab.kubelet.kubelet import (
                ContainerAllocation,
                DeviceAllocation,
                PodAllocation,
            )

            self.kubelet.add_pod(
                PodAllocation(
                    namespace=namespace,
                    name=name,
                    uid=uid,
                    containers=(
                        ContainerAllocation(
                            name="main",
                            devices=(
                                DeviceAllocation(resource_name=resource, device_ids=device_ids),
                            ),
                        ),
                    ),
                )
            )
        return pod

    def remove_pod(self, namespace: str, name: str) -> None:
        """Delete a pod: its allocation leaves the kubelet and its process exits."""
        pod = self.pods.pop((namespace, name))
        if self.kubelet:
            self.kubelet.remove_pod(namespace, name)
        self.sim.kill_process(pod.pid)

    def close(self) -> None:
        if self.kubelet:
            self.kubelet.stop()
        self.sim.close()
        if self._tmp:
            self._tmp.cleanup()
