"""A simulated GPU node: simulated NVML, a fake kubelet, and pods running GPU processes.

`gpufleet lab`, the end-to-end tests and the benchmark all build their node here, so they
exercise the same layout: whole GPUs, MIG slices and time-sliced replicas, each allocated
to pods the way NVIDIA's device plugin names them, and each pod running a process whose
`/proc/<pid>/cgroup` carries its pod UID. The device-plugin issue will let the plugin make
these allocations; until then this module plays its part.
"""

import contextlib
import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.core.device_ids import base_id, is_replica, replica_id
from gpufleet.lab.dra import DRIVER, device_names, resource_slice
from gpufleet.lab.nvml.api import SimulatedNvml

# The simulator side alone imports neither grpc, pydantic nor the kubernetes client: an
# exporter under benchmark without -k, and a peer exporter in its own environment, hold
# just that side.
if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from gpufleet.exporter.settings import ExporterSettings
    from gpufleet.lab.kubelet.kubelet import FakeKubelet, RateLimit

# The benchmark's node (issue 2): 8 x H100, two of them MIG 7 x 1g.10gb.
DEFAULT_FLEET = "6xH100+2xH100:mig=7x1g.10gb"
WHOLE_GPUS = 2  # non-MIG GPUs given whole to a pod each (`NodeLayout.whole_gpus`)
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

    Non-MIG GPUs: the first `whole_gpus` go to one pod each (the first `dra_gpus` of them
    through a DRA claim of `gpu.nvidia.com`, the others through the device plugin); the
    rest are time-sliced into `replicas` shares (`GPU-<uuid>::<n>`), one pod per share. Each
    MIG slice goes to a pod.
    """

    fleet: str = DEFAULT_FLEET
    whole_gpus: int = WHOLE_GPUS
    replicas: int = 22
    shared_resource: str = "nvidia.com/gpu.shared"  # renameByDefault: true
    seed: int = 0
    node_name: str = "gpufleet-lab"  # the Node, and the DRA driver's pool
    dra_gpus: int = 0
    # Before every pod's name: a pod's name is unique in its namespace across the cluster,
    # so a second node's pods must not repeat the first's (`train-0` twice summed two pods
    # in every per-pod panel and rule).
    pod_prefix: str = ""


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
    plan: list[tuple[str, str, tuple[str, ...]]] = []
    whole = 0
    for gpu in sim.devices:
        if gpu.mig_enabled:
            for mig in gpu.mig:
                name = f"mig-{gpu.index}-{mig.gi_id}"
                plan.append((name, f"nvidia.com/mig-{mig.profile}", (mig.uuid,)))
        elif whole < layout.whole_gpus:
            whole += 1
            if whole <= layout.dra_gpus:
                plan.append((f"claim-{gpu.index}", DRIVER, (gpu.uuid,)))
            else:
                plan.append((f"train-{gpu.index}", "nvidia.com/gpu", (gpu.uuid,)))
        else:
            for n in range(layout.replicas):
                name = f"serve-{gpu.index}-{n}"
                plan.append((name, layout.shared_resource, (replica_id(gpu.uuid, n),)))
    return [(f"{layout.pod_prefix}{name}", resource, ids) for name, resource, ids in plan]


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
        self._core: Any = None  # a CoreV1Api, once `publish` was called

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
            namespace = NAMESPACES[index % len(NAMESPACES)]
            if resource == DRIVER:
                self.add_claim_pod(namespace, name, ids)
            else:
                self.add_pod(namespace, name, resource, ids)

    def publish(self, api: "ApiClient") -> None:
        """Show this node to a Kubernetes API (the lab's fake API server), through the
        official client: its namespaces, its pods (bound to `node_name`, labelled
        `app.kubernetes.io/name` with their workload), and the DRA driver's ResourceSlice.
        From then on, pods added or removed here are created or deleted there too."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        core = client.CoreV1Api(api)
        for namespace in NAMESPACES:
            with contextlib.suppress(ApiException):  # already there
                core.create_namespace({"metadata": {"name": namespace}})
        client.ResourceV1Api(api).create_resource_slice(
            resource_slice(self.sim, self.layout.node_name)
        )
        self._core = core
        for pod in self.pods.values():
            self._publish_pod(pod)

    def _publish_pod(self, pod: SimPod) -> None:
        if self._core is None:
            return
        # train, serve, mig, claim
        workload = pod.name.removeprefix(self.layout.pod_prefix).split("-", 1)[0]
        self._core.create_namespaced_pod(
            pod.namespace,
            {
                "metadata": {
                    "name": pod.name,
                    "labels": {"app.kubernetes.io/name": workload, "gpufleet.dev/lab": "true"},
                },
                "spec": {
                    "nodeName": self.layout.node_name,
                    "containers": [{"name": pod.container, "image": "gpufleet/lab"}],
                },
            },
        )

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
        shared = is_replica(device_ids[0])
        pod = self._start_pod(
            namespace,
            name,
            resource,
            device_ids,
            sm_share=1.0 / self.layout.replicas if shared else 0.9,
        )
        uid = pod.uid
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

    def add_claim_pod(self, namespace: str, name: str, device_uuids: tuple[str, ...]) -> SimPod:
        """A pod whose one ResourceClaim (`<name>-gpu`, in its namespace) was allocated the
        `gpu.nvidia.com` devices with these UUIDs (whole GPUs or MIG devices, as the
        driver's ResourceSlice names them); its GPU process runs on the first."""
        from gpufleet.lab.kubelet.kubelet import (
            ClaimAllocation,
            ClaimDevice,
            ContainerAllocation,
            PodAllocation,
        )

        pod = self._start_pod(namespace, name, DRIVER, device_uuids, sm_share=0.9)
        uid = pod.uid
        names = device_names(self.sim)
        claim = ClaimAllocation(
            claim_name=f"{name}-gpu",
            claim_namespace=namespace,
            devices=tuple(
                ClaimDevice(
                    driver_name=DRIVER,
                    pool_name=self.layout.node_name,
                    device_name=names[device],
                    cdi_devices=(f"k8s.{DRIVER}/device={names[device]}",),
                )
                for device in device_uuids
            ),
        )
        if self.kubelet:
            self.kubelet.add_pod(
                PodAllocation(
                    namespace=namespace,
                    name=name,
                    uid=uid,
                    containers=(ContainerAllocation(name="main", claims=(claim,)),),
                )
            )
        return pod

    def _start_pod(
        self,
        namespace: str,
        name: str,
        resource: str,
        device_ids: tuple[str, ...],
        *,
        sm_share: float,
    ) -> SimPod:
        """Record a pod and start its GPU process on its first device."""
        uid = _uid(self.layout.seed, f"{namespace}/{name}")
        first = device_ids[0]
        memory = _memory_bytes(uid, shared=is_replica(first), mig=first.startswith("MIG-"))
        pid = self.sim.spawn_process(
            base_id(first), pod_uid=uid, used_memory_bytes=memory, sm_share=sm_share
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
        self._publish_pod(pod)
        return pod

    def remove_pod(self, namespace: str, name: str) -> None:
        """Delete a pod: its allocation leaves the kubelet and its process exits."""
        pod = self.pods.pop((namespace, name))
        if self._core is not None:
            self._core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        if self.kubelet:
            self.kubelet.remove_pod(namespace, name)
        self.sim.kill_process(pod.pid)

    def close(self) -> None:
        if self.kubelet:
            self.kubelet.stop()
        self.sim.close()
        if self._tmp:
            self._tmp.cleanup()
